import { createParamDecorator, ExecutionContext } from '@nestjs/common';

/** The caller's address, recorded in audit entries as `client`. */
export const ClientIp = createParamDecorator((_: unknown, ctx: ExecutionContext): string => {
  const req = ctx.switchToHttp().getRequest<{ ip?: string }>();
  return req.ip ?? 'unknown';
});
