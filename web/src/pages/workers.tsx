import { useMemo, useState } from 'preact/hooks';
import { api, call, type Worker } from '../api';
import { MENU_DEFAULTS } from '../lib/constants';
import { Badge, type Column, ErrorBox, Field, notify, Options, Outcome, Panel, VirtualTable } from '../ui/components';
import { useAction, useResource } from '../ui/hooks';

export function defaultBoot(w: Worker): string {
  const d = w.default_disk ? w.disks.find((x) => x.os_tag === w.default_disk) : undefined;
  if (d) return `${d.os}${d.os_version ? ` ${d.os_version}` : ''}`;
  return w.default_os ?? '—';
}

export function WorkersPage() {
  const workers = useResource(() => call(api.GET('/workers')), [], ['ledger', 'agents', 'settings', 'boots'], 2000);
  const [q, setQ] = useState('');
  const [readiness, setReadiness] = useState('');
  const [form, setForm] = useState<null | 'one' | 'batch'>(null);
  const list = workers.data ?? [];
  const rows = useMemo(() => {
    const s = q.trim().toLowerCase();
    return list
      .filter((w) => (!readiness || w.readiness === readiness) && (!s || [w.worker_id, w.hostname, w.bound_device ?? ''].some((v) => v.toLowerCase().includes(s))))
      .sort((a, b) => a.worker_id.localeCompare(b.worker_id, undefined, { numeric: true }));
  }, [list, q, readiness]);
  const open = (w: Worker) => (location.hash = `#/workers/${encodeURIComponent(w.worker_id)}`);
  const columns: Column<Worker>[] = [
    { key: 'id', title: 'Worker', width: '140px', render: (w) => <a href={`#/workers/${encodeURIComponent(w.worker_id)}`}>{w.worker_id}</a> },
    { key: 'host', title: 'Hostname', width: '140px', render: (w) => w.hostname },
    { key: 'ready', title: 'Readiness', width: '90px', render: (w) => <Badge kind={w.readiness}>{w.readiness}</Badge> },
    { key: 'boots', title: 'Boots', width: '170px', render: (w) => (w.boot_readiness.bootable ? <Badge kind="ok">yes</Badge> : <span title={w.boot_readiness.reasons.map((r) => r.message).join('\n')}>{w.boot_readiness.reasons.map((r) => r.code).join(', ')}</span>) },
    { key: 'dev', title: 'Bound device', width: '150px', render: (w) => (w.bound_device ? <code>{w.bound_device}</code> : <span class="muted">none</span>) },
    { key: 'disks', title: 'Disks', render: (w) => w.disks.map((d) => `${d.os}${d.os_version ? ` ${d.os_version}` : ''}@${d.agent}`).join(', ') || <span class="muted">none</span> },
    { key: 'default', title: 'Default boot', width: '130px', render: defaultBoot },
    { key: 'menu', title: 'Menu', width: '120px', render: (w) => `${w.boot.menu_default ?? '—'} / ${w.boot.menu_timeout ?? '—'} ms` },
  ];
  return (
    <div class="page">
      <header class="page-head">
        <h1>Workers</h1>
        <span class="muted">
          {list.length} workers · {list.filter((w) => w.readiness === 'ready').length} ready · {list.filter((w) => w.boot_readiness.bootable).length} will boot
        </span>
        <span class="grow" />
        <button type="button" onClick={() => setForm('one')}>
          Create worker
        </button>
        <button type="button" onClick={() => setForm('batch')}>
          Create batch
        </button>
        <button type="button" onClick={() => void workers.reload()} disabled={workers.loading}>
          Refresh
        </button>
      </header>
      <ErrorBox error={workers.error} />
      {form === 'one' && <CreateWorker onClose={() => setForm(null)} onDone={() => void workers.reload()} />}
      {form === 'batch' && <CreateBatch onClose={() => setForm(null)} onDone={() => void workers.reload()} />}
      <div class="filters" role="search">
        <Field label="Readiness">
          <select value={readiness} onChange={(e) => setReadiness(e.currentTarget.value)}>
            <option value="">all</option>
            <option value="ready">ready</option>
            <option value="partial">partial</option>
            <option value="idle">idle</option>
          </select>
        </Field>
        <Field label="Search">
          <input type="search" name="q" placeholder="worker, hostname, MAC" value={q} onInput={(e) => setQ(e.currentTarget.value)} />
        </Field>
        <span class="muted">{rows.length} shown</span>
      </div>
      <VirtualTable label="workers" rows={rows} columns={columns} rowKey={(w) => w.worker_id} onOpen={open} />
    </div>
  );
}

function BootFields({ value, onChange }: { value: { menu_default: string; menu_timeout: string }; onChange: (v: { menu_default: string; menu_timeout: string }) => void }) {
  return (
    <>
      <Field label="Menu default">
        <select name="menu_default" value={value.menu_default} onChange={(e) => onChange({ ...value, menu_default: e.currentTarget.value })}>
          <option value="">(server default)</option>
          <Options values={MENU_DEFAULTS} />
        </select>
      </Field>
      <Field label="Menu timeout (ms)">
        <input name="menu_timeout" type="number" min={0} value={value.menu_timeout} onInput={(e) => onChange({ ...value, menu_timeout: e.currentTarget.value })} />
      </Field>
    </>
  );
}

export function bootBody(b: { menu_default: string; menu_timeout: string }): { menu_default?: (typeof MENU_DEFAULTS)[number]; menu_timeout?: number } | undefined {
  const out: { menu_default?: (typeof MENU_DEFAULTS)[number]; menu_timeout?: number } = {};
  if (b.menu_default) out.menu_default = b.menu_default as (typeof MENU_DEFAULTS)[number];
  if (b.menu_timeout.trim()) out.menu_timeout = Number(b.menu_timeout);
  return Object.keys(out).length ? out : undefined;
}

function CreateWorker({ onClose, onDone }: { onClose: () => void; onDone: () => void }) {
  const act = useAction();
  const [f, setF] = useState({ worker_id: '', hostname: '', mac: '', arch: '' });
  const [boot, setBoot] = useState({ menu_default: '', menu_timeout: '' });
  return (
    <Panel title="Create a worker" onClose={onClose}>
      <form
        class="grid-form"
        onSubmit={async (e) => {
          e.preventDefault();
          const body: Record<string, unknown> = Object.fromEntries(Object.entries(f).filter(([, v]) => v.trim() !== ''));
          const b = bootBody(boot);
          if (b) body.boot = b;
          const r = await act.run(() => call(api.POST('/workers', { body: body as { worker_id: string } })));
          if (r) {
            notify(`worker ${r.worker_id} created`);
            onDone();
            location.hash = `#/workers/${encodeURIComponent(r.worker_id)}`;
          }
        }}
      >
        <Field label="worker_id">
          <input name="worker_id" required autoFocus value={f.worker_id} onInput={(e) => setF({ ...f, worker_id: e.currentTarget.value })} />
        </Field>
        <Field label="hostname" hint="default: the worker id">
          <input name="hostname" value={f.hostname} onInput={(e) => setF({ ...f, hostname: e.currentTarget.value })} />
        </Field>
        <Field label="MAC" hint="optional: binds a device now">
          <input name="mac" value={f.mac} onInput={(e) => setF({ ...f, mac: e.currentTarget.value })} />
        </Field>
        <Field label="arch">
          <input name="arch" placeholder="x86_64" value={f.arch} onInput={(e) => setF({ ...f, arch: e.currentTarget.value })} />
        </Field>
        <BootFields value={boot} onChange={setBoot} />
        <ErrorBox error={act.error} />
        <button type="submit" class="primary" disabled={act.busy}>
          Create
        </button>
      </form>
    </Panel>
  );
}

function CreateBatch({ onClose, onDone }: { onClose: () => void; onDone: () => void }) {
  const act = useAction();
  const [count, setCount] = useState('10');
  const [prefix, setPrefix] = useState('');
  const [macs, setMacs] = useState('');
  const [res, setRes] = useState<{ succeeded: { worker_id: string; mac: string | null }[]; skipped: { worker_id: string; reason: string }[]; failed: { worker_id: string; error: string }[] }>();
  return (
    <Panel title="Create workers in a batch" onClose={onClose}>
      <form
        class="grid-form"
        onSubmit={async (e) => {
          e.preventDefault();
          const m = macs.split(/[\s,;]+/).filter(Boolean);
          const body: { count: number; name_prefix?: string; macs?: string[] } = { count: Number(count) };
          if (prefix.trim()) body.name_prefix = prefix.trim();
          if (m.length) body.macs = m;
          const r = await act.run(() => call(api.POST('/workers/batch', { body })));
          if (r) {
            setRes(r as typeof res);
            onDone();
          }
        }}
      >
        <Field label="count">
          <input name="count" type="number" min={1} value={count} onInput={(e) => setCount(e.currentTarget.value)} />
        </Field>
        <Field label="name prefix">
          <input name="name_prefix" placeholder="worker-" value={prefix} onInput={(e) => setPrefix(e.currentTarget.value)} />
        </Field>
        <Field label="MACs" hint="optional, one per worker in order">
          <textarea name="macs" rows={3} value={macs} onInput={(e) => setMacs(e.currentTarget.value)} />
        </Field>
        <ErrorBox error={act.error} />
        <button type="submit" class="primary" disabled={act.busy}>
          Create
        </button>
      </form>
      {res && (
        <Outcome
          label="batch result"
          counts={[
            [res.succeeded.length, 'created'],
            [res.skipped.length, 'skipped'],
            [res.failed.length, 'failed'],
          ]}
          rows={[
            ...res.skipped.map((x) => ({ key: `s${x.worker_id}`, text: `skipped ${x.worker_id}: ${x.reason}` })),
            ...res.failed.map((x) => ({ key: `f${x.worker_id}`, bad: true, text: `failed ${x.worker_id}: ${x.error}` })),
          ]}
        />
      )}
    </Panel>
  );
}
