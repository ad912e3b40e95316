import { execFileSync, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { freePort } from './free-port';

/**
 * A throw-away PostgreSQL cluster (tests, bench:boot): Debian's server binaries, a temp
 * directory, a free loopback port, run as the `postgres` user (the server refuses root), trust
 * auth on loopback only. fsync stays on: the crash tests count on acknowledged commits surviving.
 */
export interface PgCluster {
  url: string;
  port: number;
  dir: string;
  /** A fresh, empty database on this cluster: its URL. */
  createDb: (name: string) => string;
  /** Stops the server, keeping its data (an outage); `resume` starts it again on the same port. */
  pause: () => void;
  resume: () => void;
  /** SIGSTOPs the server and its backends (a black hole: connections stay open, nothing answers); thaw sends SIGCONT. */
  freeze: () => void;
  thaw: () => void;
  stop: () => void;
}

export function pgBin(): string {
  const root = '/usr/lib/postgresql';
  const versions = fs.existsSync(root) ? fs.readdirSync(root).filter((v) => fs.existsSync(path.join(root, v, 'bin/initdb'))) : [];
  if (!versions.length) throw new Error('PostgreSQL server binaries missing: apt-get install postgresql');
  return path.join(root, versions.sort((a, b) => Number(b) - Number(a))[0], 'bin');
}


export async function startPostgres(): Promise<PgCluster> {
  const bin = pgBin();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kurrent-pg-'));
  fs.chmodSync(dir, 0o755);
  const data = path.join(dir, 'data');
  const sock = path.join(dir, 'sock');
  fs.mkdirSync(sock);
  execFileSync('chown', ['-R', 'postgres:postgres', dir]);
  const as = (cmd: string, args: string[]) => {
    const r = spawnSync('runuser', ['-u', 'postgres', '--', path.join(bin, cmd), ...args], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`${cmd} failed (${r.status}): ${r.stderr || r.stdout}`);
    return r.stdout;
  };
  as('initdb', ['-D', data, '-U', 'postgres', '-A', 'trust', '--no-sync', '-E', 'UTF8', '--locale=C']);
  const port = await freePort();
  const start = () => as('pg_ctl', ['-D', data, '-l', path.join(dir, 'log'), '-w', '-t', '60', '-o', `-p ${port} -c listen_addresses=127.0.0.1 -k ${sock} -c max_connections=200`, 'start']);
  start();
  const psql = path.join(bin, 'psql');
  let stopped = false;
  // The postmaster (first line of postmaster.pid) and every backend it forked.
  const signalAll = (sig: 'STOP' | 'CONT') => {
    const pid = fs.readFileSync(path.join(data, 'postmaster.pid'), 'utf8').split('\n')[0].trim();
    const children = spawnSync('pgrep', ['-P', pid], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean);
    for (const p of sig === 'STOP' ? [pid, ...children] : [...children, pid]) spawnSync('kill', [`-${sig}`, p]);
  };
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    dir,
    createDb: (name) => {
      execFileSync(psql, ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-c', `CREATE DATABASE "${name}"`], { stdio: 'ignore' });
      return `postgres://postgres@127.0.0.1:${port}/${name}`;
    },
    pause: () => {
      as('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
    },
    resume: () => {
      start();
    },
    freeze: () => signalAll('STOP'),
    thaw: () => signalAll('CONT'),
    stop: () => {
      if (stopped) return;
      stopped = true;
      spawnSync('runuser', ['-u', 'postgres', '--', path.join(bin, 'pg_ctl'), '-D', data, '-m', 'immediate', '-w', 'stop'], { stdio: 'ignore' });
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
