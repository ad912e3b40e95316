/**
 * The signed-storm client of bench:boot, in its own process pinned to the load generator's CPU
 * (the server has the other one). Every device of the fleet: GET /devices/challenge?format=json,
 * sign nonce || mac with its P-256 key (raw r||s), GET /boot-vars with nonce and sig. Plain
 * keep-alive sockets and a minimal HTTP/1.1 reader, so the client's own HTTP cost stays small
 * next to the server's (the Node http client was the limit before: ~1,700 seq/s).
 *
 * argv: port, connections, keys file (one PKCS#8 DER key in base64 per line, device i = line i).
 * Prints one JSON line: { ms, denied, errors }.
 */
import { createPrivateKey, KeyObject, sign } from 'node:crypto';
import * as fs from 'node:fs';
import * as net from 'node:net';
import { macOf, workerOf } from './lib';

const [port, connections, keysFile] = [Number(process.argv[2]), Number(process.argv[3]), process.argv[4]];
const keys: KeyObject[] = fs
  .readFileSync(keysFile, 'utf8')
  .trim()
  .split('\n')
  .map((l) => createPrivateKey({ key: Buffer.from(l, 'base64'), format: 'der', type: 'pkcs8' }));

/** One keep-alive connection: request() sends a GET and resolves with status and body. */
class Conn {
  private buf: Buffer = Buffer.alloc(0);
  private waiting: ((r: { status: number; body: string }) => void) | null = null;
  private readonly sock: net.Socket;
  constructor() {
    this.sock = net.connect(port, '127.0.0.1');
    this.sock.setNoDelay(true);
    this.sock.on('data', (d: Buffer) => {
      this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
      this.tryParse();
    });
  }
  private tryParse(): void {
    const end = this.buf.indexOf('\r\n\r\n');
    if (end < 0 || !this.waiting) return;
    const head = this.buf.subarray(0, end).toString('latin1');
    const len = Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? 0);
    if (this.buf.length < end + 4 + len) return;
    const body = this.buf.subarray(end + 4, end + 4 + len).toString('utf8');
    this.buf = this.buf.subarray(end + 4 + len);
    const w = this.waiting;
    this.waiting = null;
    w({ status: Number(head.slice(9, 12)), body });
  }
  request(path: string): Promise<{ status: number; body: string }> {
    return new Promise((resolve) => {
      this.waiting = resolve;
      this.sock.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
    });
  }
  close(): void {
    this.sock.destroy();
  }
}

async function main(): Promise<void> {
  let next = 0;
  let denied = 0;
  let errors = 0;
  const conns = Array.from({ length: connections }, () => new Conn());
  const t0 = performance.now();
  await Promise.all(
    conns.map(async (c) => {
      for (let i = next++; i < keys.length; i = next++) {
        const mac = macOf(i);
        const ch = await c.request(`/devices/challenge?mac=${mac}&format=json`);
        if (ch.status !== 200) {
          errors++;
          continue;
        }
        const { nonce } = JSON.parse(ch.body) as { nonce: string };
        const sig = sign('sha256', Buffer.concat([Buffer.from(nonce, 'hex'), Buffer.from(mac.replace(/:/g, ''), 'hex')]), { key: keys[i], dsaEncoding: 'ieee-p1363' });
        const bv = await c.request(`/boot-vars?mac=${mac}&hostname=${workerOf(i)}&nonce=${nonce}&sig=${sig.toString('hex')}`);
        if (bv.status !== 200) errors++;
        else if (!bv.body.includes('set menu-default exit')) denied++;
      }
    }),
  );
  const ms = performance.now() - t0;
  conns.forEach((c) => c.close());
  process.stdout.write(JSON.stringify({ ms, denied, errors }) + '\n');
}

void main();
