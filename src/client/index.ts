import createClient, { type Client } from 'openapi-fetch';
import type { components, operations, paths } from './control-plane.schema';
import type { paths as AgentPaths } from './agent.schema';

/**
 * Typed clients of both APIs, generated from the committed specs (`npm run openapi` regenerates
 * `control-plane.schema.ts` and `agent.schema.ts` with openapi-typescript; a test fails when they
 * drift). openapi-fetch checks paths, parameters, bodies and responses at compile time, so a spec
 * that lies breaks whoever uses these: the CLI and the e2e tests.
 */
export type KurrentClient = Client<paths>;
export type AgentClient = Client<AgentPaths>;
export type Schemas = components['schemas'];
export type { components, operations, paths };

export interface ClientOptions {
  /** e.g. http://localhost:4839 */
  baseUrl: string;
  /** Bearer token (IPXE_CP_TOKEN); omitted when empty. */
  token?: string;
  /** A fetch to use instead of the global one (tests inject Fastify's). */
  fetch?: (input: Request) => Promise<Response>;
  /** Abort a request that has no complete answer after this many ms (a TimeoutError); none when absent. */
  timeoutMs?: number;
}

/** The given fetch with a deadline per request: a server that never answers cannot hang the caller. */
function withDeadline(fetchFn: (input: Request) => Promise<Response>, ms: number): (input: Request) => Promise<Response> {
  return (input) => fetchFn(new Request(input, { signal: AbortSignal.any([input.signal, AbortSignal.timeout(ms)]) }));
}

export function createKurrentClient(opts: ClientOptions): KurrentClient {
  const base = opts.fetch ?? ((r: Request) => globalThis.fetch(r));
  const fetchFn = opts.timeoutMs ? withDeadline(base, opts.timeoutMs) : opts.fetch;
  return createClient<paths>({
    baseUrl: opts.baseUrl.replace(/\/+$/, ''),
    headers: opts.token ? { authorization: `Bearer ${opts.token}` } : {},
    ...(fetchFn ? { fetch: fetchFn } : {}),
  });
}

export function createAgentClient(opts: ClientOptions): AgentClient {
  return createClient<AgentPaths>({
    baseUrl: opts.baseUrl.replace(/\/+$/, ''),
    headers: opts.token ? { authorization: `Bearer ${opts.token}` } : {},
    ...(opts.fetch ? { fetch: opts.fetch } : {}),
  });
}
