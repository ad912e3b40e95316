/**
 * A worker's live status: what the ledger says beside what the agents and dnsmasq actually hold,
 * one row per item, `ok` false where they differ (the UI highlights those rows).
 */
export interface StatusRow {
  item: string;
  ledger: string;
  actual: string;
  ok: boolean;
}

interface DiskL {
  os: string;
  os_version?: string | null;
  agent: string;
  iqn?: string | null;
  nqn?: string | null;
}
interface ActualDisk {
  os: string;
  exists: boolean;
  error?: string;
  target: { iqn?: string; nqn?: string; luns: unknown[] } | null;
}

export function statusRows(
  worker: { worker_id: string; hostname: string; bound_device?: string | null; mac?: string | null; disks: DiskL[]; cd?: { iqn: string; agent: string } | null },
  actual: { dnsmasq: { mac: string; hostname: string } | null; disks: ActualDisk[]; cd: { exists: boolean; error?: string; target: { iqn?: string } | null } | null },
): StatusRow[] {
  const rows: StatusRow[] = [];
  const mac = worker.bound_device ?? worker.mac ?? null;
  const want = mac ? `${mac} -> ${worker.hostname}` : 'no binding';
  const have = actual.dnsmasq ? `${actual.dnsmasq.mac} -> ${actual.dnsmasq.hostname}` : 'no binding';
  rows.push({ item: 'dnsmasq', ledger: want, actual: have, ok: want === have });
  worker.disks.forEach((d, i) => {
    const a = actual.disks[i] && actual.disks[i].os === d.os ? actual.disks[i] : actual.disks.find((x) => x.os === d.os);
    const name = d.nqn ?? d.iqn ?? '';
    const item = `disk ${d.os}${d.os_version ? ` ${d.os_version}` : ''}`;
    if (!a) rows.push({ item, ledger: `${name} on ${d.agent}`, actual: 'not checked', ok: false });
    else if (a.error) rows.push({ item, ledger: `${name} on ${d.agent}`, actual: a.error, ok: false });
    else {
      const got = a.target?.nqn ?? a.target?.iqn ?? '';
      const ok = a.exists && (!name || got === name);
      rows.push({ item, ledger: `${name} on ${d.agent}`, actual: a.exists ? `${got} (${a.target?.luns.length ?? 0} LUN)` : 'missing on the agent', ok });
    }
  });
  if (worker.cd) {
    const a = actual.cd;
    const ok = !!a && a.exists && !a.error;
    rows.push({ item: 'install CD', ledger: `${worker.cd.iqn} on ${worker.cd.agent}`, actual: a?.error ?? (a?.exists ? (a.target?.iqn ?? 'present') : 'missing on the agent'), ok });
  }
  return rows;
}
