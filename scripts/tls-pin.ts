/**
 * npm run tls:pin -- <cert.pem>                  what iPXE must pin for this controller certificate
 * npm run tls:pin -- --generate <dir> <host>     a self-signed controller certificate + key for <host>
 *
 * Trust model: TFTP carries only the first hop (boot.ipxe); from boot.ipxe.cfg on, every request
 * goes to the controller over HTTPS, and iPXE trusts exactly the certificates whose SHA-256
 * fingerprints were built into it (`make ... TRUST=<cert.pem>`). iPXE reads its `trust` setting
 * only at initialisation, so neither a script nor a DHCP option can widen it afterwards.
 */
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';

/** The lines the helper prints for a certificate (also used by the tests). */
export function describePin(certFile: string): string[] {
  const abs = path.resolve(certFile);
  const x = new X509Certificate(fs.readFileSync(abs));
  const hex = x.fingerprint256.replace(/:/g, '').toLowerCase();
  return [
    `certificate  ${x.subject.replace(/\n/g, ', ')}; valid ${x.validFrom} .. ${x.validTo}${x.subjectAltName ? `; ${x.subjectAltName}` : ''}`,
    `sha256       ${x.fingerprint256}`,
    `ipxe trust   ${hex}`,
    `build        KURRENT_IPXE_TRUST=${abs} npm run build:ipxe   (UEFI e1000 ROM + snponly.efi, in build/ipxe/out)`,
    `controller   IPXE_CP_TLS_CERT=${abs} IPXE_CP_TLS_KEY=<its key>; in docker/tftp/boot.ipxe: set controller-https https://<this host>:4839`,
  ];
}

/** A self-signed RSA-2048 certificate for host (an IP or a DNS name), valid 825 days. */
export function generate(dir: string, host: string): { cert: string; key: string } {
  fs.mkdirSync(dir, { recursive: true });
  const cert = path.join(dir, 'controller.crt');
  const key = path.join(dir, 'controller.key');
  const san = net.isIP(host) ? `IP:${host}` : `DNS:${host}`;
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-sha256', '-days', '825',
    '-subj', `/CN=${host}`, '-addext', `subjectAltName=${san}`,
    '-keyout', key, '-out', cert,
  ], { stdio: ['ignore', 'ignore', 'pipe'] });
  fs.chmodSync(key, 0o600);
  return { cert, key };
}

function main(argv: string[]): void {
  if (argv[0] === '--generate' && argv.length === 3) {
    const { cert, key } = generate(argv[1], argv[2]);
    console.log(`wrote ${cert} and ${key} (0600)`);
    for (const l of describePin(cert)) console.log(l);
    return;
  }
  if (argv.length !== 1 || argv[0].startsWith('-')) {
    console.error('usage: npm run tls:pin -- <cert.pem> | --generate <dir> <host>');
    process.exit(2);
  }
  for (const l of describePin(argv[0])) console.log(l);
}

if (require.main === module) main(process.argv.slice(2));
