import { Command } from 'commander';
import * as readline from 'node:readline';
import { createKurrentClient, KurrentClient } from '../client';
import { CliError, exitCodeOf, EXIT } from './output';

/**
 * What every command group of the `kurrent` CLI shares: the global options, the API client, output
 * (tables or --json), the confirmation of destructive verbs, and the option parsers.
 */

export interface Globals {
  url: string;
  token?: string;
  requestTimeout: number;
  json?: boolean;
  yes?: boolean;
}

export type Io = { out: (s: string) => void; err: (s: string) => void; isTTY: boolean; stdin: NodeJS.ReadableStream };

export const EXIT_HELP = `
Exit codes: 0 ok, 1 other API error, 2 usage (or a destructive verb without --yes), 3 auth (401/403),
4 not found, 5 conflict, 6 server error or unreachable.
Environment: KURRENT_URL (default http://localhost:4839), KURRENT_TOKEN, KURRENT_REQUEST_TIMEOUT (seconds, 30).`;

/** Unwraps an openapi-fetch answer: the data, or a CliError with the API's message and exit code. */
export async function call<T>(p: Promise<{ data?: T; error?: unknown; response: Response }>): Promise<T> {
  let r: { data?: T; error?: unknown; response: Response };
  try {
    r = await p;
  } catch (e) {
    if ((e as Error).name === 'TimeoutError') throw new CliError(`the control plane did not answer within the timeout (--request-timeout / KURRENT_REQUEST_TIMEOUT)`, EXIT.server);
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new CliError(`cannot reach the control plane: ${cause?.code ?? cause?.message ?? (e as Error).message}`, EXIT.server);
  }
  if (!r.response.ok) {
    const body = r.error as { message?: string } | string | undefined;
    const msg = typeof body === 'object' && body?.message ? body.message : typeof body === 'string' && body ? body : r.response.statusText;
    throw new CliError(`${r.response.status}: ${msg}`, exitCodeOf(r.response.status));
  }
  return r.data as T;
}

export const seconds = (v: string) => {
  if (!/^\d+(\.\d+)?$/.test(v) || Number(v) <= 0 || Number(v) > 3600) throw new CliError(`--request-timeout must be a number of seconds between 0 and 3600, got ${JSON.stringify(v)}`, EXIT.usage);
  return Number(v);
};
export const list = (v: string) => v.split(',').map((s) => s.trim()).filter(Boolean);
export const int = (name: string) => (v: string) => {
  if (!/^\d+$/.test(v)) throw new CliError(`${name} must be a whole number, got ${JSON.stringify(v)}`, EXIT.usage);
  return Number(v);
};


/** The shared helpers a command group registers its verbs with. */
export interface CliContext {
  program: Command;
  io: Io;
  g: () => Globals;
  api: () => KurrentClient;
  print: (data: unknown, human: () => string) => void;
  progress: (s: string) => void;
  confirm: (what: string) => Promise<void>;
  verb: (parent: Command, name: string, description: string, example: string) => Command;
}

export function cliContext(program: Command, io: Io): CliContext {
  const g = (): Globals => program.opts<Globals>();
  const api = (): KurrentClient => createKurrentClient({ baseUrl: g().url, token: g().token, timeoutMs: g().requestTimeout * 1000 });
  const print = (data: unknown, human: () => string) => io.out(g().json ? JSON.stringify(data, null, 2) + '\n' : human());
  const progress = (s: string) => {
    if (!g().json) io.err(`${s}\n`);
  };
  /** Destructive verbs: a y/N question on a terminal, --yes anywhere else. */
  const confirm = async (what: string) => {
    if (g().yes) return;
    if (!io.isTTY) throw new CliError(`refusing to ${what} without --yes (not a terminal)`, EXIT.usage);
    const rl = readline.createInterface({ input: io.stdin, output: process.stderr });
    const answer = await new Promise<string>((r) => rl.question(`${what}? [y/N] `, r));
    rl.close();
    if (!/^y(es)?$/i.test(answer.trim())) throw new CliError('cancelled', EXIT.usage);
  };
  const verb = (parent: Command, name: string, description: string, example: string) =>
    parent.command(name).description(description).addHelpText('after', `\nExample:\n  $ ${example}\n`);

  return { program, io, g, api, print, progress, confirm, verb };
}

/** mac[,serial,product,manufacturer,uuid] lines (a header line is skipped), or a JSON array. */
export function parseDevices(text: string): { mac: string; serial?: string; product?: string; manufacturer?: string; uuid?: string }[] {
  const t = text.trim();
  if (t.startsWith('[')) return JSON.parse(t);
  return t
    .split('\n')
    .map((l) => l.split(',').map((s) => s.trim()))
    .filter((c) => c[0] && !/^mac$/i.test(c[0]) && !c[0].startsWith('#'))
    .map(([mac, serial, product, manufacturer, uuid]) => ({ mac, ...(serial ? { serial } : {}), ...(product ? { product } : {}), ...(manufacturer ? { manufacturer } : {}), ...(uuid ? { uuid } : {}) }));
}

/** "mac,worker_id" lines, or a JSON array of {mac, worker_id}. */
export function parsePairs(text: string): { mac: string; worker_id: string }[] {
  const t = text.trim();
  if (t.startsWith('[')) return JSON.parse(t);
  return t
    .split('\n')
    .map((l) => l.split(',').map((s) => s.trim()))
    .filter((c) => c[0] && c[1] && !/^mac$/i.test(c[0]) && !c[0].startsWith('#'))
    .map(([mac, worker_id]) => ({ mac, worker_id }));
}

/** Counts of every array in a batch answer, then the failures. */
export function summary(data: Record<string, unknown>): string {
  const counts = Object.entries(data)
    .filter(([, v]) => Array.isArray(v))
    .map(([k, v]) => `${k} ${(v as unknown[]).length}`)
    .join(', ');
  const failed = (data.failed as { error?: string; worker_id?: string; mac?: string }[] | undefined) ?? [];
  return `${counts}\n${failed.map((f) => `  failed ${f.mac ?? f.worker_id ?? ''}: ${f.error ?? ''}\n`).join('')}`;
}

