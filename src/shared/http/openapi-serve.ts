import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import { OpenAPIObject, SwaggerModule } from '@nestjs/swagger';
import { registerSchemas } from './validation';

/**
 * Serves /docs, /openapi.json (and /openapi.yaml when asked) from a document built on first use:
 * the first request for it, or the first body validation (the spec says where null is allowed).
 * Building it walks every controller and DTO (~0.1 s), which start-up need not wait for.
 */
export function serveOpenApi(app: NestFastifyApplication, build: (app: NestFastifyApplication) => OpenAPIObject, yaml: boolean): void {
  let doc: OpenAPIObject | undefined;
  const get = () => (doc ??= build(app));
  registerSchemas(() => get().components?.schemas);
  SwaggerModule.setup('docs', app, get, { jsonDocumentUrl: 'openapi.json', ...(yaml ? { yamlDocumentUrl: 'openapi.yaml' } : {}) });
  // Swagger UI's page loads its assets relative to /docs (`./docs/swagger-ui.css`): served at
  // /docs/ the page came up blank. That spelling is sent to the one that works.
  app
    .getHttpAdapter()
    .getInstance()
    .addHook('onRequest', (req, reply, done) => {
      if (req.url === '/docs/' || req.url.startsWith('/docs/?')) return void reply.redirect(`/docs${req.url.slice(6)}`, 301);
      done();
    });
}
