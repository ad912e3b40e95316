import Fastify from 'fastify';

/** Baseline for bench:boot: a bare Fastify route answering the same bytes as /boot-vars. */
const body = '#!ipxe\n# boot vars for seat-00000\nset menu-default exit\nset menu-timeout 3000\n';
const app = Fastify({ logger: false });
app.get('/boot-vars', async (_req, reply) => {
  reply.header('cache-control', 'no-store').type('text/plain; charset=utf-8');
  return body;
});
app.get('/healthz', async () => ({ status: 'ok' }));
void app.listen({ port: Number(process.env.BARE_PORT ?? 4900), host: '127.0.0.1' });
