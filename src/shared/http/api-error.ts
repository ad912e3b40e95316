import { HttpException, HttpStatus } from '@nestjs/common';

/** A documented error: status + human message (+ optional extra fields such as `agent`). */
export class ApiError extends HttpException {
  constructor(
    status: number,
    message: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message, status);
  }
}

export const badRequest = (message: string, extra?: Record<string, unknown>) =>
  new ApiError(HttpStatus.BAD_REQUEST, message, extra);
export const notFound = (message: string) => new ApiError(HttpStatus.NOT_FOUND, message);
export const conflict = (message: string, extra?: Record<string, unknown>) =>
  new ApiError(HttpStatus.CONFLICT, message, extra);
export const unprocessable = (message: string) => new ApiError(HttpStatus.UNPROCESSABLE_ENTITY, message);
export const internal = (message: string, extra?: Record<string, unknown>) =>
  new ApiError(HttpStatus.INTERNAL_SERVER_ERROR, message, extra);
