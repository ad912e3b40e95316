import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AllExceptionsFilter } from '../common/exception.filter';
import { BootService } from './boot.service';

type Query = Record<string, unknown>;

/**
 * The boot path without framework machinery. The BootController stays what documents these
 * routes (OpenAPI, Swagger UI) and what Nest registers; when Fastify registers them, their handlers
 * are swapped for direct calls of BootService: no guard (all three are public), no pipe, no
 * execution context, no interceptor chain. Same service code, same headers, the same error shape
 * (the global filter's `toBody`). The profile of a boot storm showed Nest's per-request wrapper as
 * the largest cost after Fastify itself.
 */
export function installFastBootRoutes(app: NestFastifyApplication): void {
  const fastify = app.getHttpAdapter().getInstance();
  let boot: BootService | undefined;
  const filter = new AllExceptionsFilter();
  const handlers: Record<string, (b: BootService, q: Query) => unknown> = {
    '/boot-vars': (b, q) => b.bootVars(q.mac, q.hostname, q.format ?? 'ipxe', q.nonce, q.sig),
    '/boot-menu': (b, q) => b.bootMenu(q.mac, q.hostname, q.format ?? 'ipxe', q.nonce, q.sig),
    '/devices/challenge': (b, q) => b.challenge(q.mac, q.format ?? 'ipxe'),
  };
  fastify.addHook('onRoute', (route) => {
    const fn = route.method === 'GET' ? handlers[route.url] : undefined;
    if (!fn) return;
    route.handler = (req: FastifyRequest, reply: FastifyReply) => {
      reply.header('cache-control', 'no-store');
      try {
        if (!boot) boot = app.get<BootService, BootService>(BootService);
        const b = boot!;
        return Promise.resolve(fn(b, req.query as Query));
      } catch (e) {
        const body = filter.toBody(e);
        reply.code(body.statusCode).header('content-type', 'application/json; charset=utf-8');
        return Promise.resolve(body);
      }
    };
  });
}
