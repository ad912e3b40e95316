import { BootTimeline } from '../ui/boot-timeline';
import { useMemo, useState } from 'preact/hooks';
import { api, call, type Device, type Schemas } from '../api';
import { countdown, hashPrefix, relativeTime } from '../lib/format';
import { parseImport, parsePairs, type ParseError } from '../lib/paste';
import { windowView } from '../lib/window';
import { Badge, type Column, confirmAction, ErrorBox, Field, notify, Outcome, Panel, VirtualTable } from '../ui/components';
import { useAction, useDebounced, useNow, useResource } from '../ui/hooks';

type Dialog = null | 'register' | 'import' | 'batch';
type Filter = { state: '' | 'pooled' | 'bound' | 'revoked'; key: '' | 'claimed' | 'none'; q: string };

/** Rows fetched first, and added by each "More". */
const PAGE = 200;

/**
 * The first `want` devices matching the filter, from GET /devices/page (filtered, searched and
 * ordered by the control plane: a 100,000-device pool never comes to the browser whole).
 */
async function loadDevices(f: Filter, want: number): Promise<Schemas['DevicePageDto']> {
  const query = { state: f.state || 'all', key: f.key || 'any', ...(f.q.trim() ? { q: f.q.trim() } : {}) } as const;
  let page = await call(api.GET('/devices/page', { params: { query: { ...query, limit: Math.min(1000, want) } } }));
  const items = [...page.items];
  while (items.length < want && page.next_after) {
    page = await call(api.GET('/devices/page', { params: { query: { ...query, limit: Math.min(1000, want - items.length), after: page.next_after } } }));
    items.push(...page.items);
  }
  return { ...page, items, total: page.total };
}

export function DevicesPage() {
  const [state, setState] = useState<Filter['state']>('');
  const [key, setKey] = useState<Filter['key']>('');
  const [q, setQ] = useState('');
  const query = useDebounced(q, 150);
  // "More" counts for the filter it was pressed under: a new filter starts at one page in the same
  // render (an effect resetting it would fetch the new filter twice, once with the old count).
  const filterKey = `${state}\0${key}\0${query}`;
  const [more, setMore] = useState({ filterKey, want: PAGE });
  const want = more.filterKey === filterKey ? more.want : PAGE;
  const devices = useResource(() => loadDevices({ state, key, q: query }, want), [state, key, query, want], ['ledger', 'boots'], 3000);
  const [sel, setSel] = useState<string | null>(null);
  const [dialog, setDialog] = useState<Dialog>(null);
  const now = useNow(5000);
  const page = devices.data;
  const rows = page?.items ?? [];
  const counts = page?.counts ?? { all: 0, pooled: 0, bound: 0, revoked: 0 };
  const selected = sel ? rows.find((d) => d.mac === sel) : undefined;

  const columns: Column<Device>[] = [
    { key: 'mac', title: 'MAC', width: '150px', render: (d) => <code>{d.mac}</code> },
    { key: 'state', title: 'State', width: '80px', render: (d) => <Badge kind={d.state}>{d.state}</Badge> },
    { key: 'worker', title: 'Worker', width: '120px', render: (d) => d.bound_worker_id ?? '' },
    { key: 'key', title: 'Key', width: '90px', render: (d) => (d.key_sha256 ? <span title={`sha256 ${d.key_sha256}`}>claimed</span> : <span class="muted">none</span>) },
    { key: 'serial', title: 'Serial', render: (d) => d.fingerprint?.serial ?? '' },
    { key: 'product', title: 'Product', render: (d) => d.fingerprint?.product ?? '' },
    { key: 'mfr', title: 'Manufacturer', render: (d) => d.fingerprint?.manufacturer ?? '' },
    { key: 'cpu', title: 'CPU', render: (d) => d.fingerprint?.cpumodel ?? '' },
    { key: 'seen', title: 'Last seen', width: '100px', render: (d) => <span title={d.last_seen ?? ''}>{relativeTime(d.last_seen, now)}</span> },
  ];

  return (
    <div class="page">
      <header class="page-head">
        <h1>Devices</h1>
        <span class="muted">
          {counts.all.toLocaleString('en-US')} devices · {counts.pooled.toLocaleString('en-US')} pooled · {counts.bound.toLocaleString('en-US')} bound · {counts.revoked.toLocaleString('en-US')} revoked
        </span>
        <span class="grow" />
        <button type="button" onClick={() => setDialog('register')}>
          Register
        </button>
        <button type="button" onClick={() => setDialog('import')}>
          Import
        </button>
        <button type="button" onClick={() => setDialog('batch')}>
          Batch bind
        </button>
        <button type="button" onClick={() => void devices.reload()} disabled={devices.loading}>
          Refresh
        </button>
      </header>
      <Admission onChange={() => void devices.reload()} />
      <ErrorBox error={devices.error} />
      {dialog === 'register' && <RegisterForm onClose={() => setDialog(null)} onDone={() => void devices.reload()} />}
      {dialog === 'import' && <ImportForm onClose={() => setDialog(null)} onDone={() => void devices.reload()} />}
      {dialog === 'batch' && <BatchBind onClose={() => setDialog(null)} onDone={() => void devices.reload()} />}
      <div class="filters" role="search">
        <Field label="State">
          <select value={state} onChange={(e) => setState(e.currentTarget.value as Filter['state'])} name="state">
            <option value="">all</option>
            <option value="pooled">pooled</option>
            <option value="bound">bound</option>
            <option value="revoked">revoked</option>
          </select>
        </Field>
        <Field label="Key">
          <select value={key} onChange={(e) => setKey(e.currentTarget.value as typeof key)} name="key">
            <option value="">any</option>
            <option value="claimed">claimed</option>
            <option value="none">none</option>
          </select>
        </Field>
        <Field label="Search">
          <input type="search" name="q" placeholder="MAC, serial, product, worker" value={q} onInput={(e) => setQ(e.currentTarget.value)} />
        </Field>
        <span class="muted" data-testid="devices-shown">
          {page ? `${rows.length.toLocaleString('en-US')} shown of ${page.total.toLocaleString('en-US')}` : 'loading…'}
        </span>
        {page?.next_after && (
          <button type="button" onClick={() => setMore({ filterKey, want: rows.length + PAGE })} disabled={devices.loading}>
            More
          </button>
        )}
      </div>
      <div class="split">
        <VirtualTable label="devices" rows={rows} columns={columns} rowKey={(d) => d.mac} onOpen={(d) => setSel(d.mac)} selected={sel} />
        {selected && <DeviceDetail d={selected} now={now} onClose={() => setSel(null)} onChange={() => void devices.reload()} />}
      </div>
    </div>
  );
}

function DeviceDetail({ d, now, onClose, onChange }: { d: Device; now: number; onClose: () => void; onChange: () => void }) {
  const act = useAction();
  const [worker, setWorker] = useState('');
  const [force, setForce] = useState(false);
  const fp = d.fingerprint;
  const done = (msg: string) => {
    notify(msg);
    onChange();
  };
  return (
    <Panel title={`Device ${d.mac}`} onClose={onClose}>
      <dl class="kv">
        <dt>State</dt>
        <dd>
          <Badge kind={d.state}>{d.state}</Badge> ({d.source})
        </dd>
        <dt>Worker</dt>
        <dd>{d.bound_worker_id ? <a href={`#/workers/${encodeURIComponent(d.bound_worker_id)}`}>{d.bound_worker_id}</a> : '—'}</dd>
        <dt>UUID</dt>
        <dd>{d.uuid ?? '—'}</dd>
        <dt>Key</dt>
        <dd>{d.key_sha256 ? `sha256 ${hashPrefix(d.key_sha256, 16)}… claimed ${relativeTime(d.key_claimed_at, now)}` : 'none claimed'}</dd>
        <dt>Fingerprint</dt>
        <dd>
          {[fp?.manufacturer, fp?.product, fp?.serial].filter(Boolean).join(' · ') || '—'}
          <br />
          <small class="muted">{[fp?.cpumodel, fp?.mem_total ? `${fp.mem_total} MiB ${fp.mem_type ?? ''}` : '', fp?.chip, fp?.busid].filter(Boolean).join(' · ')}</small>
        </dd>
        <dt>First / last seen</dt>
        <dd>
          {relativeTime(d.first_seen, now)} / {relativeTime(d.last_seen, now)}
        </dd>
      </dl>
      <BootTimeline key={d.mac} mac={d.mac} onChange={onChange} />
      <ErrorBox error={act.error} onClose={act.clear} />
      {d.state !== 'revoked' && (
        <form
          class="inline"
          onSubmit={async (e) => {
            e.preventDefault();
            if (force && !(await confirmAction('Force the binding?', `Takes ${worker} from whatever device holds it, and moves ${d.mac} off ${d.bound_worker_id ?? 'nothing'}.`, { confirm: 'Force bind' }))) return;
            const r = await act.run(() => call(api.POST('/devices/{mac}/bind', { params: { path: { mac: d.mac }, query: { worker_id: worker.trim(), force } } })));
            if (r) done(`${d.mac} bound to ${r.bound_worker_id}`);
          }}
        >
          <Field label="Bind to worker">
            <input name="worker_id" required value={worker} onInput={(e) => setWorker(e.currentTarget.value)} placeholder="worker id" />
          </Field>
          <label class="check">
            <input type="checkbox" checked={force} onChange={(e) => setForce(e.currentTarget.checked)} /> force (swap)
          </label>
          <button type="submit" class="primary" disabled={act.busy}>
            Bind
          </button>
        </form>
      )}
      <div class="actions">
        {d.state === 'bound' && (
          <button
            type="button"
            disabled={act.busy}
            onClick={async () => {
              if (!(await confirmAction('Unbind device?', `${d.mac} stops booting ${d.bound_worker_id}'s disks; it goes back to the pool.`, { confirm: 'Unbind' }))) return;
              if (await act.run(() => call(api.DELETE('/devices/{mac}/bind', { params: { path: { mac: d.mac } } })))) done(`${d.mac} unbound`);
            }}
          >
            Unbind
          </button>
        )}
        {d.key_sha256 && (
          <button
            type="button"
            disabled={act.busy}
            onClick={async () => {
              if (!(await confirmAction('Reset the device key?', `The next key ${d.mac} reports is claimed as new (inside a registration window).`, { confirm: 'Reset key' }))) return;
              if (await act.run(() => call(api.DELETE('/devices/{mac}/key', { params: { path: { mac: d.mac } } })))) done(`key of ${d.mac} reset`);
            }}
          >
            Reset key
          </button>
        )}
        {d.state !== 'revoked' && (
          <button
            type="button"
            class="danger"
            disabled={act.busy}
            onClick={async () => {
              if (!(await confirmAction('Revoke device?', `${d.mac} will get no disk at boot and cannot register again until it is restored here.`, { confirm: 'Revoke' }))) return;
              if (await act.run(() => call(api.DELETE('/devices/{mac}', { params: { path: { mac: d.mac } } })))) done(`${d.mac} revoked`);
            }}
          >
            Revoke
          </button>
        )}
        {d.state === 'revoked' && (
          <button
            type="button"
            disabled={act.busy}
            onClick={async () => {
              if (!(await confirmAction('Restore device?', `${d.mac} returns to the pool without a key; it claims one again inside a registration window.`, { confirm: 'Restore' }))) return;
              if (await act.run(() => call(api.POST('/devices/{mac}/restore', { params: { path: { mac: d.mac } } })))) done(`${d.mac} restored to the pool`);
            }}
          >
            Restore
          </button>
        )}
      </div>
    </Panel>
  );
}

/** Registration window, auto-register and signature enforcement: how new devices get in. */
function Admission({ onChange }: { onChange: () => void }) {
  const win = useResource(() => call(api.GET('/devices/registration-window')), [], ['settings', 'ledger', 'audit']);
  const auto = useResource(() => call(api.GET('/settings/auto-register')), [], ['settings']);
  const enf = useResource(() => call(api.GET('/settings/signature-enforcement')), [], ['settings', 'ledger']);
  const adm = useResource(() => call(api.GET('/settings/admission')), [], ['settings', 'ledger', 'audit']);
  const now = useNow(1000);
  const act = useAction();
  const [ttl, setTtl] = useState('10');
  const [max, setMax] = useState('');
  const v = windowView(win.data ?? null, now);
  const after = () => {
    void win.reload();
    void enf.reload();
    void auto.reload();
    void adm.reload();
    onChange();
  };
  const refused = adm.data ? Object.entries(adm.data.refused.by_reason).filter(([, n]) => n) : [];
  const blockers = enf.data?.keyless_bound_devices ?? [];
  return (
    <section class="admission" aria-label="admission">
      {adm.data && (
        <div class="card admission-now" aria-label="admission now">
          <h3>
            Admission of new machines: <Badge kind={adm.data.mode === 'closed' ? 'closed' : 'open'}>{adm.data.mode}</Badge>
          </h3>
          <p>{adm.data.explanation}</p>
          <p class="muted">
            {adm.data.refused.total} turned away since {relativeTime(adm.data.refused.since, now)}
            {refused.length ? `: ${refused.map(([r, n]) => `${r.replace(/_/g, ' ')} ${n}`).join(', ')}` : ''} (each audited as device.register.refused)
          </p>
        </div>
      )}
      <div class="card">
        <h3>Registration window</h3>
        {v.open ? (
          <p>
            <Badge kind="open">open</Badge> <strong class="countdown">{countdown(v.msLeft)}</strong> left ·{' '}
            <strong>{v.seatsLeft ?? '∞'}</strong> seat(s) left · {win.data?.admitted ?? 0} admitted
          </p>
        ) : (
          <p>
            <Badge kind="closed">{v.label}</Badge> {win.data?.admitted ? `${win.data.admitted} admitted last time` : ''}
          </p>
        )}
        <form
          class="inline"
          onSubmit={async (e) => {
            e.preventDefault();
            const body: { ttl_minutes: number; max_devices?: number } = { ttl_minutes: Number(ttl) };
            if (max.trim()) body.max_devices = Number(max);
            if (await act.run(() => call(api.POST('/devices/registration-window', { body })))) {
              notify('registration window open');
              after();
            }
          }}
        >
          <Field label="TTL (min)">
            <input name="ttl_minutes" type="number" min={1} max={60} value={ttl} onInput={(e) => setTtl(e.currentTarget.value)} />
          </Field>
          <Field label="Max devices">
            <input name="max_devices" type="number" min={1} placeholder="no limit" value={max} onInput={(e) => setMax(e.currentTarget.value)} />
          </Field>
          <button type="submit" class="primary" disabled={act.busy}>
            {v.open ? 'Reopen' : 'Open'}
          </button>
          {win.data?.open && (
            <button
              type="button"
              disabled={act.busy}
              onClick={async () => {
                if (await act.run(() => call(api.DELETE('/devices/registration-window')))) after();
              }}
            >
              Close
            </button>
          )}
        </form>
      </div>
      <div class="card">
        <h3>Auto-register</h3>
        <label class="check">
          <input
            type="checkbox"
            name="auto_register"
            checked={!!auto.data?.enabled}
            disabled={!auto.data || act.busy}
            onChange={async (e) => {
              const enabled = e.currentTarget.checked;
              if (await act.run(() => call(api.PUT('/settings/auto-register', { body: { enabled } })))) after();
            }}
          />{' '}
          unknown MACs join the pool when they boot (open mode)
        </label>
        {adm.data?.secure_registration && auto.data?.enabled && <p class="warn">since the first registration window it no longer admits keyless devices: new devices come in through a window</p>}
      </div>
      <div class="card">
        <h3>Signature enforcement</h3>
        <label class="check">
          <input
            type="checkbox"
            name="enforcement"
            checked={!!enf.data?.enabled}
            disabled={!enf.data || act.busy}
            onChange={async (e) => {
              const enabled = e.currentTarget.checked;
              e.currentTarget.checked = !enabled; // the server's answer decides
              let force = false;
              // The count in the confirmation is asked now, not taken from the last poll (it went stale).
              const now = enabled ? await act.run(() => call(api.GET('/settings/signature-enforcement'))) : undefined;
              const keyless = now?.keyless_bound_devices ?? [];
              if (enabled && keyless.length) {
                if (!(await confirmAction('Enforce with keyless devices?', `${keyless.length} bound device(s) have no key and will stop booting: ${keyless.slice(0, 8).join(', ')}${keyless.length > 8 ? ' …' : ''}`, { confirm: 'Enforce anyway' }))) return;
                force = true;
              }
              if (await act.run(() => call(api.PUT('/settings/signature-enforcement', { body: { enabled, force } })))) after();
            }}
          />{' '}
          /boot-vars answers only signed requests
        </label>
        {blockers.length > 0 && (
          <p class="warn">
            {blockers.length} bound device(s) without a key block it: {blockers.slice(0, 5).join(', ')}
            {blockers.length > 5 ? ' …' : ''}
          </p>
        )}
      </div>
      <ErrorBox error={act.error ?? win.error} onClose={act.clear} />
    </section>
  );
}

function RegisterForm({ onClose, onDone }: { onClose: () => void; onDone: () => void }) {
  const act = useAction();
  const [f, setF] = useState({ mac: '', serial: '', product: '', manufacturer: '', uuid: '' });
  const set = (k: keyof typeof f) => (e: { currentTarget: HTMLInputElement }) => setF({ ...f, [k]: e.currentTarget.value });
  return (
    <Panel title="Register a device" onClose={onClose}>
      <form
        class="grid-form"
        onSubmit={async (e) => {
          e.preventDefault();
          const body = Object.fromEntries(Object.entries(f).filter(([, v]) => v.trim() !== '')) as { mac: string };
          const r = await act.run(() => call(api.POST('/devices', { body })));
          if (r) {
            notify(`${r.mac} registered`);
            onDone();
            onClose();
          }
        }}
      >
        {(['mac', 'serial', 'product', 'manufacturer', 'uuid'] as const).map((k) => (
          <Field label={k} key={k}>
            <input name={k} value={f[k]} onInput={set(k)} required={k === 'mac'} autoFocus={k === 'mac'} />
          </Field>
        ))}
        <ErrorBox error={act.error} />
        <button type="submit" class="primary" disabled={act.busy}>
          Register
        </button>
      </form>
    </Panel>
  );
}

function ParseErrors({ errors }: { errors: ParseError[] }) {
  if (!errors.length) return null;
  return (
    <ul class="error" role="alert">
      {errors.slice(0, 20).map((e, i) => (
        <li key={i}>{e.message}</li>
      ))}
    </ul>
  );
}

function ImportForm({ onClose, onDone }: { onClose: () => void; onDone: () => void }) {
  const act = useAction();
  const [text, setText] = useState('');
  const parsed = useMemo(() => parseImport(text), [text]);
  const [res, setRes] = useState<{ created: string[]; skipped: { mac: string; reason: string }[]; failed: { mac: string; error: string }[] }>();
  return (
    <Panel title="Import devices" onClose={onClose}>
      <p class="muted">Paste CSV (mac,serial,product,manufacturer,uuid; a header row is optional) or a JSON array.</p>
      <textarea name="import" rows={8} value={text} onInput={(e) => setText(e.currentTarget.value)} placeholder={'mac,serial,product\n52:54:00:12:34:56,SN1,OptiPlex 7090'} />
      <ParseErrors errors={parsed.errors} />
      <button
        type="button"
        class="primary"
        disabled={act.busy || !parsed.rows.length || parsed.errors.length > 0}
        onClick={async () => {
          const r = await act.run(() => call(api.POST('/devices/import', { body: { entries: parsed.rows } })));
          if (r) {
            setRes(r);
            onDone();
          }
        }}
      >
        Import {parsed.rows.length} device(s)
      </button>
      <ErrorBox error={act.error} />
      {res && (
        <Outcome
          label="import result"
          counts={[
            [res.created.length, 'created'],
            [res.skipped.length, 'skipped'],
            [res.failed.length, 'failed'],
          ]}
          rows={[
            ...res.skipped.map((x) => ({ key: `s${x.mac}`, text: <>skipped <code>{x.mac}</code>: {x.reason}</> })),
            ...res.failed.map((x) => ({ key: `f${x.mac}`, bad: true, text: <>failed <code>{x.mac}</code>: {x.error}</> })),
          ]}
        />
      )}
    </Panel>
  );
}

type Preview = { matched: { mac: string; worker_id: string; device_state: string; worker_state: string; fingerprint_mismatch: { fields: string[] } | null }[]; conflicts: { mac: string; worker_id: string; reason: string }[]; not_found: { mac: string; worker_id: string; reason: string }[]; summary: { total: number; ok: number; conflict: number; not_found: number } };
type BindResult = { succeeded: { mac: string; worker_id: string }[]; skipped: { mac: string; worker_id: string; reason: string }[]; failed: { mac: string; worker_id: string; error: string }[] };

/** Batch bind from a pasted manifest: preview first (matched, conflicts, not found, mismatches), then execute. */
function BatchBind({ onClose, onDone }: { onClose: () => void; onDone: () => void }) {
  const act = useAction();
  const [text, setText] = useState('');
  const parsed = useMemo(() => parsePairs(text), [text]);
  const [preview, setPreview] = useState<Preview>();
  const [res, setRes] = useState<BindResult>();
  const body = { mode: 'manifest' as const, pairs: parsed.rows };
  // A matched pair whose device reports other hardware than the manifest says is bound too, but
  // it is not "ok": it is counted and named apart, and the confirmation mentions it.
  const mismatched = preview ? preview.matched.filter((m) => m.fingerprint_mismatch).length : 0;
  return (
    <Panel title="Batch bind" onClose={onClose}>
      <p class="muted">Paste the manifest: mac,worker_id[,serial,product,manufacturer,uuid] per line, or JSON.</p>
      <textarea
        name="manifest"
        rows={8}
        value={text}
        onInput={(e) => {
          setText(e.currentTarget.value);
          setPreview(undefined);
          setRes(undefined);
        }}
      />
      <ParseErrors errors={parsed.errors} />
      <div class="actions">
        <button
          type="button"
          disabled={act.busy || !parsed.rows.length || parsed.errors.length > 0}
          onClick={async () => {
            const p = await act.run(() => call(api.POST('/devices/bind/batch/preview', { body })));
            if (p) setPreview(p as Preview);
          }}
        >
          Preview {parsed.rows.length} pair(s)
        </button>
        <button
          type="button"
          class="primary"
          disabled={act.busy || !preview || preview.summary.ok === 0 || !!res}
          onClick={async () => {
            const p = preview!;
            const problems = [
              mismatched ? `${mismatched} of them with a fingerprint that differs from the manifest` : '',
              p.summary.conflict ? `${p.summary.conflict} conflict(s) skipped` : '',
              p.summary.not_found ? `${p.summary.not_found} not found skipped` : '',
            ].filter(Boolean);
            if (problems.length && !(await confirmAction('Execute with problems?', `${p.summary.ok} pair(s) will be bound; ${problems.join('; ')}.`, { confirm: 'Bind', danger: false }))) return;
            const r = await act.run(() => call(api.POST('/devices/bind/batch', { body })));
            if (r) {
              setRes(r as BindResult);
              onDone();
            }
          }}
        >
          Execute
        </button>
      </div>
      <ErrorBox error={act.error} />
      {preview && !res && (
        <div class="result" aria-label="batch preview">
          <p>
            {preview.summary.total} pairs: <strong>{preview.summary.ok - mismatched}</strong> ok · <strong class={mismatched ? 'bad' : ''}>{mismatched}</strong> fingerprint mismatch(es) ·{' '}
            <strong class={preview.summary.conflict ? 'bad' : ''}>{preview.summary.conflict}</strong> conflicts · <strong class={preview.summary.not_found ? 'bad' : ''}>{preview.summary.not_found}</strong> not found
          </p>
          <table class="plain">
            <thead>
              <tr>
                <th>MAC</th>
                <th>Worker</th>
                <th>Outcome</th>
              </tr>
            </thead>
            <tbody>
              {preview.matched.map((m) => (
                <tr key={`m${m.mac}`} class={m.fingerprint_mismatch ? 'mismatch' : ''}>
                  <td>
                    <code>{m.mac}</code>
                  </td>
                  <td>{m.worker_id}</td>
                  <td>
                    matched ({m.device_state} → {m.worker_state}){m.fingerprint_mismatch ? ` · fingerprint differs: ${m.fingerprint_mismatch.fields.join(', ')}` : ''}
                  </td>
                </tr>
              ))}
              {[...preview.conflicts.map((c) => ({ ...c, kind: 'conflict' })), ...preview.not_found.map((c) => ({ ...c, kind: 'not found' }))].map((c) => (
                <tr key={`c${c.mac}${c.worker_id}`} class="bad">
                  <td>
                    <code>{c.mac}</code>
                  </td>
                  <td>{c.worker_id}</td>
                  <td>
                    {c.kind}: {c.reason}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {res && (
        <Outcome
          label="batch result"
          counts={[
            [res.succeeded.length, 'bound'],
            [res.skipped.length, 'skipped'],
            [res.failed.length, 'failed'],
          ]}
          rows={[
            ...res.skipped.map((x) => ({ key: `s${x.mac}`, text: `skipped ${x.mac} → ${x.worker_id}: ${x.reason}` })),
            ...res.failed.map((x) => ({ key: `f${x.mac}`, bad: true, text: `failed ${x.mac} → ${x.worker_id}: ${x.error}` })),
          ]}
        />
      )}
    </Panel>
  );
}
