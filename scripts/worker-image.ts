import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { writeGpt } from './gpt';

/**
 * The Linux master image of the kernel stage (issue 22): a GPT disk with an EFI system partition
 * whose removable-media boot file is the unified kernel image of worker-image/build.sh, and an
 * ext4 root (label kurrent-root) whose /etc/kurrent/controller names the control plane the booted
 * OS reports to (POST /boots/os-up). Made without mounting anything (mkfs.ext4 -d, mtools), so it
 * needs no root and no loop device (the GPT is written by scripts/gpt.ts).
 *
 *   npm run worker-image -- --controller https://10.0.0.2:4839 --ca controller.crt --out DISK_DIR/_tpl_linux.img
 *   (--sector-size 4096 for a master served over NVMe/TCP by nvmet: its namespaces have 4 KiB blocks)
 */

const root = path.resolve(__dirname, __dirname.includes(`${path.sep}dist${path.sep}`) ? '../..' : '..');
const MiB = 1 << 20;
const ESP_TYPE = 'C12A7328-F81F-11D2-BA4B-00A0C93EC93B';
/** The Discoverable Partitions Specification's root partition type for x86-64. */
const ROOT_TYPE = '4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709';
const ROOT_MIB = 32;

/** `npm run build:worker-image`: builds (or finds up to date) the UKI and the root tree. */
export function buildWorkerParts(): { uki: string; rootTree: string; kernelVersion: string } {
  execFileSync('bash', [path.join(root, 'worker-image/build.sh')], { stdio: ['ignore', 'inherit', 'inherit'] });
  const dir = process.env.KURRENT_WORKER_IMAGE_BUILD ?? path.join(root, 'build/worker-image');
  return { uki: path.join(dir, 'uki.efi'), rootTree: path.join(dir, 'root'), kernelVersion: fs.readFileSync(path.join(dir, 'kernel-version'), 'utf8').trim() };
}

/**
 * Writes the master disk image to `out` (replaced), reporting to `controller`; with `ca` (a PEM
 * file: the control plane's certificate or its CA) the OS verifies the control plane's TLS.
 */
export function writeLinuxMaster(out: string, controller: string, opts: { ca?: string; sectorSize?: 512 | 4096 } = {}): void {
  const sectorSize = opts.sectorSize ?? 512;
  if (!/^https?:\/\/[^\s/]+$/.test(controller)) throw new Error(`controller must be http(s)://host[:port] without a path, got ${JSON.stringify(controller)}`);
  const parts = buildWorkerParts();
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'kurrent-worker-image-'));
  try {
    const tree = path.join(work, 'root');
    fs.cpSync(parts.rootTree, tree, { recursive: true });
    fs.writeFileSync(path.join(tree, 'etc/kurrent/controller'), `${controller}\n`);
    if (opts.ca) fs.copyFileSync(opts.ca, path.join(tree, 'etc/kurrent/controller.crt'));
    const rootImg = path.join(work, 'root.ext4');
    // 4 KiB blocks: mountable on a disk of either logical block size (ext4 blocks cannot be smaller).
    execFileSync('mkfs.ext4', ['-q', '-F', '-b', '4096', '-L', 'kurrent-root', '-E', 'root_owner=0:0', '-d', tree, rootImg, `${ROOT_MIB}M`]);

    const espMiB = Math.ceil(fs.statSync(parts.uki).size / MiB) + 4;
    const espImg = path.join(work, 'esp.vfat');
    execFileSync('mkfs.vfat', ['-C', '-n', 'KURRENT-ESP', espImg, String(espMiB * 1024)], { stdio: 'ignore' });
    execFileSync('mmd', ['-i', espImg, '::/EFI', '::/EFI/BOOT']);
    execFileSync('mcopy', ['-i', espImg, parts.uki, '::/EFI/BOOT/BOOTX64.EFI']);

    // 1 MiB aligned: ESP at 1 MiB, root after it, 1 MiB left for the backup GPT.
    const espStart = 1;
    const rootStart = espStart + espMiB;
    const total = rootStart + ROOT_MIB + 1;
    const disk = `${out}.tmp-${process.pid}`;
    fs.rmSync(disk, { force: true });
    fs.writeFileSync(disk, '');
    fs.truncateSync(disk, total * MiB);
    const blocks = (mib: number) => (mib * MiB) / sectorSize;
    // The GPT sits at LBA 1 of the disk's logical block size: 512 for iSCSI LUNs (stgt, LIO), 4096
    // for nvmet namespaces on btrfs (nvmet exports a file with its file system's block size).
    writeGpt(disk, sectorSize, [
      { start: blocks(espStart), blocks: blocks(espMiB), type: ESP_TYPE, name: 'EFI system' },
      { start: blocks(rootStart), blocks: blocks(ROOT_MIB), type: ROOT_TYPE, name: 'kurrent-root' },
    ]);
    execFileSync('dd', [`if=${espImg}`, `of=${disk}`, 'bs=1M', `seek=${espStart}`, 'conv=notrunc,sparse', 'status=none']);
    execFileSync('dd', [`if=${rootImg}`, `of=${disk}`, 'bs=1M', `seek=${rootStart}`, 'conv=notrunc,sparse', 'status=none']);
    fs.renameSync(disk, out);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

if (require.main === module) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const controller = arg('controller');
  const out = arg('out');
  if (!controller || !out) {
    console.error('usage: npm run worker-image -- --controller https://<control plane>:4839 [--ca <its certificate or CA, PEM>] [--sector-size 512|4096] --out <DISK_DIR>/_tpl_<name>.img');
    process.exit(2);
  }
  const ca = arg('ca');
  const sector = arg('sector-size') ?? '512';
  if (sector !== '512' && sector !== '4096') {
    console.error(`--sector-size must be 512 (iSCSI) or 4096 (NVMe/TCP on nvmet), got ${JSON.stringify(sector)}`);
    process.exit(2);
  }
  writeLinuxMaster(path.resolve(out), controller, { ...(ca ? { ca: path.resolve(ca) } : {}), sectorSize: sector === '4096' ? 4096 : 512 });
  console.log(`worker-image: wrote ${out} (reports to ${controller})`);
}
