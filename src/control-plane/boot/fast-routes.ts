import { Logger, type Type } from '@nestjs/common';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import { parse as parseQuery } from 'fast-querystring';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { MetricsService } from '../metrics/metrics.service';
import { PUBLIC_ROUTE } from '../../shared/http/auth.guard';
import { AllExceptionsFilter } from '../../shared/http/exception.filter';
import { DevicesController } from '../devices/devices.controller';
import type { ReportQuery } from '../devices/dto/report.dto';
import { BootController } from './boot.controller';
import { IPXE_SCRIPTS } from './ipxe-scripts.service';
import { EncodedAnswer } from './encoded-answer';
import { BootFront, FrontRoute, installBootFront } from './boot-front';

type Query = Record<string, unknown>;

export interface FastRoute<C> {
  controller: Type<C>;
  /** The controller method the route calls: its decorators say whether it is public. */
  method: keyof C & string;
  call: (c: C, req: FastifyRequest<{ Querystring: Query }>) => unknown;
  /** The route as Fastify names it (metrics, access log), when the path is one value of a parameter. */
  label?: string;
}

export const route = <C>(controller: Type<C>, method: keyof C & string, call: FastRoute<C>['call'], label?: string): FastRoute<unknown> =>
  ({ controller, method, call, ...(label ? { label } : {}) }) as FastRoute<unknown>;

/**
 * The fast path skips the guard, so it may only serve handlers the guard would let through
 * without a token: each must carry @Public(). Checked at start: a route whose decorator was
 * removed fails the start instead of staying open by this table.
 */
export function assertPublic(routes: Record<string, FastRoute<unknown>>): void {
  for (const [url, r] of Object.entries(routes)) {
    const handler = (r.controller.prototype as Record<string, unknown>)[r.method];
    if (typeof handler !== 'function' || Reflect.getMetadata(PUBLIC_ROUTE, handler) !== true) {
      throw new Error(`the boot fast path would serve GET ${url} (${r.controller.name}.${r.method}) without the auth guard, but it is not marked @Public()`);
    }
  }
}

/** What writes one access-log line (the same fields as the Fastify hook's). */
export type AccessLogLine = (line: { method: string; route: string; url: string; status: number; ms: number; client: string | undefined }) => void;

/**
 * The public routes every worker hits on every boot (`GET` only, no auth, no body, no pipe):
 * /devices/report, /devices/challenge, /boot-vars and /boot-menu. Their Nest controllers stay what
 * documents them (OpenAPI, Swagger UI) and what Nest registers; when Fastify registers them, their
 * handlers are swapped for direct calls of the same controller methods: no guard (all are
 * public), no pipe (their queries are parsed by hand), no execution context, no interceptor chain.
 * Same code, same headers (`Cache-Control: no-store`, text/plain for strings), the same error
 * shape (the global filter's `toBody`). The profile of a boot storm showed Nest's per-request
 * wrapper as the largest cost after Fastify itself.
 */
export function installFastBootRoutes(app: NestFastifyApplication, opts: { rawPaths: readonly string[]; metrics: MetricsService; accessLog: AccessLogLine | null }): void {
  const fastify = app.getHttpAdapter().getInstance();
  const filter = new AllExceptionsFilter();
  const routes: Record<string, FastRoute<unknown>> = {
    '/boot-vars': route(BootController, 'bootVars', (c, req) => c.bootVars(req)),
    '/boot-menu': route(BootController, 'bootMenu', (c, req) => c.bootMenu(req)),
    '/devices/challenge': route(BootController, 'challenge', (c, req) => c.challenge(req)),
    // What @ClientIp() gives the Nest route: req.ip.
    '/devices/report': route(DevicesController, 'report', (c, req) => c.report(req.query as ReportQuery, req.ip ?? 'unknown')),
  };
  // The scripts iPXE chains over the same keep-alive connection before and after the boot routes
  // (boot.ipxe.cfg first): served by the raw path and the boot front too, so a whole boot's
  // connection stays off node:http. Fastify keeps its own `/ipxe/:name` route for everything else.
  const scripts: Record<string, FastRoute<unknown>> = {};
  for (const name of IPXE_SCRIPTS) scripts[`/ipxe/${name}`] = route(BootController, 'ipxeScript', (c) => c.ipxeScript(name), '/ipxe/:name');
  assertPublic({ ...routes, ...scripts });
  const controllers = new Map<Type<unknown>, unknown>();
  const controllerOf = (t: Type<unknown>) => {
    let c = controllers.get(t);
    if (c === undefined) controllers.set(t, (c = app.get(t)));
    return c;
  };
  const fail = (reply: FastifyReply, e: unknown) => {
    const body = filter.toBody(e);
    reply.code(body.statusCode).header('content-type', 'application/json; charset=utf-8');
    return body;
  };
  // A cached answer goes out as its text with its own content type.
  const wire = (reply: FastifyReply, out: unknown) => {
    if (!(out instanceof EncodedAnswer)) return out;
    reply.header('content-type', out.contentType);
    return out.text;
  };
  fastify.addHook('onRoute', (r) => {
    const fast = r.method === 'GET' ? routes[r.url] : undefined;
    if (!fast) return;
    r.handler = (req: FastifyRequest, reply: FastifyReply) => {
      reply.header('cache-control', 'no-store');
      try {
        const out = fast.call(controllerOf(fast.controller), req as FastifyRequest<{ Querystring: Query }>);
        if (out instanceof Promise) return out.then((v: unknown) => wire(reply, v)).catch((e: unknown) => fail(reply, e));
        return Promise.resolve(wire(reply, out));
      } catch (e) {
        return Promise.resolve(fail(reply, e));
      }
    };
  });

  // The raw path: see installRawBootPath.
  const raw: Record<string, FastRoute<unknown>> = {};
  for (const p of opts.rawPaths) raw[p] = routes[p];
  if (opts.rawPaths.length) Object.assign(raw, scripts);
  if (opts.rawPaths.length) installRawBootPath(app, raw, controllerOf, filter, opts.metrics, opts.accessLog);
}

/**
 * The four routes of every boot (on unless IPXE_CP_RAW_BOOT_PATH=false), answered in the HTTP
 * server's request listener, before Fastify, and access-logged here when IPXE_CP_ACCESS_LOG=true:
 * a plain `GET` of exactly that path with a query string gets the same controller call, the same query object (Fastify's own parser, fast-querystring, as find-my-way
 * calls it), the same `req.ip`, headers, body and error shape as through Fastify, without
 * Fastify's request and reply objects and the hook chains every other route needs (bench:boot:
 * they were most of what separated /boot-vars from a bare Fastify route). Anything else (another
 * method, a path that is not byte-for-byte ours, a `#` in the URL, the server closing) is passed
 * to Fastify untouched. test/e2e/raw-boot-path.e2e-spec.ts checks the two paths answer alike.
 */
function installRawBootPath(
  app: NestFastifyApplication,
  routes: Record<string, FastRoute<unknown>>,
  controllerOf: (t: Type<unknown>) => unknown,
  filter: AllExceptionsFilter,
  metrics: MetricsService,
  accessLog: AccessLogLine | null,
): void {
  const server = app.getHttpServer() as Server;
  const fastify = app.getHttpAdapter().getInstance();
  const fastifyListeners = server.listeners('request') as ((req: IncomingMessage, res: ServerResponse) => void)[];
  let ready = false;
  let closing = false;
  fastify.addHook('onReady', (done) => {
    ready = true;
    done();
  });
  let front: BootFront | null = null;
  const frontLog = new Logger('BootFront');
  // While closing, Fastify answers 503 with Connection: close: leave every request to it.
  fastify.addHook('preClose', (done) => {
    closing = true;
    front?.closeIdle();
    done();
  });
  // Requests answered here are counted as Fastify's onResponse hook counts the others.
  const send = (req: IncomingMessage, res: ServerResponse, status: number, out: unknown, route: string, t0: number) => {
    const ms = performance.now() - t0;
    metrics.observe('GET', route, status, ms / 1000);
    accessLog?.({ method: 'GET', route, url: (req.url ?? '').split('?')[0], status, ms: Math.round(ms), client: req.socket.remoteAddress });
    if (out instanceof EncodedAnswer) {
      // A cache hit: its text encoded once, when the answer was cached; the headers say its byte length.
      res.writeHead(status, out.headers);
      res.end(out.text, 'utf8');
      return;
    }
    const text = typeof out === 'string';
    const body = text ? out : JSON.stringify(out);
    res.writeHead(status, {
      'cache-control': 'no-store',
      'content-type': text ? 'text/plain; charset=utf-8' : 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(body),
    });
    res.end(body);
  };
  const fail = (req: IncomingMessage, res: ServerResponse, e: unknown, route: string, t0: number) => {
    const body = filter.toBody(e);
    send(req, res, body.statusCode, body, route, t0);
  };
  const paths = Object.keys(routes);
  const handle = (req: IncomingMessage, res: ServerResponse): boolean => {
    if (req.method !== 'GET' || !ready || closing) return false;
    const t0 = performance.now();
    const url = req.url ?? '';
    const q = url.indexOf('?');
    // The path is matched in place (no substring per request: bench:boot-path counts bytes).
    let path: string | undefined;
    for (let i = 0; i < paths.length; i++) if ((q < 0 ? url.length : q) === paths[i].length && url.startsWith(paths[i])) path = paths[i];
    const fast = path === undefined ? undefined : routes[path];
    if (path === undefined || !fast || url.includes('#', q)) return false;
    const query = q < 0 || q === url.length - 1 ? {} : parseQuery(url.slice(q + 1));
    const request = { query, ip: req.socket.remoteAddress } as FastifyRequest<{ Querystring: Query }>;
    const label = fast.label ?? path;
    try {
      const out = fast.call(controllerOf(fast.controller), request);
      if (out instanceof Promise)
        out.then(
          (v) => send(req, res, 200, v, label, t0),
          (e: unknown) => fail(req, res, e, label, t0),
        );
      else send(req, res, 200, out, label, t0);
    } catch (e) {
      fail(req, res, e, label, t0);
    }
    return true;
  };
  server.removeAllListeners('request');
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (handle(req, res)) return;
    for (const l of fastifyListeners) l.call(server, req, res);
  });

  // Before node:http itself: the boot front (boot-front.ts) answers these routes straight off the
  // socket and hands a connection to node:http (and so to the listener above) at its first
  // request of any other kind.
  const frontRoutes: Record<string, FrontRoute> = {};
  const labels: Record<string, string> = {};
  for (const [p, r] of Object.entries(routes)) {
    frontRoutes[p] = (query, ip) => r.call(controllerOf(r.controller), { query, ip } as FastifyRequest<{ Querystring: Query }>);
    labels[p] = r.label ?? p;
  }
  front = installBootFront(server, {
    routes: frontRoutes,
    toBody: (e) => filter.toBody(e),
    answered: (path, status, ms, client) => {
      metrics.bootFront.answered++;
      metrics.observe('GET', labels[path], status, ms / 1000);
      accessLog?.({ method: 'GET', route: labels[path], url: path, status, ms: Math.round(ms), client });
    },
    closing: () => !ready || closing,
    handedOver: () => metrics.bootFront.handedOver++,
    fault: (e) => frontLog.error({ err: e }, 'boot front: connection closed after an internal error'),
  });
}
