import type { FastifyInstance } from 'fastify';

interface Route {
  methods: Set<string>;
  re: RegExp;
}

const tables = new WeakMap<object, Route[]>();

/** Records every route of an app as it is registered (call before init). */
export function trackRoutes(fastify: FastifyInstance): void {
  const list: Route[] = [];
  tables.set(fastify, list);
  fastify.addHook('onRoute', (r) => {
    const pattern = r.url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/:[A-Za-z0-9_]+/g, '[^/]+');
    list.push({ methods: new Set([r.method].flat().map(String)), re: new RegExp(`^${pattern}/?$`) });
  });
}

/** The methods some route answers on this path (empty: no route has the path at all). */
export function allowedMethods(fastify: object, path: string): string[] {
  const out = new Set<string>();
  for (const r of tables.get(fastify) ?? []) if (r.re.test(path)) r.methods.forEach((m) => out.add(m));
  return [...out].sort();
}

/** A refused body is read and discarded up to this much, so the client can read its 413. */
export const DRAIN_MAX_BYTES = 16 * 1024 * 1024;
const DRAIN_MAX_MS = 10_000;

/**
 * Discards what is left of a request body (bounded in bytes and time). Answering while the client
 * still sends makes the server close a socket with unread data: the client gets a reset (EPIPE)
 * instead of the answer. Past the bounds the answer goes out and the connection closes anyway.
 */
export function drainBody(raw: NodeJS.ReadableStream & { complete?: boolean; destroyed?: boolean }, maxBytes = DRAIN_MAX_BYTES, maxMs = DRAIN_MAX_MS): Promise<void> {
  if (raw.complete || raw.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    let seen = 0;
    const finish = () => {
      clearTimeout(timer);
      raw.removeListener('data', onData);
      raw.removeListener('end', finish);
      raw.removeListener('error', finish);
      raw.removeListener('close', finish);
      resolve();
    };
    const onData = (chunk: Buffer) => {
      seen += chunk.length;
      if (seen > maxBytes) finish();
    };
    const timer = setTimeout(finish, maxMs);
    raw.on('data', onData);
    raw.once('end', finish);
    raw.once('error', finish);
    raw.once('close', finish);
    raw.resume();
  });
}

/**
 * The HTTP rules both apps share: bodies are JSON only (anything else is a 415 in the one error
 * shape; Nest's form parser is never registered: `bodyParser: false`), routes are tracked for the
 * 405 answer, and a body refused as too large (413) is drained before the answer, so the client
 * reads the 413 instead of a reset. Call right after NestFactory.create.
 */
export function strictHttp(fastify: FastifyInstance): void {
  trackRoutes(fastify);
  fastify.removeContentTypeParser('text/plain');
  fastify.addHook('onSend', (req, reply, payload, done) => {
    if (reply.statusCode !== 413) return done(null, payload);
    void drainBody(req.raw).then(() => done(null, payload));
  });
}
