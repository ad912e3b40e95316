import * as fs from 'node:fs';
import * as https from 'node:https';
import * as path from 'node:path';
import * as tls from 'node:tls';
import { NestFastifyApplication } from '@nestjs/platform-fastify';
import { createApp } from '../../src/control-plane/app.factory';
import { loadConfig } from '../../src/control-plane/config/app-config';
import { describePin, generate } from '../../scripts/tls-pin';
import { tempDir } from '../helpers/app';

/** HTTPS for the boot chain: a real TLS listener, checked by a real TLS client pinning the certificate. */
describe('HTTPS listener and certificate pin', () => {
  const dir = tempDir('kurrent-tls-');
  const { cert, key } = generate(path.join(dir, 'tls'), '127.0.0.1');
  let app: NestFastifyApplication;
  let port: number;

  beforeAll(async () => {
    const env = {
      IPXE_CP_CONFIG_DIR: path.join(dir, 'config'),
      IPXE_CP_STATE_DIR: path.join(dir, 'state'),
      IPXE_CP_DNSMASQ_DIR: path.join(dir, 'dnsmasq'),
      IPXE_CP_LOG_LEVEL: 'silent',
      IPXE_CP_TLS_CERT: cert,
      IPXE_CP_TLS_KEY: key,
    };
    app = await createApp(loadConfig(env), { quiet: true });
    await app.listen(0, '127.0.0.1');
    port = (app.getHttpServer().address() as { port: number }).port;
  });
  afterAll(() => app?.close());

  it('the pin helper prints the fingerprint a TLS client sees, and the iPXE build parameter', async () => {
    const lines = describePin(cert);
    const fp = /^sha256 +(\S+)$/.exec(lines[1])![1];
    expect(lines[2]).toBe(`ipxe trust   ${fp.replace(/:/g, '').toLowerCase()}`);
    expect(lines[3]).toBe(`build        KURRENT_IPXE_TRUST=${path.resolve(cert)} npm run build:ipxe   (UEFI e1000 ROM + snponly.efi, in build/ipxe/out)`);
    const seen = await new Promise<string>((resolve, reject) => {
      // A pinning client: it trusts no CA, only the fingerprint.
      const s = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => {
        const peer = s.getPeerCertificate().fingerprint256;
        s.end();
        resolve(peer);
      });
      s.on('error', reject);
    });
    expect(seen).toBe(fp);
  });

  it('serves the boot chain over HTTPS to a client that trusts only this certificate', async () => {
    const get = (url: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        https
          .get(`https://127.0.0.1:${port}${url}`, { ca: fs.readFileSync(cert), agent: false }, (res) => {
            let body = '';
            res.on('data', (c) => (body += c));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
          })
          .on('error', reject);
      });
    expect(await get('/healthz')).toEqual({ status: 200, body: '{"status":"ok"}' });
    const bv = await get('/boot-vars?mac=02:00:00:00:00:09&hostname=x');
    expect(bv.body).toMatch(/^#!ipxe\n/);
    // What Kurrent's iPXE chains after the TFTP hop: the shipped scripts, byte for byte.
    for (const name of ['boot.ipxe.cfg', 'menu.ipxe']) {
      expect(await get(`/ipxe/${name}`)).toEqual({ status: 200, body: fs.readFileSync(path.join(__dirname, '../../docker/tftp', name), 'utf8') });
    }
    for (const name of ['boot.ipxe', '..%2Fpackage.json', '%2Fetc%2Fpasswd', 'x']) expect((await get(`/ipxe/${name}`)).status).toBe(404);
    // A client that does not trust this certificate fails verification.
    await expect(
      new Promise((resolve, reject) => https.get(`https://127.0.0.1:${port}/healthz`, { agent: false }, resolve).on('error', reject)),
    ).rejects.toThrow(/self[- ]signed/i);
  });

  it('a missing key or a key of another certificate stops the start naming the variable', () => {
    const other = generate(path.join(dir, 'other'), 'other.example');
    expect(() => loadConfig({ IPXE_CP_TLS_CERT: cert })).toThrow('IPXE_CP_TLS_KEY is required when IPXE_CP_TLS_CERT is set');
    expect(() => loadConfig({ IPXE_CP_TLS_CERT: cert, IPXE_CP_TLS_KEY: other.key })).toThrow(/^IPXE_CP_TLS_KEY: .* does not belong to the certificate/);
    expect(() => loadConfig({ IPXE_CP_TLS_CERT: key, IPXE_CP_TLS_KEY: key })).toThrow(/^IPXE_CP_TLS_CERT: .* is not a PEM certificate/);
  });
});
