import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { generate } from '../../scripts/tls-pin';

const root = path.resolve(__dirname, '../..');

/**
 * Kurrent's iPXE for the UEFI tests: `npm run build:ipxe` into build/ipxe-pinned with a test
 * certificate for 10.0.2.2 (qemu's host address) pinned. The certificate lives beside the build
 * (each build starts its directory afresh), so later calls and later runs reuse both; one build
 * per CI run serves every test.
 */
export function pinnedIpxe(): { out: string; cert: string; key: string } {
  const build = path.join(root, 'build/ipxe-pinned');
  const tls = `${build}-tls`;
  if (!fs.existsSync(path.join(tls, 'controller.crt'))) generate(tls, '10.0.2.2');
  const cert = path.join(tls, 'controller.crt');
  execFileSync('bash', [path.join(root, 'ipxe/build.sh')], { stdio: 'inherit', env: { ...process.env, KURRENT_IPXE_TRUST: cert, KURRENT_IPXE_BUILD: build } });
  return { out: path.join(build, 'out'), cert, key: path.join(tls, 'controller.key') };
}
