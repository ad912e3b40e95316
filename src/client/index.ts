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
}

export function createKurrentClient(opts: ClientOptions): KurrentClient {
  return createClient<paths>({
    baseUrl: opts.baseUrl.replace(/\/+$/, ''),
    headers: opts.token ? { authorization: `Bearer ${opts.token}` } : {},
    ...(opts.fetch ? { fetch: opts.fetch } : {}),
  });
}

export function createAgentClient(opts: ClientOptions): AgentClient {
  return createClient<AgentPaths>({
    baseUrl: opts.baseUrl.replace(/\/+$/, ''),
    headers: opts.token ? { authorization: `Bearer ${opts.token}` } : {},
    ...(opts.fetch ? { fetch: opts.fetch } : {}),
  });
}
