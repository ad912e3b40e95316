import { api, call, type Schemas } from '../api';
import { bytes } from '../lib/format';
import { Badge, ErrorBox } from '../ui/components';
import { BootRow, outcomeKind, ReleaseButton } from '../ui/boot-timeline';
import { useNow, useResource } from '../ui/hooks';
import { AgentUsage } from '../ui/agent-usage';

type Boot = Schemas['BootSessionDto'];

/** Counts of a list by a key, largest first. */
function countBy<T>(list: T[], key: (x: T) => string): [string, number][] {
  const m = new Map<string, number>();
  for (const x of list) m.set(key(x), (m.get(key(x)) ?? 0) + 1);
  return [...m].sort((a, b) => b[1] - a[1]);
}

/**
 * What an operator looks at first when the room powers on: which seats will boot and why not,
 * the boots of the last hour (in progress, failed, stuck, looping, with release), the agents,
 * the masters and how new machines get in. Live: each part reads again when the change feed says its topic changed.
 */
export function OverviewPage() {
  const now = useNow(5000);
  const workers = useResource(() => call(api.GET('/workers')), [], ['ledger', 'agents', 'settings', 'boots'], 2000);
  const boots = useResource(() => call(api.GET('/boots', { params: { query: { since: new Date(Date.now() - 3600_000).toISOString(), limit: 1000 } } })), [], ['boots']);
  const agents = useResource(() => call(api.GET('/agents', { params: { query: { live: true } } })), [], ['agents', 'audit'], 3000);
  const masters = useResource(() => call(api.GET('/masters')), [], ['agents', 'audit'], 3000);
  const admission = useResource(() => call(api.GET('/settings/admission')), [], ['settings', 'ledger', 'audit']);

  const ws = workers.data ?? [];
  const notBootable = ws.filter((w) => !w.boot_readiness.bootable);
  const reasons = countBy(
    notBootable.flatMap((w) => w.boot_readiness.reasons),
    (r) => r.code,
  );
  const list: Boot[] = boots.data?.items ?? [];
  const latestPerMac = new Map<string, Boot>();
  for (const b of list) if (!latestPerMac.has(b.mac)) latestPerMac.set(b.mac, b);
  const byOutcome = new Map(countBy(list, (b) => b.outcome));
  const booting = list.filter((b) => b.outcome === 'in_progress');
  const trouble = list.filter((b) => b.outcome === 'failed' || b.outcome === 'stuck').slice(0, 8);
  const looping = [...latestPerMac.values()].filter((b) => b.looping);
  const agentList = agents.data ?? [];
  const up = agentList.filter((a) => a.health === 'ok');
  const masterRows = new Map<string, { size: number; mtime: number; agents: string[] }>();
  for (const a of masters.data?.agents ?? []) {
    for (const m of a.masters) {
      const row = masterRows.get(m.name) ?? { size: m.size, mtime: m.mtime, agents: [] };
      row.agents.push(a.agent);
      row.mtime = Math.max(row.mtime, m.mtime);
      masterRows.set(m.name, row);
    }
  }
  const latestOf = (name: string) => {
    const v = masters.data?.catalog.find((m) => m.name === name)?.latest;
    return v ? `v${v}` : 'no version yet';
  };
  return (
    <div class="page">
      <header class="page-head">
        <h1>Overview</h1>
        <span class="muted">updates itself as the control plane reports changes</span>
      </header>
      <ErrorBox error={workers.error ?? boots.error} />
      <div class="overview">
        <section class="card" aria-label="seats">
          <h3>Seats</h3>
          <p class="figure">
            {workers.data ? `${ws.length - notBootable.length} / ${ws.length}` : '…'}
          </p>
          <p class="muted">workers that boot their default disk now</p>
          {reasons.length > 0 && (
            <ul class="reasons" aria-label="why seats will not boot">
              {reasons.map(([code, n]) => (
                <li key={code}>
                  <code>{code}</code>: {n}
                </li>
              ))}
            </ul>
          )}
          {notBootable.length > 0 && (
            <p>
              {notBootable.slice(0, 6).map((w) => (
                <a key={w.worker_id} href={`#/workers/${encodeURIComponent(w.worker_id)}`} class="chip">
                  {w.worker_id}
                </a>
              ))}
              {notBootable.length > 6 && <span class="muted"> and {notBootable.length - 6} more</span>}
            </p>
          )}
        </section>
        <section class="card" aria-label="boots in the last hour">
          <h3>Boots in the last hour</h3>
          <p class="figure">{list.length}</p>
          <p>
            {(['in_progress', 'booted', 'failed', 'stuck', 'waiting', 'held', 'superseded'] as const).map((o) =>
              byOutcome.get(o) ? (
                <span key={o}>
                  <Badge kind={outcomeKind(o)}>
                    {o.replace('_', ' ')} {byOutcome.get(o)}
                  </Badge>{' '}
                </span>
              ) : null,
            )}
          </p>
          {booting.length > 0 && <p class="muted">booting now: {booting.map((b) => b.worker_id ?? b.mac).slice(0, 10).join(', ')}</p>}
        </section>
        <section class="card" aria-label="boot loops">
          <h3>Boot loops</h3>
          {looping.length === 0 ? (
            <p class="muted">No device is looping.</p>
          ) : (
            <ul class="plain-list">
              {looping.map((b) => (
                <li key={b.mac}>
                  <code>{b.mac}</code> {b.worker_id && <a href={`#/workers/${encodeURIComponent(b.worker_id)}`}>{b.worker_id}</a>}{' '}
                  <Badge kind="failed">{b.outcome === 'held' ? 'held' : 'looping'}</Badge> <ReleaseButton mac={b.mac} onDone={() => void boots.reload()} />
                </li>
              ))}
            </ul>
          )}
        </section>
        <section class="card" aria-label="agents overview">
          <h3>Agents</h3>
          <p class="figure">
            {agents.data ? `${up.length} / ${agentList.length}` : '…'}
          </p>
          <p class="muted">answering their probe</p>
          <ul class="plain-list">
            {agentList.map((a) => (
              <li key={a.id}>
                <strong>{a.id}</strong> <Badge kind={a.health === 'ok' ? 'ok' : a.health === 'disabled' ? 'disabled' : 'failed'}>{a.health ?? 'unknown'}</Badge>{' '}
                <span class="muted">{a.capabilities?.backend ?? ''}</span>
                <br />
                <AgentUsage usage={a.usage} />
              </li>
            ))}
          </ul>
        </section>
        <section class="card" aria-label="masters overview">
          <h3>
            <a href="#/masters">Masters</a>
          </h3>
          {masterRows.size === 0 && <p class="muted">No master on any agent.</p>}
          <ul class="plain-list">
            {[...masterRows].map(([name, m]) => (
              <li key={name}>
                <code>{name}</code> {bytes(m.size)} · {latestOf(name)} · {new Date(m.mtime * 1000).toISOString().slice(0, 10)} · on {m.agents.join(', ')}
              </li>
            ))}
          </ul>
        </section>
        <section class="card" aria-label="admission overview">
          <h3>New machines</h3>
          {admission.data && (
            <>
              <p>
                <Badge kind={admission.data.mode === 'closed' ? 'closed' : 'open'}>{admission.data.mode}</Badge> {admission.data.window.open ? `window: ${admission.data.window.admitted} admitted` : ''}
              </p>
              <p class="muted">{admission.data.refused.total} refused since {admission.data.refused.since.slice(0, 16).replace('T', ' ')}</p>
            </>
          )}
        </section>
      </div>
      <section class="card" aria-label="failed and stuck boots">
        <h3>Failed and stuck boots</h3>
        {trouble.length === 0 && <p class="muted">None in the last hour.</p>}
        <ol class="boots">
          {trouble.map((b) => (
            <BootRow key={b.id} boot={b} now={now} showMac />
          ))}
        </ol>
      </section>
    </div>
  );
}
