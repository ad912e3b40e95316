import { AtomicFileWriter, FileStamp, FileSystem } from '../../src/shared/files/file-system';

/** In-memory FileSystem for unit tests: the code under test never touches the disk. */
export class MemFs extends FileSystem {
  files = new Map<string, string>();
  /** Every write in order: [file, kind]. */
  writes: [string, 'atomic' | 'inplace' | 'append' | 'link'][] = [];
  /** Files made durable by syncLinked, in order. */
  synced: string[] = [];
  /** Writes to a file whose name ends with this fail (ENOSPC). */
  failOn: string | null = null;
  private stamps = new Map<string, number>();
  private seq = 0;

  private fail(f: string): void {
    if (this.failOn && f.endsWith(this.failOn)) {
      throw Object.assign(new Error(`ENOSPC: no space left on device, write '${f}'`), { code: 'ENOSPC', path: f });
    }
  }
  /** A write from outside the code under test (an operator's hand edit). */
  handEdit(f: string, d: string): void {
    this.put(f, d);
  }
  private put(f: string, d: string): void {
    this.files.set(f, d);
    this.stamps.set(f, ++this.seq);
  }
  override readTextSync(f: string) {
    return this.files.get(f) ?? null;
  }
  override readBytesSync(f: string) {
    const v = this.files.get(f);
    return v === undefined ? null : Buffer.from(v);
  }
  /** Small chunks (one reused buffer, as the real one): every reader here meets lines and characters cut in two. */
  override readChunksSync(f: string, onChunk: (bytes: Buffer) => void, chunkBytes = 7): boolean {
    const v = this.files.get(f);
    if (v === undefined) return false;
    const bytes = Buffer.from(v);
    const buf = Buffer.alloc(chunkBytes);
    for (let at = 0; at < bytes.length; at += chunkBytes) onChunk(buf.subarray(0, bytes.copy(buf, 0, at, at + chunkBytes)));
    return true;
  }
  override async readChunks(f: string, onChunk: (bytes: Buffer) => void, chunkBytes = 7): Promise<boolean> {
    return this.readChunksSync(f, onChunk, chunkBytes);
  }
  override async readText(f: string) {
    return this.files.get(f) ?? null;
  }
  override statSync(f: string): FileStamp | null {
    return this.stampOf(f);
  }
  private stampOf(f: string): FileStamp | null {
    const v = this.files.get(f);
    return v === undefined ? null : { mtimeMs: this.stamps.get(f)!, size: v.length, ino: 1 };
  }
  override async stat(f: string): Promise<FileStamp | null> {
    this.asyncStats++;
    return this.stampOf(f);
  }
  asyncStats = 0;
  override mkdirpSync() {}
  override lockSync() {
    return null;
  }
  override unlockSync() {}
  override removeStaleTemps() {
    return [];
  }
  override async writeAtomic(f: string, data: string | Buffer) {
    this.fail(f);
    this.put(f, data.toString());
    this.writes.push([f, 'atomic']);
  }
  /** Pieces kept in memory until the commit, which is one atomic write (as writeAtomic's). */
  override async openAtomic(f: string): Promise<AtomicFileWriter> {
    const parts: Buffer[] = [];
    return {
      write: async (d) => void parts.push(Buffer.from(d)),
      writeAt: async (offset, d) => {
        const all = Buffer.concat(parts.splice(0));
        d.copy(all, offset);
        parts.push(all);
      },
      commit: async () => {
        this.fail(f);
        this.put(f, Buffer.concat(parts).toString());
        this.writes.push([f, 'atomic']);
      },
      abort: async () => undefined,
    };
  }
  override async replaceViaLink(f: string, data: Buffer) {
    this.fail(f);
    this.put(f, data.toString());
    this.writes.push([f, 'link']);
  }
  override async syncLinked(f: string) {
    this.synced.push(f);
  }
  override removeStaleLinkData() {
    return [];
  }
  override async writeInPlace(f: string, d: string) {
    this.fail(f);
    this.put(f, d);
    this.writes.push([f, 'inplace']);
  }
  override async appendDurable(f: string, d: string | Buffer | readonly Buffer[]) {
    this.fail(f);
    this.put(f, (this.files.get(f) ?? '') + (typeof d === 'string' || Buffer.isBuffer(d) ? d.toString() : Buffer.concat(d).toString()));
    this.writes.push([f, 'append']);
  }
  override async truncate(f: string, n: number) {
    this.truncateSync(f, n);
  }
  override truncateSync(f: string, n: number) {
    this.put(f, Buffer.from(this.files.get(f) ?? '').subarray(0, n).toString());
  }
  override readTailSync(f: string, bytes: number) {
    const v = this.files.get(f);
    return v === undefined ? null : v.slice(-bytes);
  }
  /** A hand edit: same as a write, but not logged as ours. */
  edit(f: string, d: string): void {
    this.put(f, d);
  }
}
