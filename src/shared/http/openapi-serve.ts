import * as fs from 'node:fs';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import { OpenAPIObject, SwaggerModule } from '@nestjs/swagger';
import { registerSchemas } from './validation';

/**
 * The OpenAPI document `npm run build` rendered beside the bundle (the committed spec's text), or
 * null when there is none (an unbundled run, the tests) or it cannot be read: the caller builds it.
 */
export function readPrebuiltSpec(file: string): OpenAPIObject | null {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8')) as OpenAPIObject;
  } catch {
    return null;
  }
}

/**
 * Serves /docs, /openapi.json (and /openapi.yaml when asked) from a document made on first use:
 * the first request for it, or the first body validation (the spec says where null is allowed).
 * `prebuilt` supplies the one the build rendered; only without it is the document built here.
 * Building walks every controller and DTO: 0.3-0.4 s of one synchronous turn (any fleet size) on
 * this machine, which stalled every request in flight behind the first body validation after a
 * start. Start-up does not wait for either.
 */
export function serveOpenApi(
  app: NestFastifyApplication,
  build: (app: NestFastifyApplication) => OpenAPIObject,
  yaml: boolean,
  prebuilt: () => OpenAPIObject | null = () => null,
): void {
  let doc: OpenAPIObject | undefined;
  const get = () => (doc ??= prebuilt() ?? build(app));
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
