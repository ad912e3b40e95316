import { DocumentBuilder } from '@nestjs/swagger';

/** Kurrent's licence, in both documents' info (see LICENSE). */
const LICENSE = { name: 'Apache-2.0', url: 'https://www.apache.org/licenses/LICENSE-2.0' };

/** What each tag of either document groups, for the global tag list. */
const TAGS: Record<string, string> = {
  agents: 'Storage nodes (agents): registry, live capabilities, their targets.',
  boot: 'The boot path workers call from iPXE: boot variables, the boot menu, the iPXE scripts.',
  boots: 'Boot sessions: every boot of every device stage by stage, stuck boots, boot loops and their holds.',
  changes: 'A long-poll that says what changed (devices and workers, audit, boots, agents, settings): what to read again.',
  credentials: 'Per-worker storage credentials (DH-HMAC-CHAP, TLS PSK, iSCSI CHAP) and their pushes.',
  devices: 'Devices (machines by MAC): registration, reports, the identity chain, binding to workers.',
  health: 'Liveness and readiness.',
  luns: 'Targets and their backing files on this storage node.',
  masters: 'Master images and their immutable, numbered versions: what disks are cloned from and restored to.',
  metrics: 'Prometheus metrics.',
  nvme: 'NVMe-oF hosts on this node: DH-HMAC-CHAP keys and TLS PSKs.',
  operations: 'The audit log of every change.',
  reconciler: 'The reconciler that converges agents on the ledger and the credentials.',
  settings: 'Registration, enforcement and boot-policy settings.',
  system: 'This storage node: health and capabilities.',
  workers: 'Workers (seats): identity, disks, default disk, boot state.',
};

/**
 * The parts of a document's info both APIs share: licence, a server with its port as a variable
 * (the default is the listening port's default), and the tags with what they group.
 */
export function documentBase(title: string, description: string, port: number, tags: string[]): DocumentBuilder {
  const b = new DocumentBuilder()
    .setTitle(title)
    .setDescription(description)
    .setVersion('1.0.0')
    .setLicense(LICENSE.name, LICENSE.url)
    .addServer('{scheme}://{host}:{port}', 'Where it listens (IPXE_CP_PORT / IPXE_AGENT_PORT; https when TLS is configured).', {
      scheme: { default: 'http', enum: ['http', 'https'] },
      host: { default: 'localhost' },
      port: { default: String(port) },
    });
  for (const t of tags) b.addTag(t, TAGS[t]);
  return b;
}
