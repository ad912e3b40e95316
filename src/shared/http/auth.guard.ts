import { CanActivate, ExecutionContext, Inject, Injectable, Optional, SetMetadata } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { createHash, timingSafeEqual } from 'node:crypto';
import { ApiError } from './api-error';

export const PUBLIC_ROUTE = 'kurrent:public';
/** Injection token of the expected bearer token ('' disables auth): IPXE_CP_TOKEN or IPXE_AGENT_TOKEN. */
export const BEARER_TOKEN = 'kurrent:bearer-token';
/**
 * Handlers made public by configuration rather than by decorator (GET /metrics with
 * IPXE_CP_METRICS_PUBLIC=true), so one process's setting never leaks into another app's class.
 */
export const PUBLIC_HANDLERS = 'kurrent:public-handlers';
/** Marks a route as reachable without the Bearer token (healthz, boot-vars, devices/report). */
export const Public = () => SetMetadata(PUBLIC_ROUTE, true);

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Bearer token on every route not marked @Public; compared in constant time. */
@Injectable()
export class AuthGuard implements CanActivate {
  private readonly expected: Buffer | null;

  constructor(
    private readonly reflector: Reflector,
    @Inject(BEARER_TOKEN) token: string,
    @Optional() @Inject(PUBLIC_HANDLERS) private readonly publicHandlers: readonly unknown[] = [],
  ) {
    this.expected = token ? digest(token) : null;
  }

  canActivate(ctx: ExecutionContext): boolean {
    if (!this.expected) return true;
    if (this.reflector.get<boolean>(PUBLIC_ROUTE, ctx.getHandler())) return true;
    if (this.publicHandlers.includes(ctx.getHandler())) return true;
    const header = ctx.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>().headers
      .authorization;
    const m = typeof header === 'string' ? /^Bearer\s+(.+)$/i.exec(header.trim()) : null;
    // Hashing both sides gives equal-length buffers, so timingSafeEqual never throws or leaks length.
    if (m && timingSafeEqual(digest(m[1]), this.expected)) return true;
    throw new ApiError(401, 'missing or invalid bearer token');
  }
}
