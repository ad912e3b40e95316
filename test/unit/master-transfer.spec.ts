import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { MasterExtentsDto } from '../../src/shared/agent-contract/transfers.dto';
import { AgentClock } from '../../src/storage-agent/agent-clock';
import type { AgentConfig } from '../../src/storage-agent/agent-config';
import { ImageFs } from '../../src/storage-agent/images/image-fs';
import { MasterStoreService } from '../../src/storage-agent/images/master-store.service';
import { MasterTransferService } from '../../src/storage-agent/images/master-transfer.service';
import { PeerAgentClient, PeerError } from '../../src/storage-agent/images/peer-agent-client';
import type { TargetManifest } from '../../src/storage-agent/luns/manifest';
import { tempDir } from '../helpers/app';
import { until } from '../helpers/poll';

const MiB = 1 << 20;
const NAME = '_tpl_lab.img';

/** A sending agent without HTTP: serves a local file, and can corrupt or cut what it sends. */
class FakePeer extends PeerAgentClient {
  extentCalls = 0;
  contentCalls = 0;
  corruptAt: number | null = null;
  failAfterCalls: number | null = null;
  constructor(
    private readonly file: string,
    private readonly ext: MasterExtentsDto,
  ) {
    super();
  }
  override async extents(): Promise<MasterExtentsDto> {
    this.extentCalls++;
    await new Promise((r) => setImmediate(r));
    return this.ext;
  }
  override async content(_p: unknown, _n: string, _v: number, offset: number, length: number): Promise<Buffer> {
    if (this.failAfterCalls !== null && this.contentCalls >= this.failAfterCalls) throw new PeerError('http://sender:4840 unreachable: ECONNRESET', null);
    this.contentCalls++;
    const buf = Buffer.alloc(length);
    const fd = fs.openSync(this.file, 'r');
    fs.readSync(fd, buf, 0, length, offset);
    fs.closeSync(fd);
    if (this.corruptAt !== null && this.corruptAt >= offset && this.corruptAt < offset + length) buf[this.corruptAt - offset] ^= 0xff;
    return buf;
  }
}

/**
 * MasterTransferService with the sender replaced: what arrives becomes a version only when its
 * checksum is the sender's; a cut transfer resumes after its checkpoint; two asks start one pull.
 * Files are real (ImageFs on a temp directory); the network is not.
 */
describe('MasterTransferService', () => {
  const root = tempDir('kurrent-transfer-unit-');
  const src = path.join(root, 'source.img');
  let diskDir: string;
  let store: MasterStoreService;
  let transfers: MasterTransferService;
  let ext: MasterExtentsDto;

  beforeAll(() => {
    // Data at 0-80 MiB and from 96 MiB to the end, 5000 bytes past 104 MiB: five 16 MiB requests
    // (a checkpoint after the fourth), then one not a whole number of blocks.
    const fd = fs.openSync(src, 'w');
    fs.ftruncateSync(fd, 104 * MiB + 5000);
    fs.writeSync(fd, randomBytes(80 * MiB), 0, 80 * MiB, 0);
    fs.writeSync(fd, randomBytes(8 * MiB + 5000), 0, 8 * MiB + 5000, 96 * MiB);
    fs.closeSync(fd);
    const sha = execFileSync('openssl', ['dgst', '-sha256', '-r', src], { encoding: 'utf8' }).slice(0, 64);
    ext = { name: NAME, version: 4, size: 104 * MiB + 5000, sha256: sha, created: 1_700_000_000, note: 'from the lab', data_bytes: 88 * MiB + 5000, extents: [{ offset: 0, length: 80 * MiB }, { offset: 96 * MiB, length: 8 * MiB + 5000 }] };
  });

  afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

  beforeEach(async () => {
    diskDir = fs.mkdtempSync(path.join(root, 'disks-'));
    const images = new ImageFs(diskDir);
    const config = { masterScanMs: 60_000, masterSettleMs: 0, transferMaxBytesPerSec: 0 } as AgentConfig;
    store = new MasterStoreService(config, images, { all: () => [] } as unknown as TargetManifest);
    await images.mkdirpInside('.masters');
    transfers = new MasterTransferService(config, images, store, new FakePeer(src, ext), new AgentClock());
  });

  const settle = async () => (await until(async () => transfers.list().find((t) => t.state !== 'running'), 20_000))!;
  const leftovers = () => fs.readdirSync(path.join(diskDir, '.masters', NAME)).filter((f) => f.startsWith('.'));
  /** Waits (the retry backoff) pass at once, and are counted. */
  class InstantClock extends AgentClock {
    waits: number[] = [];
    override async sleep(ms: number): Promise<void> {
      this.waits.push(ms);
    }
  }
  let clock: InstantClock;
  const withPeer = (peer: FakePeer) => {
    clock = new InstantClock();
    transfers = new MasterTransferService({ transferMaxBytesPerSec: 0 } as AgentConfig, new ImageFs(diskDir), store, peer, clock);
    return peer;
  };
  const ask = () => transfers.start(NAME, { version: 4, source_url: 'http://sender:4840', source_ticket: 't' });

  it('bytes that do not match the sender checksum never become a version, and nothing of them is left', async () => {
    const peer = withPeer(new FakePeer(src, ext));
    peer.corruptAt = 97 * MiB + 7;
    expect(await ask()).toMatchObject({ state: 'running', data_bytes: 88 * MiB + 5000, bytes_done: 0 });
    const t = await settle();
    expect(t).toMatchObject({ state: 'failed', error: expect.stringMatching(/^checksum mismatch: received [0-9a-f]{12}, the sender's version is [0-9a-f]{12}; the copy was thrown away$/) });
    expect(await store.recordOf(NAME, 4)).toBeNull();
    expect(leftovers()).toEqual([]);
  });

  it('a sender lost mid-way fails the transfer but keeps its last checkpoint: asked again, only what is after it moves, and the version is the sender bytes', async () => {
    const cut = withPeer(new FakePeer(src, ext));
    cut.failAfterCalls = 5;
    await ask();
    expect(await settle()).toMatchObject({ state: 'failed', bytes_done: 64 * MiB, error: 'http://sender:4840 unreachable: ECONNRESET' });
    // Tried five times, with a growing pause, before it gave up.
    expect(clock.waits).toEqual([500, 1000, 2000, 4000]);
    expect(leftovers().sort()).toEqual(['.4.img.transfer', '.4.transfer.json']);
    // A drop meanwhile does not take the number being transferred: it becomes 5.
    fs.writeFileSync(path.join(diskDir, NAME), 'dropped meanwhile');
    expect((await store.resolveForClone(NAME, undefined)).version).toBe(5);

    const good = withPeer(new FakePeer(src, ext));
    expect(await ask()).toMatchObject({ state: 'running', bytes_done: 64 * MiB });
    expect(await settle()).toMatchObject({ state: 'done', bytes_done: 88 * MiB + 5000, moved_bytes: 24 * MiB + 5000, error: null });
    expect(good.contentCalls).toBe(2);
    const file = path.join(diskDir, '.masters', NAME, '4.img');
    expect(fs.readFileSync(file).equals(fs.readFileSync(src))).toBe(true);
    expect(fs.statSync(file).blocks * 512).toBeLessThan(90 * MiB);
    expect(await store.recordOf(NAME, 4)).toEqual({ sha256: ext.sha256, deleted: false });
    expect(store.list()[0].versions.map((v) => [v.version, v.origin, v.note, v.created])).toEqual([
      [4, 'transfer', 'from the lab', 1_700_000_000],
      [5, 'drop', '', expect.any(Number)],
    ]);
    expect(leftovers()).toEqual([]);
  });

  it('a blip of the sender (one dropped connection) is tried again and does not fail the transfer; a refusal fails at once', async () => {
    const blip = withPeer(new FakePeer(src, ext));
    let failures = 1;
    const real = blip.content.bind(blip);
    blip.content = async (...args: Parameters<FakePeer['content']>) => {
      if (args[3] === 16 * MiB && failures-- > 0) throw new PeerError('http://sender:4840 unreachable: UND_ERR_SOCKET', null);
      return real(...args);
    };
    await ask();
    expect(await settle()).toMatchObject({ state: 'done', error: null });
    expect(clock.waits).toEqual([500]);

    const refused = withPeer(new FakePeer(src, ext));
    refused.content = async () => {
      throw new PeerError('http://sender:4840 answered 401: invalid or expired transfer ticket', 401);
    };
    await store.deleteVersion(NAME, 4);
    await ask();
    expect(await settle()).toMatchObject({ state: 'failed', error: 'http://sender:4840 answered 401: invalid or expired transfer ticket' });
    expect(clock.waits).toEqual([]);
  });

  it('two asks at once start one transfer; asked again once it is here, it is done without moving a byte', async () => {
    const peer = withPeer(new FakePeer(src, ext));
    const [a, b] = await Promise.all([ask(), ask()]);
    expect([a.state, b.state, peer.extentCalls]).toEqual(['running', 'running', 1]);
    expect(await settle()).toMatchObject({ state: 'done' });
    expect(peer.contentCalls).toBe(6);
    expect(await ask()).toMatchObject({ state: 'done', moved_bytes: 0 });
    expect(peer.contentCalls).toBe(6);
  });
});
