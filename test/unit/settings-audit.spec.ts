import * as fs from 'node:fs';
import * as path from 'node:path';
import { Clock } from '../../src/control-plane/common/clock';
import type { AppConfig } from '../../src/control-plane/config/app-config';
import type { AuditEntry } from '../../src/control-plane/repositories/audit/audit.repository';
import { FileAuditRepository } from '../../src/control-plane/repositories/audit/file-audit.repository';
import { FileSettingsRepository } from '../../src/control-plane/repositories/settings/file-settings.repository';
import { FileSystem, type FileStamp } from '../../src/shared/files/file-system';
import { tempDir } from '../helpers/app';

/** A disk that refuses operations.jsonl while `auditFull` is set (ENOSPC) and settings.json while `settingsFull` is. */
class PickyDisk extends FileSystem {
  auditFull = false;
  settingsFull = false;
  override appendDurable(file: string, data: string | Buffer, mode?: number): Promise<void> {
    if (this.auditFull && path.basename(file) === 'operations.jsonl') return Promise.reject(Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' }));
    return super.appendDurable(file, data, mode);
  }
  override writeAtomic(file: string, data: string | Buffer, mode?: number, opts?: { durable?: boolean; unchangedSince?: FileStamp | null }): Promise<void> {
    if (this.settingsFull && path.basename(file) === 'settings.json') return Promise.reject(Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' }));
    return super.writeAtomic(file, data, mode, opts);
  }
}

describe('FileSettingsRepository: a settings change and its audit entries are one commit', () => {
  const dirs: string[] = [];
  afterAll(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

  /** A process's view of the state directory: the audit trail and the settings, started as the app starts them. */
  const open = async (dir: string, disk: FileSystem) => {
    const config = { stateDir: dir } as AppConfig;
    const audit = new FileAuditRepository(config, disk, new Clock());
    const repo = new FileSettingsRepository(config, disk, audit);
    // The ledger's start: one recover call for every log that carries entries.
    const recovered = await audit.recover([]);
    await repo.load();
    return { audit, repo, recovered };
  };
  const trail = (dir: string) =>
    (fs.existsSync(path.join(dir, 'operations.jsonl')) ? fs.readFileSync(path.join(dir, 'operations.jsonl'), 'utf8') : '')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as AuditEntry)
      .map((e) => [e.id, e.op, e.enabled]);
  const entry = (enabled: boolean) => [{ op: 'settings.auto_register', fields: { enabled, client: 'test' } }];

  it('the entry is written after the file; a kill in between is repaired at start, and a change that never reached the file is not audited', async () => {
    const dir = tempDir('kurrent-settings-audit-');
    dirs.push(dir);
    const disk = new PickyDisk();
    const first = await open(dir, disk);
    await first.repo.save(['auto_register'], { auto_register: false }, entry(false));
    expect(trail(dir)).toEqual([[1, 'settings.auto_register', false]]);

    // The trail's disk is full: two changes are committed, their entries only in memory and in
    // settings.wal (the second record carries the first's too).
    disk.auditFull = true;
    await first.repo.save(['auto_register'], { auto_register: true }, entry(true));
    await first.repo.save(['signature_enforcement'], { auto_register: true, signature_enforcement: true }, [{ op: 'settings.signature_enforcement', fields: { enabled: true, client: 'test' } }]);
    // A third never reaches settings.json: refused, and its intent record matches no file.
    disk.settingsFull = true;
    await expect(first.repo.save(['auto_register'], { auto_register: false }, entry(false))).rejects.toThrow(/ENOSPC/);
    expect(JSON.parse(fs.readFileSync(path.join(dir, 'settings.json'), 'utf8'))).toEqual({ auto_register: true, signature_enforcement: true });
    expect(trail(dir)).toEqual([[1, 'settings.auto_register', false]]);
    // A kill (the dead process's retries stop; its disk stays full).
    await first.audit.onApplicationShutdown();

    const second = await open(dir, new FileSystem());
    expect(second.recovered).toBe(2);
    expect(trail(dir)).toEqual([
      [1, 'settings.auto_register', false],
      [2, 'settings.auto_register', true],
      [3, 'settings.signature_enforcement', true],
    ]);
    // Ids go on after the recovered ones, and the log is emptied once what it carried is written.
    await second.repo.save(['auto_register'], { auto_register: false, signature_enforcement: true }, entry(false));
    expect(trail(dir).at(-1)).toEqual([4, 'settings.auto_register', false]);
    await second.repo.save(['auto_register'], { auto_register: true, signature_enforcement: true });
    expect(fs.readFileSync(path.join(dir, 'settings.wal'), 'utf8')).toBe('');
    // Another start recovers nothing twice.
    expect((await open(dir, new FileSystem())).recovered).toBe(0);
    expect(trail(dir)).toHaveLength(4);
  });
});
