import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AllExceptionsFilter } from '../common/exception.filter';
import { BootController } from './boot.controller';

type BootRequest = FastifyRequest<{ Querystring: Record<string, unknown> }>;

/**
 * The boot path without framework machinery. The BootController stays what documents these
 * routes (OpenAPI, Swagger UI) and what Nest registers; when Fastify registers them, their handlers
 * are swapped for direct calls of the same controller methods: no guard (all three are public), no pipe, no
 * execution context, no interceptor chain. Same code, same headers, the same error shape
 * (the global filter's `toBody`). The profile of a boot storm showed Nest's per-request wrapper as
 * the largest cost after Fastify itself.
 */
export function installFastBootRoutes(app: NestFastifyApplication): void {
  const fastify = app.getHttpAdapter().getInstance();
  const filter = new AllExceptionsFilter();
  let controller: BootController | undefined;
  const handlers: Record<string, (c: BootController, req: BootRequest) => unknown> = {
    '/boot-vars': (c, req) => c.bootVars(req),
    '/boot-menu': (c, req) => c.bootMenu(req),
    '/devices/challenge': (c, req) => c.challenge(req),
  };
  fastify.addHook('onRoute', (route) => {
    const fn = route.method === 'GET' ? handlers[route.url] : undefined;
    if (!fn) return;
    route.handler = (req: FastifyRequest, reply: FastifyReply) => {
      reply.header('cache-control', 'no-store');
      try {
        if (!controller) controller = app.get<BootController, BootController>(BootController);
        return Promise.resolve(fn(controller!, req as BootRequest));
      } catch (e) {
        const body = filter.toBody(e);
        reply.code(body.statusCode).header('content-type', 'application/json; charset=utf-8');
        return Promise.resolve(body);
      }
    };
  });
}
