import pino from 'pino';
import { Writable } from 'node:stream';
import { REDACT_PATHS } from '../../src/shared/http/redaction';

describe('log redaction', () => {
  it('never writes the Authorization header, tokens or NVMe keys', () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _enc, cb) {
        lines.push(chunk.toString());
        cb();
      },
    });
    const log = pino({ redact: { paths: REDACT_PATHS, censor: '[redacted]' } }, sink);
    log.info({ req: { headers: { authorization: 'Bearer s3cret', host: 'x' } } }, 'request');
    log.info({ agent: { token: 'agent-s3cret', base_url: 'http://a' } }, 'agent');
    log.info({ body: { dhchap_key: 'DHHC-1:00:s3cret:', dhchap_ctrl_key: 'DHHC-1:00:s3cret2:', tls_psk: 'NVMeTLSkey-1:01:s3cret:' } }, 'nvme');
    log.info({ vars: { dhchap_secret: 'DHHC-1:00:s3cret3:', dhchap_ctrl_secret: 'DHHC-1:00:s3cret4:', hostnqn: 'nqn.x', iscsi_password: 's3cret5' } }, 'boot vars');
    log.info({ body: { iqn: 'iqn.x', chap: { userid: 'w1', secret: 's3cret6' } } }, 'access');
    const out = lines.join('');
    expect(out).not.toContain('s3cret');
    expect(out.match(/\[redacted\]/g)).toHaveLength(9);
    expect(out).toContain('http://a');
  });
});
