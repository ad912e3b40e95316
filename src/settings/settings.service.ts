import { Injectable, OnModuleInit } from '@nestjs/common';
import * as path from 'node:path';
import { AuditService } from '../audit/audit.service';
import { AppConfig } from '../config/app-config';
import { FileSystem } from '../store/file-system';
import { LedgerFileError } from '../store/ledger-map';
import { LedgerStore } from '../store/ledger.store';

interface SettingsFile {
  auto_register?: boolean;
}

/** Runtime settings (state/settings.json), which win over the environment's start-up defaults. */
@Injectable()
export class SettingsService implements OnModuleInit {
  readonly file: string;
  private data: SettingsFile = {};

  constructor(
    private readonly config: AppConfig,
    private readonly fs: FileSystem,
    private readonly store: LedgerStore,
    private readonly audit: AuditService,
  ) {
    this.file = path.join(config.stateDir, 'settings.json');
  }

  onModuleInit(): void {
    const text = this.fs.readTextSync(this.file);
    if (text === null || text.trim() === '') return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (e) {
      throw new LedgerFileError(this.file, jsonErrorLine(text), `invalid JSON: ${(e as Error).message}`);
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw new LedgerFileError(this.file, 1, 'expected a JSON object');
    }
    const ar = (parsed as Record<string, unknown>).auto_register;
    if (ar !== undefined && typeof ar !== 'boolean') {
      throw new LedgerFileError(this.file, 1, 'auto_register must be true or false');
    }
    this.data = parsed as SettingsFile;
  }

  /** Effective value: settings.json, else IPXE_CP_AUTO_REGISTER. */
  get autoRegister(): boolean {
    return this.data.auto_register ?? this.config.autoRegister;
  }

  getAutoRegister(): { enabled: boolean } {
    return { enabled: this.autoRegister };
  }

  setAutoRegister(enabled: boolean, client: string): Promise<{ enabled: boolean }> {
    return this.store.exclusive(async () => {
      const previous = this.autoRegister;
      const next = { ...this.data, auto_register: enabled };
      await this.fs.writeAtomic(this.file, JSON.stringify(next, null, 2) + '\n');
      this.data = next;
      await this.audit.record('settings.auto_register', { enabled, previous, client });
      return { enabled };
    });
  }
}

/** Line of a JSON syntax error (V8 gives a position only for some errors). */
function jsonErrorLine(text: string): number {
  const lines = text.split('\n');
  for (let k = 1; k <= lines.length; k++) {
    const prefix = lines.slice(0, k).join('\n');
    try {
      JSON.parse(prefix);
      return k;
    } catch (e) {
      const msg = (e as Error).message;
      const pos = /at position (\d+)/.exec(msg);
      // Errors at the very end of a prefix only mean "incomplete": read one more line.
      if (/end of JSON input/i.test(msg) || (pos && Number(pos[1]) >= prefix.length)) continue;
      return pos ? prefix.slice(0, Number(pos[1])).split('\n').length : k;
    }
  }
  return lines.length;
}
