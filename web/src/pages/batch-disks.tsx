import { useMemo, useState } from 'preact/hooks';
import { api, call } from '../api';
import { OS_NAMES } from '../lib/constants';
import { executeTargets, planLoad, planRows, type PlanRow } from '../lib/plan';
import { Badge, confirmAction, ErrorBox, Field, Options } from '../ui/components';
import { useAction, useResource } from '../ui/hooks';
import { MasterPicker, useMasters } from './worker-detail';

type Os = (typeof OS_NAMES)[number];
type RowResult = { state: 'waiting' | 'running' | 'ok' | 'skipped' | 'failed'; text?: string };

/**
 * Batch disk creation: pick workers, master and os; preview the placement (dry run); pin rows to
 * other agents; execute the previewed plan with per-row progress (each row is its own request,
 * pinned to the agent shown, four at a time).
 */
export function BatchDisksPage() {
  const workers = useResource(() => call(api.GET('/workers')), []);
  const agents = useResource(() => call(api.GET('/agents', { params: { query: { live: false } } })), []);
  const masters = useMasters();
  const act = useAction();
  const [picked, setPicked] = useState<Set<string>>(new Set());
  const [filter, setFilter] = useState('');
  const [f, setF] = useState({ type: 'master' as 'master' | 'empty', name: '', size: '', os: 'windows' as Os, os_version: '' });
  const [plan, setPlan] = useState<PlanRow[] | null>(null);
  const [overrides, setOverrides] = useState<Record<string, string>>({});
  const [results, setResults] = useState<Record<string, RowResult>>({});
  const [running, setRunning] = useState(false);
  const list = useMemo(() => (workers.data ?? []).filter((w) => !filter || w.worker_id.includes(filter.toLowerCase())).sort((a, b) => a.worker_id.localeCompare(b.worker_id, undefined, { numeric: true })), [workers.data, filter]);
  /** The disk source as the spec types it: a master's name, or an empty disk's size, never both. */
  const spec = () => ({
    ...(f.type === 'master' ? { type: 'master' as const, name: f.name } : { type: 'empty' as const, size: f.size.trim() }),
    os: f.os,
    ...(f.os_version.trim() ? { os_version: f.os_version.trim() } : {}),
  });
  const invalidate = () => {
    setPlan(null);
    setResults({});
    setOverrides({});
  };
  const toggle = (id: string) => {
    const s = new Set(picked);
    if (s.has(id)) s.delete(id);
    else s.add(id);
    setPicked(s);
    invalidate();
  };
  const ids = [...picked].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
  const preview = async () => {
    const r = await act.run(() => call(api.POST('/workers/luns/disk/batch', { body: { ...spec(), dry_run: true, targets: ids.map((worker_id) => ({ worker_id })) } })));
    if (r) {
      setPlan(planRows(ids, r));
      setResults({});
    }
  };
  const execute = async () => {
    if (!plan) return;
    const targets = executeTargets(plan, overrides);
    if (!(await confirmAction('Create the disks?', `${targets.length} disk(s) will be cloned/created as previewed.`, { confirm: 'Execute', danger: false }))) return;
    setRunning(true);
    const res: Record<string, RowResult> = Object.fromEntries(targets.map((t) => [t.worker_id, { state: 'waiting' as const }]));
    setResults({ ...res });
    const queue = [...targets];
    const worker = async () => {
      for (let t = queue.shift(); t; t = queue.shift()) {
        res[t.worker_id] = { state: 'running' };
        setResults({ ...res });
        try {
          const r = await call(api.POST('/workers/luns/disk/batch', { body: { ...spec(), dry_run: false, targets: [t] } }));
          if (r.succeeded.length) res[t.worker_id] = { state: 'ok', text: `${r.succeeded[0].agent}: ${r.succeeded[0].iqn}` };
          else if (r.skipped.length) res[t.worker_id] = { state: 'skipped', text: r.skipped[0].reason };
          else res[t.worker_id] = { state: 'failed', text: r.failed[0]?.error ?? 'no result' };
        } catch (e) {
          res[t.worker_id] = { state: 'failed', text: (e as Error).message };
        }
        setResults({ ...res });
      }
    };
    await Promise.all([worker(), worker(), worker(), worker()]);
    setRunning(false);
    void workers.reload();
  };
  const load = plan ? planLoad(plan, overrides) : {};
  const done = Object.values(results).filter((r) => r.state !== 'waiting' && r.state !== 'running').length;
  const total = Object.keys(results).length;
  const executed = total > 0 && done === total;
  return (
    <div class="page">
      <header class="page-head">
        <h1>Batch disks</h1>
        <span class="muted">{picked.size} worker(s) picked</span>
      </header>
      <ErrorBox error={workers.error ?? masters.error ?? agents.error} />
      <div class="cols">
        <section class="card" aria-label="workers to give a disk">
          <h3>Workers</h3>
          <div class="inline">
            <input type="search" placeholder="filter" value={filter} onInput={(e) => setFilter(e.currentTarget.value)} aria-label="filter workers" />
            <button
              type="button"
              onClick={() => {
                setPicked(new Set([...picked, ...list.map((w) => w.worker_id)]));
                invalidate();
              }}
            >
              Pick all shown
            </button>
            <button
              type="button"
              onClick={() => {
                setPicked(new Set());
                invalidate();
              }}
            >
              None
            </button>
          </div>
          <div class="picklist">
            {list.map((w) => (
              <label class="check" key={w.worker_id}>
                <input type="checkbox" name="worker" value={w.worker_id} checked={picked.has(w.worker_id)} onChange={() => toggle(w.worker_id)} /> {w.worker_id}{' '}
                <span class="muted">{w.disks.map((d) => d.os).join(', ')}</span>
              </label>
            ))}
          </div>
        </section>
        <section class="card" aria-label="disk">
          <h3>Disk</h3>
          <form
            class="grid-form"
            onSubmit={(e) => {
              e.preventDefault();
              void preview();
            }}
          >
            <Field label="Type">
              <select
                name="type"
                value={f.type}
                onChange={(e) => {
                  setF({ ...f, type: e.currentTarget.value as 'master' | 'empty' });
                  invalidate();
                }}
              >
                <option value="master">clone of a master</option>
                <option value="empty">empty disk</option>
              </select>
            </Field>
            {f.type === 'master' ? (
              <Field label="Master">
                <MasterPicker
                  masters={masters.data}
                  value={f.name}
                  onChange={(name) => {
                    setF({ ...f, name });
                    invalidate();
                  }}
                />
              </Field>
            ) : (
              <Field label="Size">
                <input name="size" value={f.size} onInput={(e) => setF({ ...f, size: e.currentTarget.value })} />
              </Field>
            )}
            <Field label="OS">
              <select
                name="os"
                value={f.os}
                onChange={(e) => {
                  setF({ ...f, os: e.currentTarget.value as Os });
                  invalidate();
                }}
              >
                <Options values={OS_NAMES} />
              </select>
            </Field>
            <Field label="OS version">
              <input
                name="os_version"
                value={f.os_version}
                onInput={(e) => {
                  setF({ ...f, os_version: e.currentTarget.value });
                  invalidate();
                }}
              />
            </Field>
            <button type="submit" disabled={act.busy || running || !picked.size}>
              Preview plan
            </button>
          </form>
          <ErrorBox error={act.error} onClose={act.clear} />
        </section>
      </div>
      {plan && (
        <section class="card" aria-label="plan">
          <h3>
            Plan{' '}
            <span class="muted">
              {Object.entries(load)
                .map(([a, n]) => `${a}: ${n}`)
                .join(' · ')}
            </span>
          </h3>
          {total > 0 && (
            <div class="progress" role="progressbar" aria-valuemin={0} aria-valuemax={total} aria-valuenow={done}>
              <div style={{ width: `${(100 * done) / total}%` }} />
              <span>
                {done} / {total}
              </span>
            </div>
          )}
          <table class="plain">
            <thead>
              <tr>
                <th>Worker</th>
                <th>Plan</th>
                <th>Agent</th>
                <th>Result</th>
              </tr>
            </thead>
            <tbody>
              {plan.map((r) => {
                const res = results[r.worker_id];
                return (
                  <tr key={r.worker_id} data-worker={r.worker_id} class={res?.state === 'failed' ? 'mismatch' : ''}>
                    <td>{r.worker_id}</td>
                    <td>
                      <Badge kind={r.status === 'planned' ? 'ready' : r.status}>{r.status}</Badge> {r.reason ?? ''}
                    </td>
                    <td>
                      <select
                        aria-label={`agent for ${r.worker_id}`}
                        value={overrides[r.worker_id] ?? r.agent ?? ''}
                        disabled={running}
                        onChange={(e) => setOverrides({ ...overrides, [r.worker_id]: e.currentTarget.value })}
                      >
                        <option value="">(skip)</option>
                        {(agents.data ?? []).filter((a) => a.enabled).map((a) => (
                          <option key={a.id}>{a.id}</option>
                        ))}
                      </select>
                    </td>
                    <td>{res ? <Badge kind={res.state}>{res.state}</Badge> : ''} {res?.text ?? ''}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
          {/* A plan runs once: its results stay on screen; a new preview makes a new plan. */}
          <button type="button" class="primary" disabled={running || executed || executeTargets(plan, overrides).length === 0} onClick={() => void execute()}>
            {running ? 'Executing…' : executed ? 'Executed: preview again for another run' : `Execute ${executeTargets(plan, overrides).length} row(s)`}
          </button>
        </section>
      )}
    </div>
  );
}
