import { ArgumentsHost, Catch, ExceptionFilter, HttpException, Logger, NotFoundException } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { allowedMethods } from './routes';
import { storageFailure } from '../files/storage-error';
import { ApiError } from './api-error';
import type { ErrorDto } from './error.dto';

/**
 * The single exception filter: every error leaves as ErrorDto. Unknown errors become a 500
 * carrying an error id; the stack goes to the log under that id, never to the client.
 */
@Catch()
export class AllExceptionsFilter implements ExceptionFilter {
  private readonly log = new Logger('Errors');

  catch(exception: unknown, host: ArgumentsHost): void {
    const reply = host.switchToHttp().getResponse<FastifyReply>();
    const req = host.switchToHttp().getRequest<FastifyRequest>();
    // No route for this method, but one for the path: 405 with Allow, not 404.
    if (exception instanceof NotFoundException && /^Cannot [A-Z]+ /.test(exception.message)) {
      const path = req.url.split('?')[0];
      const allowed = allowedMethods(reply.server, path);
      if (allowed.length) {
        const body = this.base(405, `method ${req.method} is not allowed on ${path}; allowed: ${allowed.join(', ')}`);
        reply.code(405).header('allow', allowed.join(', ')).header('content-type', 'application/json; charset=utf-8').send(body);
        return;
      }
    }
    const body = this.toBody(exception);
    reply.code(body.statusCode).header('content-type', 'application/json; charset=utf-8').send(body);
  }

  toBody(exception: unknown): ErrorDto {
    if (exception instanceof ApiError) {
      return { ...this.base(exception.getStatus(), String(exception.message)), ...exception.extra };
    }
    if (exception instanceof HttpException) {
      const status = exception.getStatus();
      const res = exception.getResponse();
      let message = exception.message;
      let errors: unknown;
      if (typeof res === 'object' && res !== null) {
        const r = res as Record<string, unknown>;
        if (Array.isArray(r.message)) message = r.message.join('; ');
        else if (typeof r.message === 'string') message = r.message;
        errors = r.errors;
      }
      if (status === 413) message = 'request body exceeds the 1 MiB limit';
      const body: ErrorDto = this.base(status, message);
      if (Array.isArray(errors)) body.errors = errors as ErrorDto['errors'];
      return body;
    }
    // Fastify's own errors (body too large, bad JSON, unsupported media type) carry a 4xx statusCode.
    const e = exception as { statusCode?: unknown; message?: unknown; code?: unknown };
    if (typeof e?.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
      let message = typeof e.message === 'string' ? e.message : 'bad request';
      if (e.code === 'FST_ERR_CTP_BODY_TOO_LARGE') message = 'request body exceeds the 1 MiB limit';
      return this.base(e.statusCode, message);
    }
    // A full or read-only disk is the operator's to fix: say so instead of a bare 500.
    const storage = storageFailure(exception, (exception as { path?: string })?.path ?? 'the state directory');
    if (storage instanceof ApiError) return this.toBody(storage);
    const errorId = randomUUID();
    this.log.error({ err: exception, error_id: errorId }, `unhandled error ${errorId}`);
    return { ...this.base(500, `internal error (error_id ${errorId})`), error_id: errorId };
  }

  private base(status: number, message: string): ErrorDto {
    return { statusCode: status, error: STATUS_CODES[status] ?? 'Error', message };
  }
}
