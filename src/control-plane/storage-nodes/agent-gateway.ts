import { Injectable, Logger } from '@nestjs/common';
import { ApiError } from '../../shared/http/api-error';
import { tokenVariableAllowed } from '../../shared/validators';
import { AppConfig } from '../config/app-config';
import type { AgentRecord } from './storage-node-registry';

export interface AgentCallOptions {
  query?: Record<string, string | boolean | undefined>;
  body?: unknown;
  timeoutMs?: number;
}

/** The agent answered with an error status: passed through as {agent, error}. */
export class AgentHttpError extends ApiError {
  constructor(
    readonly agentId: string,
    readonly upstreamStatus: number,
    readonly detail: string,
  ) {
    super(upstreamStatus >= 500 ? 502 : upstreamStatus, `agent ${agentId}: ${detail}`, { agent: agentId, error: detail });
  }
}

/** Unreachable, timed out, dropped connection, unreadable answer: 503. */
export class AgentUnavailableError extends ApiError {
  constructor(
    readonly agentId: string,
    readonly detail: string,
  ) {
    super(503, `agent ${agentId} unavailable: ${detail}`, { agent: agentId, error: detail });
  }
}

/**
 * The control plane's one outbound HTTP client. Bearer token from agents.yml (`${ENV}` expanded
 * here, never logged), a timeout per call covering connect, headers and body, and error mapping.
 */
@Injectable()
export class AgentGateway {
  private readonly log = new Logger('AgentGateway');

  constructor(private readonly config: AppConfig) {}

  /** `${VAR}` -> the environment's value ('' when unset, or when VAR is not a token variable). */
  expandToken(token: string | undefined): string {
    return (token ?? '').replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, v: string) => (tokenVariableAllowed(v) ? (this.config.env[v] ?? '') : ''));
  }

  async call<T>(agent: Pick<AgentRecord, 'id' | 'base_url' | 'token'>, method: string, path: string, opts: AgentCallOptions = {}): Promise<T> {
    const url = new URL(agent.base_url + path);
    for (const [k, v] of Object.entries(opts.query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
    const token = this.expandToken(agent.token);
    const timeout = opts.timeoutMs ?? this.config.agentTimeoutMs;
    const t0 = Date.now();
    let status: number;
    let text: string;
    try {
      const res = await fetch(url, {
        method,
        headers: {
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(opts.body !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
        signal: AbortSignal.timeout(timeout),
      });
      status = res.status;
      text = await res.text();
    } catch (e) {
      const err = e as Error & { cause?: { code?: string; message?: string } };
      const detail =
        err.name === 'TimeoutError' || err.name === 'AbortError'
          ? `timeout after ${timeout} ms`
          : (err.cause?.code ?? err.cause?.message ?? err.message);
      this.log.warn(`${agent.id} ${method} ${url.pathname} failed after ${Date.now() - t0} ms: ${detail}`);
      throw new AgentUnavailableError(agent.id, detail);
    }
    let body: unknown = undefined;
    if (text) {
      try {
        body = JSON.parse(text);
      } catch {
        body = text;
      }
    }
    if (status >= 400) {
      const detail = typeof body === 'object' && body !== null ? String((body as { message?: unknown }).message ?? text) : String(text || status);
      this.log.warn(`${agent.id} ${method} ${url.pathname} -> ${status}: ${detail}`);
      throw new AgentHttpError(agent.id, status, detail);
    }
    if (typeof body !== 'object' || body === null) {
      if (method === 'GET' && path === '/healthz' && status === 200) return body as T;
      throw new AgentUnavailableError(agent.id, `unexpected answer to ${method} ${url.pathname}: ${text.slice(0, 100)}`);
    }
    return body as T;
  }
}
