/**
 * `node dist/scripts/wait-healthy.js [--agent] [--timeout S]`: waits until the control plane (or,
 * with --agent, the storage agent) configured by the environment answers 200 on /healthz over
 * loopback, then exits 0; exits 1 when the time runs out. systemd's readiness check
 * (ExecStartPost of deploy/systemd/*.service): the unit is "started" when the API answers.
 */
import * as http from 'node:http';
import * as https from 'node:https';
import { loadAgentConfig } from '../src/storage-agent/agent-config';
import { loadConfig } from '../src/control-plane/config/app-config';

function probe(url: string): Promise<number> {
  return new Promise((resolve) => {
    // Loopback only; the certificate is the one this host just configured (no name to check).
    const get = url.startsWith('https:') ? (u: string, cb: (r: http.IncomingMessage) => void) => https.get(u, { rejectUnauthorized: false }, cb) : http.get;
    const req = get(url, (r) => {
      r.resume();
      resolve(r.statusCode ?? 0);
    });
    req.setTimeout(2000, () => req.destroy());
    req.on('error', () => resolve(0));
  });
}

export async function waitHealthy(url: string, timeoutMs: number, sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if ((await probe(url)) === 200) return true;
    if (Date.now() >= end) return false;
    await sleep(250);
  }
}

export function healthUrl(args: string[], env: NodeJS.ProcessEnv): string {
  if (args.includes('--agent')) return `http://127.0.0.1:${loadAgentConfig(env).port}/healthz`;
  const c = loadConfig(env);
  return `${c.tls ? 'https' : 'http'}://127.0.0.1:${c.port}/healthz`;
}

if (require.main === module) {
  const args = process.argv.slice(2);
  const i = args.indexOf('--timeout');
  const seconds = i >= 0 ? Number(args[i + 1]) : 60;
  const url = healthUrl(args, process.env);
  void waitHealthy(url, seconds * 1000).then((ok) => {
    process.stderr.write(ok ? `healthy: ${url}\n` : `not healthy within ${seconds} s: ${url}\n`);
    process.exit(ok ? 0 : 1);
  });
}
