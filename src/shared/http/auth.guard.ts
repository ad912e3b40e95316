import { CanActivate, ExecutionContext, Inject, Injectable, Optional, SetMetadata } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { createHash, timingSafeEqual } from 'node:crypto';
import { ApiError } from './api-error';
import { checkTransferTicket, TRANSFER_TICKET_HEADER } from '../transfer-ticket';

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
export const TRANSFER_READABLE = 'kurrent:transfer-readable';
/**
 * Agent routes that read one master version (`:name`, `:version`): reachable with a transfer
 * ticket for that version (signed with this agent's token by the control plane) instead of the
 * token itself, so a receiving agent never holds the sender's token.
 */
export const TransferReadable = () => SetMetadata(TRANSFER_READABLE, true);

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Bearer token on every route not marked @Public; compared in constant time. */
@Injectable()
export class AuthGuard implements CanActivate {
  private readonly expected: Buffer | null;

  constructor(
    private readonly reflector: Reflector,
    @Inject(BEARER_TOKEN) private readonly token: string,
    @Optional() @Inject(PUBLIC_HANDLERS) private readonly publicHandlers: readonly unknown[] = [],
  ) {
    this.expected = token ? digest(token) : null;
  }

  canActivate(ctx: ExecutionContext): boolean {
    if (!this.expected) return true;
    if (this.reflector.get<boolean>(PUBLIC_ROUTE, ctx.getHandler())) return true;
    if (this.publicHandlers.includes(ctx.getHandler())) return true;
    const req = ctx.switchToHttp().getRequest<{ headers: Record<string, string | undefined>; params?: Record<string, string> }>();
    const header = req.headers.authorization;
    const m = typeof header === 'string' ? /^Bearer\s+(.+)$/i.exec(header.trim()) : null;
    // Hashing both sides gives equal-length buffers, so timingSafeEqual never throws or leaks length.
    if (m && timingSafeEqual(digest(m[1]), this.expected)) return true;
    const ticket = req.headers[TRANSFER_TICKET_HEADER];
    if (typeof ticket === 'string' && this.reflector.get<boolean>(TRANSFER_READABLE, ctx.getHandler())) {
      const version = Number(req.params?.version);
      if (Number.isInteger(version) && checkTransferTicket(this.token, ticket, req.params?.name ?? '', version, Math.floor(Date.now() / 1000))) return true;
      throw new ApiError(401, 'invalid or expired transfer ticket (it reads one version, until it expires)');
    }
    throw new ApiError(401, 'missing or invalid bearer token');
  }
}
