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

/**
 * The HTTP rules both apps share: bodies are JSON only (anything else is a 415 in the one error
 * shape; Nest's form parser is never registered: `bodyParser: false`), and routes are tracked for
 * the 405 answer. Call right after NestFactory.create.
 */
export function strictHttp(fastify: FastifyInstance): void {
  trackRoutes(fastify);
  fastify.removeContentTypeParser('text/plain');
}
