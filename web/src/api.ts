import createClient, { type Middleware } from 'openapi-fetch';
import type { components, paths } from '../../src/client/control-plane.schema';
import { nextStep } from './lib/next-step';

/** The typed client of the control plane, generated from openapi/control-plane.openapi.json. */
export type Schemas = components['schemas'];
export type Device = Schemas['DeviceDto'];
export type Worker = Schemas['WorkerDto'];
export type Agent = Schemas['AgentDto'];
export type AuditEntry = Schemas['OperationEntryDto'] & Record<string, unknown>;

const TOKEN_KEY = 'kurrent.token';

/** The bearer token lives in sessionStorage: gone when the tab closes, never in a cookie or a URL. */
export const session = {
  get token(): string {
    return sessionStorage.getItem(TOKEN_KEY) ?? '';
  },
  set token(t: string) {
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    else sessionStorage.removeItem(TOKEN_KEY);
  },
};

/** An error answer of the API: its status and its message, shown as is. */
export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly errors: { field: string; message: string }[] = [],
    /** What to do next, when the status says (see lib/next-step). */
    readonly hint: string | null = null,
  ) {
    super(message);
  }
}

let onUnauthorized: () => void = () => undefined;
export function whenUnauthorized(fn: () => void): void {
  onUnauthorized = fn;
}

const auth: Middleware = {
  onRequest({ request }) {
    const t = session.token;
    if (t) request.headers.set('authorization', `Bearer ${t}`);
    return request;
  },
  onResponse({ response }) {
    if (response.status === 401) onUnauthorized();
    return response;
  },
};

export const api = createClient<paths>({ baseUrl: location.origin });
api.use(auth);

/**
 * Unwraps an openapi-fetch result: the data, or an ApiFailure carrying the API's own message
 * (the control plane's one error shape), so every page shows what the server said.
 */
export async function call<T>(p: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  let r: Awaited<typeof p>;
  try {
    r = await p;
  } catch (e) {
    throw new ApiFailure(0, `the control plane did not answer: ${(e as Error).message}`, [], nextStep(0));
  }
  if (r.response.ok) return r.data as T;
  const body = r.error as { message?: unknown; errors?: { field: string; message: string }[]; agent?: unknown; error?: unknown } | undefined;
  const msg = typeof body?.message === 'string' ? body.message : `${r.response.status} ${r.response.statusText}`;
  throw new ApiFailure(r.response.status, msg, Array.isArray(body?.errors) ? body!.errors : [], nextStep(r.response.status, body ?? {}));
}
