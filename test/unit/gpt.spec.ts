import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { writeGpt } from '../../scripts/gpt';

/**
 * scripts/gpt.ts against util-linux's reading of the same image: sfdisk reads a file as a disk of
 * 512-byte blocks, and through a loop device of 4096-byte blocks (losetup -b) the 4 KiB layout an
 * nvmet namespace shows the booted worker.
 */
const ESP = 'C12A7328-F81F-11D2-BA4B-00A0C93EC93B';
const ROOT = '4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709';

describe('writeGpt', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kurrent-gpt-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  const image = (name: string, mib: number) => {
    const f = path.join(dir, name);
    fs.writeFileSync(f, '');
    fs.truncateSync(f, mib << 20);
    return f;
  };
  const table = (dev: string) => JSON.parse(execFileSync('sfdisk', ['--json', dev], { encoding: 'utf8' })).partitiontable;

  it('512-byte blocks: the table sfdisk reads back, primary and backup valid', () => {
    const f = image('512.img', 8);
    writeGpt(f, 512, [
      { start: 2048, blocks: 4096, type: ESP, name: 'EFI system' },
      { start: 6144, blocks: 8192, type: ROOT, name: 'kurrent-root' },
    ]);
    const t = table(f);
    expect([t.label, t.sectorsize, t.firstlba, t.lastlba]).toEqual(['gpt', 512, 34, 16350]);
    expect(t.partitions.map((p: Record<string, unknown>) => [p.start, p.size, p.type, p.name])).toEqual([
      [2048, 4096, ESP, 'EFI system'],
      [6144, 8192, ROOT, 'kurrent-root'],
    ]);
    // sfdisk --verify checks both headers' and the entries' CRCs and the backup's place.
    expect(execFileSync('sfdisk', ['--verify', f], { encoding: 'utf8' })).not.toMatch(/corrupt|invalid|backup/i);
  });

  it('4096-byte blocks: the table at byte 4096, read through a 4 KiB loop device', () => {
    const f = image('4k.img', 8);
    writeGpt(f, 4096, [{ start: 256, blocks: 1024, type: ROOT, name: 'root' }]);
    // At byte 512 nothing (a 512-byte reader finds no table), at 4096 the header.
    const head = fs.readFileSync(f).subarray(0, 4104);
    expect([head.subarray(512, 520).toString('latin1'), head.subarray(4096, 4104).toString('latin1')]).toEqual(['\0'.repeat(8), 'EFI PART']);
    const loop = execFileSync('losetup', ['--find', '--show', '--sector-size', '4096', '--read-only', f], { encoding: 'utf8' }).trim();
    try {
      const t = table(loop);
      expect([t.label, t.sectorsize, t.firstlba, t.lastlba]).toEqual(['gpt', 4096, 6, 2042]);
      expect(t.partitions.map((p: Record<string, unknown>) => [p.start, p.size, p.type, p.name])).toEqual([[256, 1024, ROOT, 'root']]);
    } finally {
      execFileSync('losetup', ['-d', loop]);
    }
  });

  it('refuses a partition outside the usable blocks', () => {
    const f = image('bad.img', 1);
    expect(() => writeGpt(f, 4096, [{ start: 2, blocks: 8, type: ROOT, name: 'x' }])).toThrow('partition 1 (2..9) is outside 6..250');
  });
});
