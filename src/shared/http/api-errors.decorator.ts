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
  507: 'Insufficient storage: the state volume is full. Nothing was changed; retry once space is freed. (A binding change whose ledger commit succeeded but whose dhcp-hosts.conf could not be written says "the change is committed": the file is written again every 2 s.)',
};

const STORAGE_503 = 'The state directory is not writable (read-only volume). Nothing was changed.';

/**
 * Documents a bearer-protected operation and its error responses, all with the one ErrorDto
 * shape. `public` routes get no security and no 401; `writes` routes also document the storage
 * failures (503 read-only, 507 full).
 */
export function ApiErrors(...codes: (number | [number, string] | 'public' | 'writes')[]) {
  const isPublic = codes.includes('public');
  const list = codes.filter((c): c is number | [number, string] => c !== 'public' && c !== 'writes');
  if (!isPublic) list.unshift(401);
  // Routes that write the ledger or settings: a full disk is 507, a read-only one 503.
  if (codes.includes('writes')) {
    const i = list.findIndex((c) => c === 503 || (Array.isArray(c) && c[0] === 503));
    if (i >= 0) list[i] = [503, `${DEFAULTS[503]} Or: ${STORAGE_503}`];
    else list.push([503, STORAGE_503]);
    list.push(507);
  }
  const decorators = list.map((c) => {
    const [status, description] = Array.isArray(c) ? c : [c, DEFAULTS[c] ?? 'Error.'];
    return ApiResponse({ status, description, type: ErrorDto });
  });
  return applyDecorators(...(isPublic ? [] : [ApiBearerAuth()]), ...decorators);
}
