import { ApiError } from '../http/api-error';

const FULL = new Set(['ENOSPC', 'EDQUOT', 'EFBIG']);
const READ_ONLY = new Set(['EROFS', 'EACCES', 'EPERM']);

/** Is this a storage failure (full or read-only state volume) rather than a bug? */
export function isStorageFailure(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException | null)?.code;
  return typeof code === 'string' && (FULL.has(code) || READ_ONLY.has(code));
}

/**
 * Maps a failed write to the documented answer: a full disk is 507 Insufficient Storage, a
 * read-only or unwritable state directory 503; anything else is returned unchanged. Callers only
 * use this where the failed write changed nothing, so the message can say so.
 */
export function storageFailure(e: unknown, file: string): unknown {
  if (e instanceof ApiError) return e;
  const code = (e as NodeJS.ErrnoException | null)?.code;
  if (typeof code !== 'string') return e;
  if (FULL.has(code)) {
    return new ApiError(507, `insufficient storage: no space left writing ${file} (${code}); nothing was changed, retry once space is freed`);
  }
  if (READ_ONLY.has(code)) {
    return new ApiError(503, `state storage not writable: ${file} (${code}); nothing was changed, retry once it is writable`);
  }
  return e;
}

/** Another running control plane holds the state directory's lock: not a corrupt file, a refusal. */
export class StateInUseError extends Error {
  constructor(
    readonly dir: string,
    readonly pid: number,
  ) {
    super(`state directory ${dir} is in use by another running control plane (pid ${pid}); stop it, or give this one its own IPXE_CP_STATE_DIR`);
  }
}
