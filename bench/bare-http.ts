import * as http from 'node:http';

/**
 * Baseline for bench:boot-path: node:http alone answering the same bytes as /boot-vars with
 * pre-built headers, i.e. what Node's HTTP server allocates and costs by itself.
 */
const body = Buffer.from(process.env.BARE_BODY ?? '#!ipxe\n');
const headers = ['cache-control', 'no-store', 'content-type', 'text/plain; charset=utf-8', 'content-length', String(body.length)];
http
  .createServer((req, res) => {
    if (req.url === '/healthz') return res.end('ok');
    res.writeHead(200, headers);
    res.end(body);
  })
  .listen(Number(process.env.BARE_PORT ?? 4900), '127.0.0.1');
