import { STATUS_CODES } from 'node:http';
import type { Server } from 'node:http';
import { Socket } from 'node:net';
import { Server as TlsServer, TLSSocket } from 'node:tls';
import { parse as parseQuery } from 'fast-querystring';
import { DATE_LENGTH, EncodedAnswer, ResponseHead } from './encoded-answer';

/** A boot route as the front calls it: the query and the client's address in, an answer (or its promise) out; a throw is an error answer. */
export type FrontRoute = (query: Record<string, unknown>, ip: string | undefined) => unknown;

export interface BootFrontOptions {
  routes: Record<string, FrontRoute>;
  /** The error shape of the global filter: status code and JSON body. */
  toBody: (e: unknown) => { statusCode: number };
  /** Called once per answered request (metrics, access log). */
  answered: (route: string, status: number, ms: number, client: string | undefined) => void;
  /** True once the server is closing: every new request is left to Node (Fastify answers 503). */
  closing: () => boolean;
  /** A fault of the front itself (never an answer's error): logged; that connection is closed. */
  fault: (e: unknown) => void;
  /** Called when a connection goes to node:http. */
  handedOver: () => void;
}

const CRLF2 = Buffer.from('\r\n\r\n');
/** Node's default --max-http-header-size: a longer head is left to Node, which answers 431. */
const MAX_HEAD = 16 * 1024;
const GET_ = Buffer.from('GET ');
const _HTTP11 = Buffer.from(' HTTP/1.1\r\n');
/** tchar of RFC 9110 (header names). */
const TCHAR = new Uint8Array(256);
for (const c of "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") TCHAR[c.charCodeAt(0)] = 1;
/** Header names the front looks at; every other (valid) header is passed over. */
const enum H {
  Other,
  Host,
  Connection,
  /** A body, an upgrade or an expectation: Node decides those requests. */
  HandOver,
}
const NAMES: [Buffer, H][] = [
  [Buffer.from('host'), H.Host],
  [Buffer.from('connection'), H.Connection],
  ...['content-length', 'transfer-encoding', 'upgrade', 'expect', 'http2-settings'].map((n) => [Buffer.from(n), H.HandOver] as [Buffer, H]),
];
const CLOSE = Buffer.from('close');
const KEEP_ALIVE = Buffer.from('keep-alive');

/** buf[at, at+len) equals `lower` ignoring ASCII case (both already checked to be tchar/visible). */
function eqLower(buf: Buffer, at: number, len: number, lower: Buffer): boolean {
  if (len !== lower.length) return false;
  for (let i = 0; i < len; i++) if ((buf[at + i] | 0x20) !== lower[i]) return false;
  return true;
}
function eqBytes(buf: Buffer, at: number, bytes: Buffer): boolean {
  for (let i = 0; i < bytes.length; i++) if (buf[at + i] !== bytes[i]) return false;
  return true;
}

/** What one request of a connection asks, once its head was accepted. */
interface Parsed {
  path: string;
  query: Record<string, unknown>;
  close: boolean;
  /** Bytes of the head, consumed from the connection's buffer. */
  length: number;
}

/**
 * Parses one request head at the start of `buf`, byte by byte (no string per line): the parsed
 * request, 'more' when the head is not complete yet, or null when it is anything but a strictly
 * formed `GET <boot route> HTTP/1.1` (visible-ASCII target without '#', tchar header names,
 * visible-ASCII or tab values, no folding, no bare CR or LF) with exactly one Host header and no
 * body, upgrade or expectation, which the caller then leaves to Node's own parser from its first
 * byte (so the front never decides where a request Node would read ends).
 */
export function parseHead(buf: Buffer, paths: readonly string[], pathBytes: readonly Buffer[] = paths.map((p) => Buffer.from(p))): Parsed | 'more' | null {
  const end = buf.indexOf(CRLF2);
  if (end < 0) return buf.length > MAX_HEAD ? null : 'more';
  if (end + 4 > MAX_HEAD || !eqBytes(buf, 0, GET_)) return null;
  // The request target: origin-form, visible ASCII, no fragment.
  let i = GET_.length;
  let q = -1;
  for (; i < end; i++) {
    const c = buf[i];
    if (c === 0x20) break;
    if (c < 0x21 || c > 0x7e || c === 0x23) return null;
    if (c === 0x3f && q < 0) q = i;
  }
  const urlEnd = i;
  if (buf[GET_.length] !== 0x2f || i + _HTTP11.length > end + 2 || !eqBytes(buf, i, _HTTP11)) return null;
  const pathEnd = q < 0 ? urlEnd : q;
  let route = -1;
  for (let r = 0; r < pathBytes.length; r++) if (pathBytes[r].length === pathEnd - GET_.length && eqBytes(buf, GET_.length, pathBytes[r])) route = r;
  if (route < 0) return null;
  let host = 0;
  let close = false;
  // Header lines up to the blank line at `end`.
  for (i += _HTTP11.length; i < end + 2; ) {
    const nameAt = i;
    while (TCHAR[buf[i]]) i++;
    const nameLen = i - nameAt;
    if (nameLen === 0 || buf[i] !== 0x3a) return null;
    i++;
    while (buf[i] === 0x20 || buf[i] === 0x09) i++;
    const valueAt = i;
    for (;;) {
      const c = buf[i];
      if (c === 0x0d) break;
      if ((c < 0x20 && c !== 0x09) || c > 0x7e) return null;
      i++;
    }
    let valueEnd = i;
    while (valueEnd > valueAt && (buf[valueEnd - 1] === 0x20 || buf[valueEnd - 1] === 0x09)) valueEnd--;
    if (buf[i + 1] !== 0x0a) return null;
    i += 2;
    let kind = H.Other;
    for (const [n, k] of NAMES) if (eqLower(buf, nameAt, nameLen, n)) kind = k;
    if (kind === H.HandOver) return null;
    if (kind === H.Host) host++;
    else if (kind === H.Connection) {
      if (eqLower(buf, valueAt, valueEnd - valueAt, CLOSE)) close = true;
      else if (!eqLower(buf, valueAt, valueEnd - valueAt, KEEP_ALIVE)) return null;
    }
  }
  if (host !== 1) return null;
  const query = q < 0 || q === urlEnd - 1 ? {} : (parseQuery(buf.toString('latin1', q + 1, urlEnd)) as Record<string, unknown>);
  return { path: paths[route], query, close, length: end + 4 };
}

/** The Date header's value, made once a second. */
let dateSecond = -1;
let dateValue = '';
function httpDate(): string {
  const now = Date.now();
  const s = Math.floor(now / 1000);
  if (s !== dateSecond) {
    dateSecond = s;
    dateValue = new Date(now).toUTCString();
  }
  return dateValue;
}

/**
 * Reads into one buffer of the process instead of a new Buffer per read: node:net's `onread`
 * mode (documented for `socket.connect`), switched on for a socket the server accepted through
 * the same internal fields its constructor sets (the symbols are found by their descriptions on a
 * probe socket). bench:boot-path: a read through the stream machinery (a Buffer, `push`, a
 * `data` event, a read-more tick) allocates ~650 bytes, most of a boot answer's share. null when
 * this Node has no such fields: the front then reads through `data` events as before.
 */
const USER_READ = ((): { buffer: symbol; callback: symbol } | null => {
  const probe = Object.getOwnPropertySymbols(new Socket());
  const buffer = probe.find((k) => k.description === 'kBuffer');
  const callback = probe.find((k) => k.description === 'kBufferCb');
  return buffer && callback ? { buffer, callback } : null;
})();
/** Whether this Node lets the front read into one shared buffer (a test pins it: without it the bytes per request triple). */
export const sharedReadsAvailable = (): boolean => USER_READ !== null;

/** Every read of every front connection lands here; a read's bytes are used (or copied) before the callback returns. */
const READ_BUFFER = Buffer.allocUnsafe(64 * 1024);

type UserReadHandle = { useUserBuffer?: (b: Uint8Array) => void };

/** Switches a plain TCP connection to reads into READ_BUFFER, each given to `onRead`; false when it cannot be (TLS, another Node). */
function readIntoSharedBuffer(socket: Socket, onRead: (n: number, buf: Buffer) => void): boolean {
  const handle = (socket as unknown as { _handle?: UserReadHandle })._handle;
  // TLS: the cleartext comes out of the TLS layer's own stream; left to `data` events.
  if (socket instanceof TLSSocket || !USER_READ || typeof handle?.useUserBuffer !== 'function') return false;
  const fields = socket as unknown as Record<symbol, unknown>;
  if (!(USER_READ.buffer in fields) || fields[USER_READ.buffer] !== null) return false;
  fields[USER_READ.buffer] = READ_BUFFER;
  fields[USER_READ.callback] = onRead;
  handle.useUserBuffer(READ_BUFFER);
  return true;
}

/** After a hand-over: reads the handle's consumer (node:http's parser) does not take itself go into the stream as copies, as a plain socket's would. */
function readIntoStream(socket: Socket): void {
  (socket as unknown as Record<symbol, unknown>)[USER_READ!.callback] = (n: number, buf: Buffer) => socket.push(Buffer.from(buf.subarray(0, n)));
}

/** The bytes of one response, as node:http writes them for the same headers (test/e2e/boot-front.e2e-spec.ts compares). */
function response(status: number, answer: EncodedAnswer, close: boolean, keepAliveSeconds: number): Buffer {
  const date = httpDate();
  // The common answer (200, keep-alive): a shared head, this second's Date and the answer's body.
  if (status === 200 && !close && date.length === DATE_LENGTH) return answer.wire(sharedHead(answer, keepAliveSeconds), date);
  return Buffer.concat([Buffer.from(head(status, answer, close, keepAliveSeconds, date).text, 'latin1'), answer.bytes]);
}

/**
 * Heads of 200 keep-alive answers by content type, keep-alive and body length: a few dozen in a
 * fleet, since answers of one kind differ in length only. Looked up without building a key (a hit
 * allocates nothing here).
 */
const HEADS = new Map<string, Map<number, Map<number, ResponseHead>>>();
let headCount = 0;
const MAX_HEADS = 4096;

function sharedHead(answer: EncodedAnswer, keepAliveSeconds: number): ResponseHead {
  let h = HEADS.get(answer.contentType)?.get(keepAliveSeconds)?.get(answer.length);
  if (h === undefined) {
    // A bound for odd fleets (every answer a length of its own): start again rather than grow.
    if (++headCount > MAX_HEADS) {
      HEADS.clear();
      headCount = 1;
    }
    let byKeepAlive = HEADS.get(answer.contentType);
    if (byKeepAlive === undefined) HEADS.set(answer.contentType, (byKeepAlive = new Map()));
    let byLength = byKeepAlive.get(keepAliveSeconds);
    if (byLength === undefined) byKeepAlive.set(keepAliveSeconds, (byLength = new Map()));
    const { text, dateAt } = head(200, answer, false, keepAliveSeconds, ' '.repeat(DATE_LENGTH));
    byLength.set(answer.length, (h = { bytes: Buffer.from(text, 'latin1'), dateAt }));
  }
  return h;
}

/** A response head up to its blank line, with `date` as its Date value at `dateAt`. */
function head(status: number, answer: EncodedAnswer, close: boolean, keepAliveSeconds: number, date: string): { text: string; dateAt: number } {
  const h = answer.headers;
  let text = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'unknown'}\r\n`;
  for (let i = 0; i < h.length; i += 2) text += `${h[i]}: ${h[i + 1]}\r\n`;
  text += 'Date: ';
  // The header list is EncodedAnswer's, all ASCII: the string's length is the Date's byte offset.
  const dateAt = text.length;
  text += `${date}\r\n`;
  text += close ? 'Connection: close\r\n\r\n' : keepAliveSeconds > 0 ? `Connection: keep-alive\r\nKeep-Alive: timeout=${keepAliveSeconds}\r\n\r\n` : 'Connection: keep-alive\r\n\r\n';
  return { text, dateAt };
}

/**
 * The boot front: the four routes of every boot answered straight off the socket, without
 * node:http's request and response objects and streams (bench:boot-path: node:http itself
 * allocates ~6.8 KB and costs most of a boot answer's time; nginx serves the same bytes at about
 * twice node:http's rate). It takes a connection before Node's HTTP server does and answers
 * requests as long as each is a strictly formed, bodiless `GET` of a boot route over HTTP/1.1
 * (keep-alive and pipelining included). At the first request that is anything else (another
 * route, another method, a body, an upgrade, a malformed or oversized head, the server closing)
 * the connection is handed to Node's HTTP server with that request's bytes put back, and Node
 * (and Fastify) serve it and everything after it as they always did. So the front never judges
 * a request Node would read differently: it either answers a request whose every byte it
 * checked, or passes the bytes on untouched. Works the same under TLS (after the handshake).
 */
export function installBootFront(server: Server, opts: BootFrontOptions): BootFront {
  const event = server instanceof TlsServer ? 'secureConnection' : 'connection';
  const nodeListeners = server.listeners(event) as ((s: Socket) => void)[];
  const paths = Object.keys(opts.routes);
  const pathBytes = paths.map((p) => Buffer.from(p));
  /** Connections the front holds, and whether each is between requests (idle). */
  const live = new Map<Socket, () => boolean>();
  server.removeAllListeners(event);
  server.on(event, (socket: Socket) => adopt(socket));

  function adopt(socket: Socket): void {
    let pending: Buffer | null = null;
    let headSince = 0;
    let busy = false;
    let ended = false;
    /** A `Connection: close` request was answered: nothing more is read or written. */
    let done = false;
    /** Reads land in READ_BUFFER (readIntoSharedBuffer) rather than in a Buffer of their own. */
    let sharedReads = false;
    const keepAliveMs = server.keepAliveTimeout;
    const headersMs = server.headersTimeout;
    const onTimeout = () => socket.destroy();
    const onError = () => socket.destroy();
    const onClose = () => live.delete(socket);
    const onEnd = () => {
      ended = true;
      if (!busy && !pending) socket.end();
    };
    live.set(socket, () => !busy && !pending);
    socket.setTimeout(keepAliveMs > 0 ? keepAliveMs : 0);
    socket.on('timeout', onTimeout);
    socket.on('error', onError);
    socket.on('close', onClose);
    socket.on('end', onEnd);

    // From here on Node's HTTP server owns the connection, with the unanswered bytes put back.
    const handOver = () => {
      for (const [ev, fn] of [['data', onData], ['timeout', onTimeout], ['error', onError], ['close', onClose], ['end', onEnd]] as const) socket.removeListener(ev, fn as () => void);
      socket.setTimeout(0);
      live.delete(socket);
      socket.pause();
      if (sharedReads) readIntoStream(socket);
      // A copy: `pending` may be a view of the shared read buffer.
      if (pending?.length) socket.unshift(Buffer.from(pending));
      pending = null;
      opts.handedOver();
      for (const l of nodeListeners) l.call(server, socket);
      socket.resume();
    };

    const write = (status: number, answer: EncodedAnswer, close: boolean) => {
      const ok = socket.write(response(status, answer, close, Math.floor(keepAliveMs / 1000)));
      if (close) {
        done = true;
        pending = null;
        socket.end();
      }
      return ok;
    };
    // Every entry point (data, a waited answer, drain): a fault of the front closes this
    // connection and is logged; it never reaches the process.
    const guarded = (fn: () => void) => {
      try {
        fn();
      } catch (e) {
        opts.fault(e);
        socket.destroy();
      }
    };

    const finish = (p: Parsed, t0: number, out: unknown, failed: boolean) => {
      let status = 200;
      let answer: EncodedAnswer;
      if (failed) {
        const body = opts.toBody(out);
        status = body.statusCode;
        answer = EncodedAnswer.of(body);
      } else answer = out instanceof EncodedAnswer ? out : EncodedAnswer.of(out as string | object);
      opts.answered(p.path, status, performance.now() - t0, socket.remoteAddress);
      return write(status, answer, p.close);
    };

    // Serves the requests buffered so far, one at a time (an answer that waits holds the rest).
    const drainRequests = () => {
      while (pending && !busy && !done && !socket.destroyed) {
        if (opts.closing()) return handOver();
        const p = parseHead(pending, paths, pathBytes);
        if (p === 'more') {
          if (headSince === 0) headSince = Date.now();
          else if (headersMs > 0 && Date.now() - headSince > headersMs) socket.destroy();
          return;
        }
        if (p === null) return handOver();
        headSince = 0;
        pending = p.length === pending.length ? null : pending.subarray(p.length);
        const t0 = performance.now();
        let out: unknown;
        try {
          out = opts.routes[p.path](p.query, socket.remoteAddress);
        } catch (e) {
          finish(p, t0, e, true);
          if (p.close) return;
          continue;
        }
        if (out instanceof Promise) {
          // An answer that waits (a registration's commit, a disk restore): no idle timeout meanwhile.
          busy = true;
          socket.setTimeout(0);
          out
            .then(
              (v) => guarded(() => finish(p, t0, v, false)),
              (e: unknown) => guarded(() => finish(p, t0, e, true)),
            )
            .then(() =>
              guarded(() => {
                busy = false;
                if (done || socket.destroyed) return;
                socket.setTimeout(keepAliveMs > 0 ? keepAliveMs : 0);
                if (ended && !pending) socket.end();
                else drainRequests();
              }),
            );
          return;
        }
        const flowing = finish(p, t0, out, false);
        if (p.close) return;
        if (!flowing) {
          // The client reads slower than it asks: stop reading until the answers are out.
          socket.pause();
          socket.once('drain', () =>
            guarded(() => {
              socket.resume();
              drainRequests();
            }),
          );
          return;
        }
      }
      if (ended && !pending && !busy && !done) socket.end();
    };

    function onData(chunk: Buffer): void {
      if (done) return;
      pending = pending ? Buffer.concat([pending, chunk]) : chunk;
      guarded(drainRequests);
    }
    /** A read into the shared buffer: what is left unanswered when it returns is copied out of it. */
    function onRead(n: number, buf: Buffer): void {
      onData(buf.subarray(0, n));
      if (pending !== null && pending.buffer === buf.buffer) pending = Buffer.from(pending);
    }
    sharedReads = readIntoSharedBuffer(socket, onRead);
    if (sharedReads) socket.resume();
    else socket.on('data', onData);
  }

  return {
    connections: () => live.size,
    closeIdle: () => {
      for (const [socket, idle] of live) if (idle()) socket.destroy();
    },
  };
}

export interface BootFront {
  /** Connections the front holds now. */
  connections(): number;
  /** Closes the connections that wait for their next request (the server is closing). */
  closeIdle(): void;
}
