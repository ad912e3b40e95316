import * as path from 'node:path';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, NestFastifyApplication } from '@nestjs/platform-fastify';
import { OpenAPIObject, SwaggerModule } from '@nestjs/swagger';
import { Logger, PinoLogger } from 'nestjs-pino';
import { AppModule } from './app.module';
import { AppConfig } from './config/app-config';
import { operationId } from '../shared/http/operation-ids';
import { BODY_LIMIT, MAX_PARAM_LENGTH } from '../shared/http/http-limits';
import { readPrebuiltSpec, serveOpenApi } from '../shared/http/openapi-serve';
import { strictHttp } from '../shared/http/routes';
import { AccessLogLine, installFastBootRoutes } from './boot/fast-routes';
import { tidySpec } from '../shared/http/openapi-tidy';
import { documentBase } from '../shared/http/openapi-info';
import { installWebUi } from './web-ui/web-ui';
import { MetricsService } from './metrics/metrics.service';

export { BODY_LIMIT, MAX_PARAM_LENGTH, operationId };

export function buildOpenApi(app: NestFastifyApplication): OpenAPIObject {
  const cfg = documentBase(
    'Kurrent control plane',
    'Control plane of a diskless bare-metal fleet: devices, workers, bindings, disks, boot variables, audit. ' +
      'Every route needs `Authorization: Bearer <IPXE_CP_TOKEN>` when a token is set, except those whose `security` is empty: ' +
      'the boot path (/boot-vars, /boot-menu, /devices/report, /devices/challenge, /ipxe/{name}), the booted OS\'s /boots/os-up, and /healthz; ' +
      '/metrics too with IPXE_CP_METRICS_PUBLIC=true. Outside this document, /docs (Swagger UI), /openapi.json and the web UI\'s static files need no token either.',
    4839,
    ['agents', 'boot', 'boots', 'changes', 'credentials', 'devices', 'health', 'masters', 'metrics', 'operations', 'reconciler', 'settings', 'workers'],
  )
    .addBearerAuth({ type: 'http', scheme: 'bearer', description: 'An opaque token (IPXE_CP_TOKEN), not a JWT.' })
    .build();
  return tidySpec(SwaggerModule.createDocument(app, cfg, { operationIdFactory: operationId }));
}

/**
 * Routes every worker hits on every boot (and /healthz, which probes hit): not access-logged
 * unless IPXE_CP_ACCESS_LOG=true; the boot routes among them are answered before Fastify then
 * (installFastBootRoutes). Denied and refused boots are audited either way.
 */
export const BOOT_PATH_ROUTES = new Set(['/boot-vars', '/boot-menu', '/devices/challenge', '/devices/report', '/healthz']);
/** Routes every boot hits: no access-log line unless IPXE_CP_ACCESS_LOG (the iPXE scripts too). */
const QUIET_ROUTES = new Set([...BOOT_PATH_ROUTES, '/ipxe/:name']);

/**
 * One access-log line per API request (method, route, status, duration, client), without headers
 * or bodies, so tokens and keys cannot leak. The boot path is skipped: at fleet scale a line per
 * boot request costs more than the request itself (see bench:boot).
 */
function installAccessLog(app: NestFastifyApplication, config: AppConfig, line: AccessLogLine): void {
  const metrics = app.get(MetricsService);
  app
    .getHttpAdapter()
    .getInstance()
    .addHook('onResponse', (req, reply, done) => {
      const route = req.routeOptions.url ?? req.url;
      // The route template labels the series; an unmatched URL must not become a label (a MAC could).
      metrics.observe(req.method, req.routeOptions.url ? route : 'unmatched', reply.statusCode, reply.elapsedTime / 1000);
      if (config.accessLog || !QUIET_ROUTES.has(route)) {
        line({ method: req.method, route, url: req.url.split('?')[0], status: reply.statusCode, ms: Math.round(reply.elapsedTime), client: req.ip });
      }
      done();
    });
}

/**
 * The OpenAPI document `npm run build` writes beside dist/bundle/kurrent.js (scripts/bundle.ts).
 * Run from the bundle, __dirname is dist/bundle; unbundled (dist/src, the tests) there is none.
 */
export const PREBUILT_SPEC = path.join(__dirname, 'control-plane.openapi.json');

/** Builds the control-plane app (used by main.ts, the tests and the OpenAPI script). */
export async function createApp(config: AppConfig, opts: { quiet?: boolean; prebuiltSpec?: string } = {}): Promise<NestFastifyApplication> {
  const app = await NestFactory.create<NestFastifyApplication>(
    AppModule.forRoot(config),
    new FastifyAdapter({
      bodyLimit: BODY_LIMIT,
      routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
      trustProxy: false,
      // No Express-style middleware is used (logging is a Fastify hook): skip middie and its per-request hook.
      skipMiddie: true,
      // HTTPS when configured: iPXE pins this certificate (see `npm run tls:pin`).
      ...(config.tls ? { https: { cert: config.tls.cert, key: config.tls.key } } : {}),
    }),
    { bufferLogs: true, logger: opts.quiet ? false : undefined, bodyParser: false },
  );
  strictHttp(app.getHttpAdapter().getInstance());
  const http = await app.resolve(PinoLogger);
  http.setContext('http');
  const accessLine: AccessLogLine = (line) => http.info(line, 'request completed');
  // The boot routes are answered before Fastify (IPXE_CP_RAW_BOOT_PATH), which then also writes
  // their access-log lines when IPXE_CP_ACCESS_LOG asks for them (see installFastBootRoutes).
  installFastBootRoutes(app, {
    rawPaths: config.rawBootPath ? [...BOOT_PATH_ROUTES].filter((r) => r !== '/healthz') : [],
    metrics: app.get(MetricsService),
    accessLog: config.accessLog ? accessLine : null,
  });
  if (!opts.quiet) app.useLogger(app.get(Logger));
  installAccessLog(app, config, accessLine);
  app.enableShutdownHooks();
  serveOpenApi(app, buildOpenApi, true, () => readPrebuiltSpec(opts.prebuiltSpec ?? PREBUILT_SPEC));
  installWebUi(app, config);
  return app;
}
