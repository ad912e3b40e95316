import { applyDecorators } from '@nestjs/common';
import { ApiBearerAuth, ApiResponse } from '@nestjs/swagger';
import { ErrorDto } from './error.dto';

const DEFAULTS: Record<number, string> = {
  400: 'Invalid input; the message names the field. Nothing was changed.',
  401: 'Missing or invalid bearer token.',
  404: 'Not found.',
  409: 'Conflicts with the current ledger state. Nothing was changed.',
  413: 'Request body over 1 MiB.',
  422: 'Unprocessable value.',
  500: 'dnsmasq reload failed (the binding file is already updated), or an internal error with error_id.',
  502: 'Upstream agent failed.',
  503: 'Upstream agent unreachable.',
};

/**
 * Documents a bearer-protected operation and its error responses, all with the one ErrorDto
 * shape. `public` routes get no security and no 401.
 */
export function ApiErrors(...codes: (number | [number, string] | 'public')[]) {
  const isPublic = codes.includes('public');
  const list = codes.filter((c): c is number | [number, string] => c !== 'public');
  if (!isPublic) list.unshift(401);
  const decorators = list.map((c) => {
    const [status, description] = Array.isArray(c) ? c : [c, DEFAULTS[c] ?? 'Error.'];
    return ApiResponse({ status, description, type: ErrorDto });
  });
  return applyDecorators(...(isPublic ? [] : [ApiBearerAuth()]), ...decorators);
}
