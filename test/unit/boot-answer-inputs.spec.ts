import fc from 'fast-check';
import type { AgentGateway } from '../../src/control-plane/storage-nodes/agent-gateway';
import { StorageNodesService } from '../../src/control-plane/storage-nodes/storage-nodes.service';
import { cleanReportString, REPORT_FIELD_MAX } from '../../src/shared/grammars';
import { FileCredentialRepository } from '../../src/control-plane/repositories/credentials/file-credential.repository';
import { MemFs } from '../helpers/mem-fs';

/**
 * BootService caches rendered answers until one of its inputs changes revision. These inputs are
 * the ones no e2e test can move without a real agent: a capability set, the credential file.
 */
describe('revisions of the boot answer inputs', () => {
  it('a capability probe bumps the revision only when the capabilities differ', async () => {
    let caps: Record<string, unknown> = { backend: 'stgt', nvme_port: null };
    const gateway = { call: async (_a: unknown, _m: string, p: string) => (p === '/capabilities' ? { ...caps } : { status: 'ok' }) } as unknown as AgentGateway;
    const agents = new StorageNodesService({} as never, gateway, { agentProbeTimeoutMs: 100 } as never, {} as never, {} as never, {} as never);
    const a = { id: 'a1', base_url: 'http://127.0.0.1:9', token: '' };
    await agents.capabilities(a);
    const r1 = agents.capsRevision;
    await agents.capabilities(a);
    expect(agents.capsRevision).toBe(r1);
    caps = { backend: 'nvmet', nvme_port: 4421, nvme_tls: true };
    await agents.capabilities(a);
    expect(agents.capsRevision).toBe(r1 + 1);
  });

  it('every credential change and every push note that changes something bumps the credential revision; a no-op leaves the cache alone', async () => {
    const store = new FileCredentialRepository({ stateDir: '/s', checkpointMs: 0 } as never, new MemFs());
    const r0 = store.revision;
    await store.change((d) => {
      d.removals.push({ hostnqn: 'h', agent: 'a', attempts: 0, next_attempt_at: null } as never);
    });
    expect(store.revision).toBe(r0 + 1);
    await store.note((d) => {
      d.removals[0].attempts = 1;
    });
    expect(store.revision).toBe(r0 + 2);
    await store.note(() => undefined);
    await store.change(() => undefined);
    expect(store.revision).toBe(r0 + 2);
  });
});

describe('cleanReportString fast path', () => {
  /** The general rule, as it was before the printable-ASCII shortcut. */
  const reference = (raw: string) =>
    raw
      .replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029\p{Cf}\u{10000}-\u{10ffff}]|[\ud800-\udfff]/gu, ' ')
      .replace(/\s+/g, ' ')
      .trim()
      .slice(0, REPORT_FIELD_MAX)
      .trim();

  it('gives what the general rule gives, for any string', () => {
    const ascii = fc.string({ unit: fc.constantFrom(' ', 'a', 'Z', '0', '-', '.', '\t', '\u00a0', '\u200b'), maxLength: 140 });
    fc.assert(fc.property(fc.oneof(ascii, fc.string({ maxLength: 200 }), fc.string({ unit: 'binary', maxLength: 40 })), (s) => expect(cleanReportString(s)).toBe(reference(s))), { numRuns: 3000 });
  });
});
