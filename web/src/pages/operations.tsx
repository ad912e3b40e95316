import { useEffect, useRef, useState } from 'preact/hooks';
import { api, call, type AuditEntry } from '../api';
import { relativeTime } from '../lib/format';
import { Badge, ErrorBox, Field } from '../ui/components';
import { useNow } from '../ui/hooks';
import { changeFeed } from '../ui/changes';

const FIXED = new Set(['id', 'ts', 'op', 'status', 'client', 'mac', 'worker_id', 'agent']);
const KEEP = 1000;

/** The audit log: server-side filters, the last 200 matches, then a live tail (since=cursor whenever the change feed says the audit grew). */
export function OperationsPage() {
  const [filters, setFilters] = useState({ op: '', worker_id: '', mac: '', agent: '' });
  const [applied, setApplied] = useState(filters);
  const [entries, setEntries] = useState<AuditEntry[]>([]);
  const [error, setError] = useState<Error>();
  const [live, setLive] = useState(true);
  const cursor = useRef(0);
  /** The first page is in: the tail reads on from its cursor, never before it. */
  const ready = useRef(false);
  const now = useNow(5000);
  const query = () => Object.fromEntries(Object.entries(applied).filter(([, v]) => v.trim() !== '').map(([k, v]) => [k, v.trim()]));
  useEffect(() => {
    let stop = false;
    cursor.current = 0;
    ready.current = false;
    setEntries([]);
    const first = async () => {
      try {
        const page = await call(api.GET('/operations', { params: { query: { ...query(), tail: 200 } } }));
        if (stop) return;
        cursor.current = page.next_cursor;
        ready.current = true;
        setEntries((page.entries as AuditEntry[]).slice().reverse());
        setError(undefined);
      } catch (e) {
        if (!stop) setError(e as Error);
      }
    };
    void first();
    return () => {
      stop = true;
    };
  }, [applied]);
  useEffect(() => {
    if (!live) return;
    // One tail read at a time; a change during it reads again after it (cursor-based: nothing twice).
    let busy = false;
    let again = false;
    const tail = async () => {
      if (!ready.current) return;
      if (busy) {
        again = true;
        return;
      }
      busy = true;
      try {
        const page = await call(api.GET('/operations', { params: { query: { ...query(), since: cursor.current, limit: 500 } } }));
        if (page.entries.length) {
          cursor.current = page.next_cursor;
          setEntries((old) => [...(page.entries as AuditEntry[]).slice().reverse(), ...old].slice(0, KEEP));
        }
        setError(undefined);
      } catch (e) {
        setError(e as Error);
      } finally {
        busy = false;
      }
      if (again) {
        again = false;
        void tail();
      }
    };
    void tail(); // catch up when live is switched back on
    // Another control plane's entries arrive with its ledger changes.
    return changeFeed.subscribe(['audit', 'ledger'], () => void tail());
  }, [live, applied]);
  return (
    <div class="page">
      <header class="page-head">
        <h1>Operations</h1>
        <span class="muted">newest first · {entries.length} shown</span>
        <span class="grow" />
        <label class="check">
          <input type="checkbox" name="live" checked={live} onChange={(e) => setLive(e.currentTarget.checked)} /> live tail
        </label>
      </header>
      <form
        class="filters"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          setApplied({ ...filters });
        }}
      >
        {(['op', 'worker_id', 'mac', 'agent'] as const).map((k) => (
          <Field label={k} key={k}>
            <input name={k} value={filters[k]} placeholder={k === 'op' ? 'device.* or device.bind' : ''} onInput={(e) => setFilters({ ...filters, [k]: e.currentTarget.value })} />
          </Field>
        ))}
        <button type="submit">Apply</button>
      </form>
      <ErrorBox error={error} />
      <table class="plain" aria-label="operations">
        <thead>
          <tr>
            <th>#</th>
            <th>When</th>
            <th>Operation</th>
            <th>Status</th>
            <th>Device</th>
            <th>Worker</th>
            <th>Agent</th>
            <th>Details</th>
            <th>Client</th>
          </tr>
        </thead>
        <tbody>
          {entries.map((e) => (
            <tr key={e.id} class={e.status === 'failed' ? 'mismatch' : ''}>
              <td>{e.id}</td>
              <td title={e.ts}>{relativeTime(e.ts, now)}</td>
              <td>
                <code>{e.op}</code>
              </td>
              <td>
                <Badge kind={e.status}>{e.status}</Badge>
              </td>
              <td>{e.mac ? <code>{e.mac}</code> : ''}</td>
              <td>{e.worker_id ? <a href={`#/workers/${encodeURIComponent(e.worker_id)}`}>{e.worker_id}</a> : ''}</td>
              <td>{e.agent ?? ''}</td>
              <td class="details">
                {Object.entries(e)
                  .filter(([k]) => !FIXED.has(k))
                  .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
                  .join(' ')}
              </td>
              <td>{e.client ?? ''}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
