import { FileSystem } from '../../shared/files/file-system';
import { ProcessRunner } from '../../shared/process-runner';

/**
 * The kernel's `.nvme` keyring (nvme-keyring module), where nvmet-tcp's TLS handshake (tlshd)
 * finds the retained PSK by its identity. Written with keyutils' `keyctl` (the key bytes on
 * stdin); the keyring is found by name in /proc/keys, as libnvme does.
 */
export interface NvmeKeyring {
  /** Whether the running kernel has the keyring (null: not a real kernel, nothing to write). */
  available(): Promise<boolean | null>;
  /** The identities of the PSKs it holds. */
  list(): Promise<string[]>;
  put(identity: string, key: Buffer): Promise<void>;
  remove(identity: string): Promise<void>;
}

export class KernelNvmeKeyring implements NvmeKeyring {
  constructor(
    private readonly proc: ProcessRunner,
    private readonly fs: FileSystem,
  ) {}

  private ring(): string | null {
    const keys = this.fs.readTextSync('/proc/keys') ?? '';
    const line = keys.split('\n').find((l) => / keyring +\.nvme: /.test(l));
    return line ? String(parseInt(line.trim().split(/\s+/)[0], 16)) : null;
  }

  private need(): string {
    const r = this.ring();
    if (!r) throw new Error('the kernel has no .nvme keyring (module nvme-keyring not loaded, or a kernel without NVMe/TCP TLS)');
    return r;
  }

  async available(): Promise<boolean> {
    return this.ring() !== null;
  }

  async put(identity: string, key: Buffer): Promise<void> {
    const ring = this.need();
    // The kernel gives the owner of a key in .nvme only "view": no in-place update of a key this
    // process does not possess. A changed PSK is a new key: unlink the old one, add the new one.
    await this.remove(identity);
    await this.proc.run('keyctl', ['padd', 'psk', identity, ring], 10_000, key);
  }

  async list(): Promise<string[]> {
    return this.ring() ? this.entries().map((e) => e.identity) : [];
  }

  /** Unlinking needs write on the keyring only; the kernel then drops the unreferenced key. */
  async remove(identity: string): Promise<void> {
    const ring = this.need();
    for (const k of this.entries()) if (k.identity === identity) await this.proc.run('keyctl', ['unlink', k.id, ring]);
  }

  /** PSKs in /proc/keys (which shows keys their owner may view): decimal id and identity. */
  private entries(): { id: string; identity: string }[] {
    const out: { id: string; identity: string }[] = [];
    for (const l of (this.fs.readTextSync('/proc/keys') ?? '').split('\n')) {
      const m = /^([0-9a-f]+)\s+\S+\s+\d+\s+\S+\s+\S+\s+\S+\s+\S+\s+psk\s+(NVMe.*): \d+$/.exec(l.trim());
      if (m) out.push({ id: String(parseInt(m[1], 16)), identity: m[2] });
    }
    return out;
  }
}

/** A configfs-shaped test directory has no kernel: no keyring to write (the kernel tests cover it). */
export class NoNvmeKeyring implements NvmeKeyring {
  async available(): Promise<null> {
    return null;
  }
  async list(): Promise<string[]> {
    return [];
  }
  async put(): Promise<void> {}
  async remove(): Promise<void> {}
}
