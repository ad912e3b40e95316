import { useEffect, useState } from 'preact/hooks';
import { api, call, type Schemas } from '../api';
import { bytes } from '../lib/format';
import { Badge, confirmAction, ErrorBox, Field, notify, Options } from '../ui/components';
import { OS_NAMES } from '../lib/constants';
import { useAction, useResource } from '../ui/hooks';

type Version = Schemas['MasterVersionCatalogDto'];

/**
 * Masters and their versions over every agent: a `_tpl_` file dropped into an agent's DISK_DIR
 * becomes the next version once it has settled; disks hold a version. Notes are edited in place;
 * a version no disk holds can be deleted.
 */
export function MastersPage() {
  const masters = useResource(() => call(api.GET('/masters')), [], ['agents', 'audit'], 5000);
  const act = useAction();
  const [editing, setEditing] = useState<string | null>(null);
  const [note, setNote] = useState('');
  const catalog = masters.data?.catalog ?? [];
  const down = (masters.data?.agents ?? []).filter((a) => a.error);
  const key = (name: string, v: Version) => `${name}\n${v.version}`;
  /** Agents that hold the master (some version, or its file) but not this version. */
  const missingOn = (name: string, v: Version) =>
    (masters.data?.agents ?? []).filter((a) => !a.error && a.masters.some((x) => x.name === name) && !v.agents.includes(a.agent) && !v.conflicting_agents?.includes(a.agent)).map((a) => a.agent);
  const saveNote = async (name: string, v: Version) => {
    const r = await act.run(() => call(api.PUT('/masters/{name}/versions/{version}/note', { params: { path: { name, version: String(v.version) } }, body: { note } })));
    if (r) {
      setEditing(null);
      void masters.reload();
    }
  };
  const remove = async (name: string, v: Version) => {
    if (!(await confirmAction(`Delete version ${v.version} of ${name}?`, <p>Its file is deleted on {v.agents.join(', ')}. Its number is never given again.</p>, { confirm: 'Delete version' }))) return;
    const r = await act.run(() => call(api.DELETE('/masters/{name}/versions/{version}', { params: { path: { name, version: String(v.version) } } })));
    if (r) {
      notify(`Version ${v.version} of ${name} deleted on ${r.deleted_on.join(', ')}`);
      void masters.reload();
    }
  };
  return (
    <div class="page">
      <header class="page-head">
        <h1>Masters</h1>
        <span class="muted">
          {catalog.length} masters · {catalog.reduce((n, m) => n + m.versions.length, 0)} versions
        </span>
        <span class="grow" />
        <button type="button" onClick={() => void masters.reload()} disabled={masters.loading}>
          Refresh
        </button>
      </header>
      <p class="muted">A <code>_tpl_</code> file copied into an agent's DISK_DIR becomes the master's next version once it has settled. Disks are cloned from a version and reset disks are restored to theirs; replacing the file changes no disk.</p>
      <ErrorBox error={masters.error ?? act.error} onClose={act.clear} />
      {down.map((a) => (
        <p key={a.agent} class="bad">
          {a.agent}: {a.error}
        </p>
      ))}
      {catalog.length === 0 && !masters.loading && <p class="muted">No master on any agent.</p>}
      {catalog.map((m) => (
        <section key={m.name} class="card" aria-label={`master ${m.name}`}>
          <h3>
            <code>{m.name}</code> {m.latest !== null && <Badge kind="ok">latest v{m.latest}</Badge>}
            {m.unversioned_disks > 0 && <span class="muted"> · {m.unversioned_disks} disks made before versions</span>}
          </h3>
          <table class="plain" aria-label={`versions of ${m.name}`}>
            <thead>
              <tr>
                <th>Version</th>
                <th>Size</th>
                <th>Data</th>
                <th>SHA-256</th>
                <th>Created</th>
                <th>Origin</th>
                <th>Agents</th>
                <th>Disks</th>
                <th>Note</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {m.versions.map((v) => (
                <tr key={v.version} class={v.conflicting_agents?.length ? 'mismatch' : ''}>
                  <td>
                    <strong>v{v.version}</strong>
                  </td>
                  <td>{bytes(v.size)}</td>
                  <td>{bytes(v.allocated)}</td>
                  <td>
                    <code title={v.sha256}>{v.sha256.slice(0, 12)}</code>
                  </td>
                  <td>{new Date(v.created * 1000).toISOString().slice(0, 16).replace('T', ' ')}</td>
                  <td>{v.origin}</td>
                  <td>
                    {v.agents.join(', ')}
                    {v.conflicting_agents?.length ? <span class="bad"> · other bytes on {v.conflicting_agents.join(', ')}</span> : null}
                    {missingOn(m.name, v).length ? <Distribution name={m.name} version={v.version} missing={missingOn(m.name, v)} onDone={() => void masters.reload()} /> : null}
                  </td>
                  <td>{v.disks}</td>
                  <td>
                    {editing === key(m.name, v) ? (
                      <form
                        class="inline"
                        onSubmit={(e) => {
                          e.preventDefault();
                          void saveNote(m.name, v);
                        }}
                      >
                        <input aria-label="note" maxLength={500} value={note} onInput={(e) => setNote(e.currentTarget.value)} />
                        <button type="submit" class="primary" disabled={act.busy}>
                          Save
                        </button>
                        <button type="button" onClick={() => setEditing(null)}>
                          Cancel
                        </button>
                      </form>
                    ) : (
                      <>
                        {v.note || <span class="muted">—</span>}{' '}
                        <button
                          type="button"
                          class="link"
                          onClick={() => {
                            setNote(v.note);
                            setEditing(key(m.name, v));
                          }}
                        >
                          Edit
                        </button>
                      </>
                    )}
                  </td>
                  <td>
                    <button type="button" class="danger" disabled={act.busy || v.disks > 0} title={v.disks > 0 ? `${v.disks} disks hold this version` : undefined} onClick={() => void remove(m.name, v)}>
                      Delete
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <MaintenancePanel name={m.name} onChange={() => void masters.reload()} />
          <RolloutPanel name={m.name} versions={m.versions.map((v) => v.version)} onChange={() => void masters.reload()} />
        </section>
      ))}
    </div>
  );
}

/**
 * A version missing on agents that hold its master: where each stands (missing, copying with its
 * progress, interrupted, failed) and the button that copies it there, agent to agent (again:
 * resumes). Polls while a copy runs; the table reloads once the version is everywhere.
 */
function Distribution({ name, version, missing, onDone }: { name: string; version: number; missing: string[]; onDone: () => void }) {
  const path = { name, version: String(version) };
  const d = useResource(() => call(api.GET('/masters/{name}/versions/{version}/distribution', { params: { path } })), [name, version, missing.join(',')]);
  const act = useAction();
  const running = d.data?.agents.some((a) => a.state === 'running') ?? false;
  useEffect(() => {
    if (d.data?.complete) onDone();
    if (!running) return;
    const timer = setTimeout(() => void d.reload(), 1000);
    return () => clearTimeout(timer);
  }, [d.data]);
  const rows = d.data?.agents.filter((a) => a.state !== 'present') ?? missing.map((agent) => ({ agent, state: 'missing' as const, data_bytes: undefined, bytes_done: undefined, error: undefined }));
  const pct = (a: (typeof rows)[number]) => (a.data_bytes ? `${Math.floor(((a.bytes_done ?? 0) * 100) / a.data_bytes)}%` : '');
  const label = (a: (typeof rows)[number]) => (a.state === 'running' ? `copying ${pct(a)}` : a.state === 'interrupted' ? `interrupted at ${pct(a)}` : a.state);
  const again = rows.some((a) => a.state === 'interrupted' || a.state === 'failed');
  return (
    <span class={running ? 'muted' : 'bad'} aria-label={`distribution of v${version}`}>
      {' · '}
      {rows.map((a, i) => (
        <span key={a.agent} title={a.error}>
          {i ? ', ' : ''}
          {a.agent} {label(a)}
        </span>
      ))}{' '}
      <button
        type="button"
        class="link"
        disabled={act.busy || running}
        title="Copy this version to these agents, agent to agent: only its data, checksummed before it is used"
        onClick={async () => {
          const r = await act.run(() => call(api.POST('/masters/{name}/versions/{version}/distribute', { params: { path } })));
          if (r) void d.reload();
        }}
      >
        {again ? 'Resume' : 'Distribute'}
      </button>
      {act.error ? <span class="bad"> {act.error.message}</span> : null}
    </span>
  );
}

/** The master's maintenance writer: one worker boots a writable clone of the latest version; promote makes it the next version. */
function MaintenancePanel({ name, onChange }: { name: string; onChange: () => void }) {
  const m = useResource(() => call(api.GET('/masters/{name}/maintenance', { params: { path: { name } } })).catch((e: { status?: number }) => (e.status === 404 ? null : Promise.reject(e))), [name], ['ledger', 'audit'], 5000);
  const act = useAction();
  const [f, setF] = useState({ worker: '', os: 'windows' as (typeof OS_NAMES)[number], note: '' });
  const done = (x: unknown, what: string) => {
    if (x) {
      notify(what);
      void m.reload();
      onChange();
    }
  };
  const cur = m.data ?? null;
  return (
    <div class="rollout" aria-label={`maintenance of ${name}`}>
      <h4>Maintenance</h4>
      <ErrorBox error={m.error ?? act.error} onClose={act.clear} />
      {cur ? (
        <>
          <p>
            <Badge kind="pending">in maintenance</Badge> by <a href={`#/workers/${encodeURIComponent(cur.worker_id)}`}>{cur.worker_id}</a> ({cur.os} disk on {cur.agent}), from v{cur.from_version ?? '?'}. Shut the worker down before promoting.
          </p>
          <div class="inline">
            <Field label="Note for the new version">
              <input name="maintenance-note" maxLength={500} value={f.note} onInput={(e) => setF({ ...f, note: e.currentTarget.value })} />
            </Field>
            <button
              type="button"
              class="primary"
              disabled={act.busy}
              onClick={async () => {
                const r = await act.run(() => call(api.POST('/masters/{name}/maintenance/promote', { params: { path: { name } }, body: f.note ? { note: f.note } : {} })));
                done(r, r ? `${name}: version ${r.version} made from ${cur.worker_id}'s disk` : '');
              }}
            >
              Promote to a new version
            </button>
            <button
              type="button"
              class="danger"
              disabled={act.busy}
              onClick={async () => {
                if (!(await confirmAction(`Discard the maintenance disk of ${name}?`, <p>{cur.worker_id}'s {cur.os} disk and everything written to it are deleted; the master is unchanged.</p>, { confirm: 'Discard' }))) return;
                done(await act.run(() => call(api.DELETE('/masters/{name}/maintenance', { params: { path: { name } } }))), `${name}: maintenance discarded`);
              }}
            >
              Discard
            </button>
          </div>
        </>
      ) : (
        <form
          class="inline"
          onSubmit={async (e) => {
            e.preventDefault();
            done(await act.run(() => call(api.POST('/masters/{name}/maintenance', { params: { path: { name } }, body: { worker_id: f.worker.trim(), os: f.os } }))), `${name}: in maintenance by ${f.worker.trim()}`);
          }}
        >
          <Field label="Maintenance worker">
            <input name="maintenance-worker" required value={f.worker} onInput={(e) => setF({ ...f, worker: e.currentTarget.value })} />
          </Field>
          <Field label="as its disk">
            <select name="maintenance-os" value={f.os} onChange={(e) => setF({ ...f, os: e.currentTarget.value as (typeof OS_NAMES)[number] })}>
              <Options values={OS_NAMES} />
            </select>
          </Field>
          <button type="submit" disabled={act.busy}>
            Start maintenance
          </button>
        </form>
      )}
    </div>
  );
}

/**
 * A master's rollout: which version its disks are to hold, the canary first. Shows every disk with
 * the version it holds and its state; starts a rollout, promotes it, rolls it back.
 */
function RolloutPanel({ name, versions, onChange }: { name: string; versions: number[]; onChange: () => void }) {
  // 404 (no rollout yet) is an answer, not an error.
  const r = useResource(() => call(api.GET('/masters/{name}/rollout', { params: { path: { name } } })).catch((e: { status?: number }) => (e.status === 404 ? null : Promise.reject(e))), [name], ['ledger', 'audit', 'boots', 'settings'], 5000);
  const act = useAction();
  const [f, setF] = useState({ version: '', canary: '', percent: '' });
  const rollout = r.data ?? null;
  const canary = () => {
    const workers = f.canary.split(/[\s,]+/).filter(Boolean);
    return { ...(workers.length ? { canary_workers: workers } : {}), ...(f.percent.trim() ? { canary_percent: Number(f.percent) } : {}) };
  };
  const done = (x: unknown, what: string) => {
    if (x) {
      notify(what);
      void r.reload();
      onChange();
    }
  };
  return (
    <div class="rollout" aria-label={`rollout of ${name}`}>
      <h4>Rollout</h4>
      <ErrorBox error={r.error ?? act.error} onClose={act.clear} />
      {rollout ? (
        <>
          <p>
            {rollout.rollback ? 'Rollback' : 'Rollout'} to <strong>v{rollout.version}</strong> (from {rollout.previous ? `v${rollout.previous}` : 'none'}) · <Badge kind={rollout.phase === 'all' ? 'ok' : 'pending'}>{rollout.phase === 'all' ? 'all disks' : `canary: ${rollout.canary.join(', ')}`}</Badge> · {rollout.summary.on_target}/{rollout.summary.disks} on v{rollout.version} · {rollout.summary.at_next_boot} at next boot · {rollout.summary.needs_rebase} need a rebase · booted {rollout.summary.booted}, failed {rollout.summary.failed}
          </p>
          <table class="plain small" aria-label={`disks of ${name}`}>
            <thead>
              <tr>
                <th>Worker</th>
                <th>OS</th>
                <th>Mode</th>
                <th>Holds</th>
                <th>Target</th>
                <th>State</th>
                <th>Boot since</th>
              </tr>
            </thead>
            <tbody>
              {rollout.disks.map((d) => (
                <tr key={`${d.worker_id}/${d.os_tag ?? d.os}`} class={d.boot_since?.outcome === 'failed' || d.boot_since?.outcome === 'stuck' ? 'mismatch' : ''}>
                  <td>
                    <a href={`#/workers/${encodeURIComponent(d.worker_id)}`}>{d.worker_id}</a>
                    {d.canary ? ' (canary)' : ''}
                  </td>
                  <td>{d.os}</td>
                  <td>{d.mode}</td>
                  <td>{d.version ? `v${d.version}` : '—'}</td>
                  <td>{d.target ? `v${d.target}` : '—'}</td>
                  <td>{d.state.replace(/_/g, ' ')}</td>
                  <td>{d.boot_since ? `${d.boot_since.outcome.replace('_', ' ')} ${d.boot_since.started_at.slice(11, 19)}` : '—'}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <div class="inline">
            {rollout.phase === 'canary' && (
              <button type="button" class="primary" disabled={act.busy} onClick={async () => done(await act.run(() => call(api.POST('/masters/{name}/rollout/promote', { params: { path: { name } } }))), `${name}: every disk to v${rollout.version}`)}>
                Promote to all disks
              </button>
            )}
            {rollout.previous !== null && (
              <button
                type="button"
                class="danger"
                disabled={act.busy}
                onClick={async () => {
                  if (!(await confirmAction(`Roll ${name} back to v${rollout.previous}?`, <p>Reset disks go back to v{rollout.previous} at their next boot{f.canary || f.percent ? ', the canary first' : ''}; persistent disks when rebased.</p>, { confirm: 'Roll back' }))) return;
                  done(await act.run(() => call(api.POST('/masters/{name}/rollout/rollback', { params: { path: { name } }, body: canary() }))), `${name}: rolling back to v${rollout.previous}`);
                }}
              >
                Roll back to v{rollout.previous}
              </button>
            )}
          </div>
        </>
      ) : (
        !r.loading && <p class="muted">No rollout: each disk keeps the version it was cloned from.</p>
      )}
      <form
        class="inline"
        onSubmit={async (e) => {
          e.preventDefault();
          const started = await act.run(() => call(api.POST('/masters/{name}/rollout', { params: { path: { name } }, body: { version: Number(f.version), ...canary() } })));
          done(started, `${name}: rollout to v${f.version} started`);
          if (started) setF({ version: '', canary: '', percent: '' });
        }}
      >
        <Field label="Roll out version">
          <select name="rollout-version" required value={f.version} onChange={(e) => setF({ ...f, version: e.currentTarget.value })}>
            <option value="">pick…</option>
            {versions.map((v) => (
              <option key={v} value={String(v)}>
                v{v}
              </option>
            ))}
          </select>
        </Field>
        <Field label="Canary workers" hint="comma separated; empty: all at once">
          <input name="canary" value={f.canary} onInput={(e) => setF({ ...f, canary: e.currentTarget.value })} />
        </Field>
        <Field label="or canary %">
          <input name="canary-percent" type="number" min={1} max={100} value={f.percent} onInput={(e) => setF({ ...f, percent: e.currentTarget.value })} />
        </Field>
        <button type="submit" disabled={act.busy}>
          Start rollout
        </button>
      </form>
    </div>
  );
}
