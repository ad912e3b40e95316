import fastifyStatic from '@fastify/static';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import type { AppConfig } from '../config/app-config';

/**
 * The web UI: static files of web/dist at /ui/ (one more client of the REST API, no server-side
 * logic), `/` and `/ui` redirect there. Hash routes (/ui/#/devices), so no fallback route is needed.
 * The CSP allows only this origin: the UI loads nothing from elsewhere and no inline script.
 */
export function installWebUi(app: NestFastifyApplication, config: AppConfig): void {
  const fastify = app.getHttpAdapter().getInstance();
  fastify.get('/', (_req, reply) => reply.redirect('/ui/', 302));
  fastify.get('/ui', (_req, reply) => reply.redirect('/ui/', 302));
  if (!config.webDir) {
    fastify.get('/ui/*', (_req, reply) =>
      reply.code(404).send({
        statusCode: 404,
        error: 'Not Found',
        message: 'the web UI is not built: run npm run build:web (or set IPXE_CP_WEB_DIR); the API is unaffected',
      }),
    );
    return;
  }
  fastify.register(fastifyStatic, {
    root: config.webDir,
    prefix: '/ui/',
    decorateReply: false,
    index: 'index.html',
    cacheControl: false,
    setHeaders(res, file) {
      // Vite fingerprints everything under assets/; index.html must be revalidated to pick them up.
      res.setHeader('cache-control', file.includes('/assets/') ? 'public, max-age=31536000, immutable' : 'no-cache');
      res.setHeader(
        'content-security-policy',
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
      );
      res.setHeader('x-content-type-options', 'nosniff');
      res.setHeader('referrer-policy', 'no-referrer');
    },
  });
}
