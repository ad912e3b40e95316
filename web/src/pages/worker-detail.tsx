import { BootTimeline } from '../ui/boot-timeline';
import { useMemo, useState } from 'preact/hooks';
import { api, ApiFailure, call, type Schemas, type Worker } from '../api';
import { MENU_DEFAULTS, OS_NAMES } from '../lib/constants';
import { bytes, hashPrefix, relativeTime } from '../lib/format';
import { statusRows } from '../lib/status';
import { Badge, confirmAction, ErrorBox, Field, notify, Options } from '../ui/components';
import { useAction, useNow, useResource } from '../ui/hooks';
import { handover } from '../lib/handover';
import { bootBody, defaultBoot } from './workers';

type Os = (typeof OS_NAMES)[number];

export function WorkerDetailPage({ id }: { id: string }) {
  const w = useResource(() => call(api.GET('/workers/{worker_id}', { params: { path: { worker_id: id } } })), [id], ['ledger', 'agents', 'settings', 'boots']);
  const reload = () => void w.reload();
  if (w.error && !w.data)
    return (
      <div class="page">
        <p>
          <a href="#/workers">← Workers</a>
        </p>
        <ErrorBox error={w.error} />
      </div>
    );
  if (!w.data) return <p class="loading">Loading {id}…</p>;
  const worker = w.data;
  return (
    <div class="page">
      <p>
        <a href="#/workers">← Workers</a>
      </p>
      <header class="page-head">
        <h1>{worker.worker_id}</h1>
        <Badge kind={worker.readiness}>{worker.readiness}</Badge>
        <span class="muted">
          hostname {worker.hostname} · {worker.state} · arch {worker.arch ?? '—'} · default boot {defaultBoot(worker)}
        </span>
      </header>
      <ErrorBox error={w.error} />
      <BootsNow readiness={worker.boot_readiness} />
      {/* keyed by worker: its boots never show on another worker's page */}
      <BootTimeline key={worker.worker_id} workerId={worker.worker_id} onChange={reload} />
      <div class="cols">
        <MacCard worker={worker} onChange={reload} />
        <BootCard worker={worker} onChange={reload} />
      </div>
      <DisksCard worker={worker} onChange={reload} />
      {/* keyed: one worker's form state (and its error) never shows on another worker's page */}
      <CreateDiskCard key={worker.worker_id} worker={worker} onChange={reload} />
      <LiveStatus id={worker.worker_id} />
      <CredentialCard id={worker.worker_id} hasNvme={worker.disks.some((d) => d.transport === 'nvme-tcp')} />
      <DeleteWorker worker={worker} />
    </div>
  );
}

function MacCard({ worker, onChange }: { worker: Worker; onChange: () => void }) {
  const act = useAction();
  const [mac, setMac] = useState('');
  return (
    <section class="card" aria-label="binding">
      <h3>Binding</h3>
      <p>Bound device: {worker.bound_device ? <code>{worker.bound_device}</code> : <span class="muted">none</span>}</p>
      <form
        class="inline"
        onSubmit={async (e) => {
          e.preventDefault();
          if (worker.bound_device && !(await confirmAction('Change the MAC?', `${worker.bound_device} is unbound and ${mac} is bound to ${worker.worker_id}.`, { confirm: 'Change MAC' }))) return;
          if (await act.run(() => call(api.PUT('/workers/{worker_id}/mac', { params: { path: { worker_id: worker.worker_id } }, body: { mac } })))) {
            notify(`MAC of ${worker.worker_id} is now ${mac}`);
            setMac('');
            onChange();
          }
        }}
      >
        <Field label="New MAC">
          <input name="mac" required value={mac} onInput={(e) => setMac(e.currentTarget.value)} />
        </Field>
        <button type="submit" disabled={act.busy}>
          Set MAC
        </button>
      </form>
      <ErrorBox error={act.error} onClose={act.clear} />
    </section>
  );
}

function BootCard({ worker, onChange }: { worker: Worker; onChange: () => void }) {
  const act = useAction();
  const [boot, setBoot] = useState({ menu_default: worker.boot.menu_default ?? '', menu_timeout: worker.boot.menu_timeout === null ? '' : String(worker.boot.menu_timeout) });
  return (
    <section class="card" aria-label="boot menu">
      <h3>Boot menu</h3>
      <form
        class="inline"
        onSubmit={async (e) => {
          e.preventDefault();
          const body = bootBody(boot) ?? {};
          if (await act.run(() => call(api.PUT('/workers/{worker_id}/default-os', { params: { path: { worker_id: worker.worker_id } }, body })))) {
            notify('boot menu saved');
            onChange();
          }
        }}
      >
        <Field label="Menu default">
          <select name="menu_default" value={boot.menu_default} onChange={(e) => setBoot({ ...boot, menu_default: e.currentTarget.value })}>
            <option value="">(unchanged)</option>
            <Options values={MENU_DEFAULTS} />
          </select>
        </Field>
        <Field label="Timeout (ms)">
          <input name="menu_timeout" type="number" min={0} value={boot.menu_timeout} onInput={(e) => setBoot({ ...boot, menu_timeout: e.currentTarget.value })} />
        </Field>
        <button type="submit" disabled={act.busy}>
          Save
        </button>
      </form>
      <ErrorBox error={act.error} onClose={act.clear} />
    </section>
  );
}

function DisksCard({ worker, onChange }: { worker: Worker; onChange: () => void }) {
  const act = useAction();
  const setDefault = async (os_tag: string | null) => {
    if (await act.run(() => call(api.PUT('/workers/{worker_id}/default-disk', { params: { path: { worker_id: worker.worker_id } }, body: { os_tag: os_tag as string } })))) {
      notify(os_tag ? 'default disk set' : 'default disk cleared');
      onChange();
    }
  };
  const setMode = async (d: Schemas['DiskDto'], mode: 'persistent' | 'reset') => {
    if (
      mode === 'reset' &&
      !(await confirmAction(`Reset the ${d.os} disk at every boot?`, `From the next boot on, ${worker.worker_id}'s ${d.os} disk is restored to ${d.source.name ?? 'its master'} at the start of every boot: what the worker writes is discarded.`, { confirm: 'Reset at every boot' }))
    )
      return;
    if (await act.run(() => call(api.PUT('/workers/{worker_id}/luns/disk/{os_tag}/mode', { params: { path: { worker_id: worker.worker_id, os_tag: d.os_tag! } }, body: { mode } })))) {
      notify(mode === 'reset' ? `${d.os} disk: reset at every boot` : `${d.os} disk: persistent`);
      onChange();
    }
  };
  const rebase = async (d: Schemas['DiskDto']) => {
    if (
      !(await confirmAction(
        `Rebase the ${d.os} disk?`,
        `Everything on ${worker.worker_id}'s ${d.os} disk is replaced by ${d.source.name ?? 'its master'} (the version its rollout names, else the latest): what the worker wrote is discarded. Refused while the worker is logged in to the disk.`,
        { confirm: 'Discard and rebase' },
      ))
    )
      return;
    const w = await act.run(() => call(api.POST('/workers/{worker_id}/luns/disk/{os_tag}/rebase', { params: { path: { worker_id: worker.worker_id, os_tag: d.os_tag! } }, body: { discard_data: true } })));
    if (w) {
      notify(`${d.os} disk rebased to version ${w.disks.find((x) => x.os_tag === d.os_tag)?.source.version ?? '?'}`);
      onChange();
    }
  };
  const remove = async (d: Schemas['DiskDto']) => {
    let deleteFile = false;
    const ok = await confirmAction(
      `Delete the ${d.os} disk?`,
      <>
        <p>
          The target {d.iqn ?? d.nqn} on {d.agent} is removed; {worker.worker_id} can no longer boot it.
        </p>
        <label class="check">
          <input type="checkbox" name="delete_file" onChange={(e) => (deleteFile = e.currentTarget.checked)} /> also delete the image file {d.filename}
        </label>
      </>,
      { confirm: 'Delete disk' },
    );
    if (!ok) return;
    const query: { delete_file: boolean; os_version?: string } = { delete_file: deleteFile };
    if (d.os_version) query.os_version = d.os_version;
    if (await act.run(() => call(api.DELETE('/workers/{worker_id}/luns/disk/{os}', { params: { path: { worker_id: worker.worker_id, os: d.os }, query } })))) {
      notify(`${d.os} disk deleted${deleteFile ? ' with its file' : ', file kept'}`);
      onChange();
    }
  };
  return (
    <section class="card" aria-label="disks">
      <h3>Disks</h3>
      {worker.disks.length === 0 ? (
        <p class="muted">No disks yet.</p>
      ) : (
        <table class="plain">
          <thead>
            <tr>
              <th>OS</th>
              <th>Transport</th>
              <th>Agent</th>
              <th>Target</th>
              <th>Source</th>
              <th>Mode</th>
              <th>Default</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {worker.disks.map((d) => (
              <tr key={d.os_tag ?? d.filename}>
                <td>
                  {d.os} {d.os_version ?? ''}
                </td>
                <td>
                  {d.transport ?? 'iscsi'}
                  <br />
                  <small class="muted">{handover(d.transport)}</small>
                </td>
                <td>{d.agent}</td>
                <td>
                  <code class="small">{d.iqn ?? d.nqn}</code>
                </td>
                <td>{d.source.type === 'master' ? `master ${d.source.name ?? ''}${d.source.version ? ` v${d.source.version}` : ''}` : `empty ${d.source.size ?? ''}`}</td>
                <td>
                  {d.mode === 'reset' ? <Badge kind="pending">reset at boot</Badge> : 'persistent'}
                  {d.os_tag && d.source.type === 'master' && (
                    <>
                      <br />
                      <button type="button" class="link" disabled={act.busy} onClick={() => void setMode(d, d.mode === 'reset' ? 'persistent' : 'reset')}>
                        {d.mode === 'reset' ? 'Make persistent' : 'Reset at every boot'}
                      </button>{' '}
                      <button type="button" class="link" disabled={act.busy} onClick={() => void rebase(d)}>
                        Rebase…
                      </button>
                    </>
                  )}
                </td>
                <td>{d.os_tag && d.os_tag === worker.default_disk ? <Badge kind="ready">default</Badge> : ''}</td>
                <td class="row-actions">
                  {d.os_tag && d.os_tag !== worker.default_disk && (
                    <button type="button" disabled={act.busy} onClick={() => void setDefault(d.os_tag!)}>
                      Set default
                    </button>
                  )}
                  {d.os_tag && d.os_tag === worker.default_disk && (
                    <button type="button" disabled={act.busy} onClick={() => void setDefault(null)}>
                      Clear default
                    </button>
                  )}
                  <button type="button" class="danger" disabled={act.busy} onClick={() => void remove(d)}>
                    Delete
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <ErrorBox error={act.error} onClose={act.clear} />
    </section>
  );
}

/** The master picker of both disk forms: GET /masters, grouped by agent. */
export function useMasters() {
  return useResource(() => call(api.GET('/masters')), []);
}

export function MasterPicker({ masters, value, onChange, id }: { masters: Schemas['MastersDto'] | undefined; value: string; onChange: (name: string) => void; id?: string }) {
  return (
    <select id={id} name="master" value={value} onChange={(e) => onChange(e.currentTarget.value)} required>
      <option value="">pick a master…</option>
      {masters?.agents.map((a) => (
        <optgroup key={a.agent} label={`${a.agent}${a.error ? ` (${a.error})` : ''}`}>
          {a.masters.map((m) => (
            <option key={`${a.agent}/${m.name}`} value={m.name}>
              {m.name} · {bytes(m.size)}
            </option>
          ))}
        </optgroup>
      ))}
    </select>
  );
}

function CreateDiskCard({ worker, onChange }: { worker: Worker; onChange: () => void }) {
  const act = useAction();
  const masters = useMasters();
  const [f, setF] = useState({ type: 'master' as 'master' | 'empty', name: '', version: '', os: 'windows' as Os, os_version: '', size: '', disk_agent: '', mode: 'persistent' as 'persistent' | 'reset' });
  // The API never makes a single new disk the default (reference 7.3: set separately, seed 004:
  // no default means the reboot loop); the page offers it, ticked while the worker has none.
  const [makeDefault, setMakeDefault] = useState(!worker.default_disk && !worker.default_os);
  const holders = useMemo(() => (masters.data?.agents ?? []).filter((a) => a.masters.some((m) => m.name === f.name)).map((a) => a.agent), [masters.data, f.name]);
  return (
    <section class="card" aria-label="create disk">
      <h3>Create a disk</h3>
      <form
        class="grid-form"
        onSubmit={async (e) => {
          e.preventDefault();
          // A master's name or an empty disk's size, never both (the spec's oneOf).
          const body: Schemas['CreateDiskDto'] = {
            ...(f.type === 'master' ? { type: 'master' as const, name: f.name, ...(f.version ? { version: Number(f.version) } : {}) } : { type: 'empty' as const, size: f.size.trim() }),
            os: f.os,
            ...(f.os_version.trim() ? { os_version: f.os_version.trim() } : {}),
            ...(f.disk_agent ? { disk_agent: f.disk_agent } : {}),
            ...(f.type === 'master' && f.mode === 'reset' ? { mode: 'reset' as const } : {}),
          };
          const r = await act.run(async () => {
            const w = await call(api.POST('/workers/{worker_id}/luns/disk', { params: { path: { worker_id: worker.worker_id } }, body }));
            const disk = w.disks.find((d) => d.os === body.os && (d.os_version ?? '') === (body.os_version ?? ''));
            if (makeDefault && disk?.os_tag) {
              await call(api.PUT('/workers/{worker_id}/default-disk', { params: { path: { worker_id: worker.worker_id } }, body: { os_tag: disk.os_tag } }));
            }
            return w;
          });
          if (r) {
            notify(`${f.os} disk created${makeDefault ? ' and made the default' : ''}`);
            setMakeDefault(false);
            onChange();
          }
        }}
      >
        <Field label="Type">
          <select name="type" value={f.type} onChange={(e) => setF({ ...f, type: e.currentTarget.value as 'master' | 'empty' })}>
            <option value="master">clone of a master</option>
            <option value="empty">empty disk</option>
          </select>
        </Field>
        {f.type === 'master' ? (
          <Field label="Master">
            <MasterPicker masters={masters.data} value={f.name} onChange={(name) => setF({ ...f, name, version: '', disk_agent: '' })} />
          </Field>
        ) : (
          <Field label="Size" hint="e.g. 40G">
            <input name="size" value={f.size} onInput={(e) => setF({ ...f, size: e.currentTarget.value })} />
          </Field>
        )}
        <Field label="OS">
          <select name="os" value={f.os} onChange={(e) => setF({ ...f, os: e.currentTarget.value as Os })}>
            <Options values={OS_NAMES} />
          </select>
        </Field>
        <Field label="OS version" hint="optional">
          <input name="os_version" value={f.os_version} onInput={(e) => setF({ ...f, os_version: e.currentTarget.value })} />
        </Field>
        <Field label="Agent">
          <select name="disk_agent" value={f.disk_agent} onChange={(e) => setF({ ...f, disk_agent: e.currentTarget.value })}>
            <option value="">automatic placement</option>
            {(f.type === 'master' ? holders : (masters.data?.agents ?? []).map((a) => a.agent)).map((a) => (
              <option key={a}>{a}</option>
            ))}
          </select>
        </Field>
        {f.type === 'master' && (
          <Field label="Version" hint="of the master">
            <select name="version" value={f.version} onChange={(e) => setF({ ...f, version: e.currentTarget.value })}>
              <option value="">latest</option>
              {(masters.data?.catalog.find((m) => m.name === f.name)?.versions ?? []).map((v) => (
                <option key={v.version} value={String(v.version)}>
                  v{v.version}
                  {v.note ? ` · ${v.note}` : ''}
                </option>
              ))}
            </select>
          </Field>
        )}
        {f.type === 'master' && (
          <Field label="Mode" hint="reset: back to the master at every boot">
            <select name="mode" value={f.mode} onChange={(e) => setF({ ...f, mode: e.currentTarget.value as 'persistent' | 'reset' })}>
              <option value="persistent">persistent</option>
              <option value="reset">reset at every boot</option>
            </select>
          </Field>
        )}
        <label class="check">
          <input type="checkbox" checked={makeDefault} onChange={(e) => setMakeDefault(e.currentTarget.checked)} /> Make it the default boot disk
        </label>
        <ErrorBox error={act.error ?? masters.error} onClose={act.clear} />
        <button type="submit" class="primary" disabled={act.busy}>
          {act.busy ? 'Creating…' : 'Create disk'}
        </button>
      </form>
    </section>
  );
}

function LiveStatus({ id }: { id: string }) {
  const st = useResource(() => call(api.GET('/workers/{worker_id}/status', { params: { path: { worker_id: id } } })), [id], ['ledger', 'agents', 'audit']);
  const rows = st.data ? statusRows(st.data.worker as never, st.data.actual as never) : [];
  const bad = rows.filter((r) => !r.ok).length;
  return (
    <section class="card" aria-label="live status">
      <h3>
        Live status {st.data && (bad ? <Badge kind="failed">{bad} difference(s)</Badge> : <Badge kind="ready">in sync</Badge>)}
      </h3>
      <p class="muted">
        The ledger beside what dnsmasq and the agents hold, read again on every change the control plane reports; a change made behind its back (by hand on an agent) shows at{' '}
        <button type="button" class="link" disabled={st.loading} onClick={() => void st.reload()}>
          Check now
        </button>
      </p>
      <ErrorBox error={st.error} />
      <table class="plain">
        <thead>
          <tr>
            <th>Item</th>
            <th>Ledger</th>
            <th>Actual</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={r.item} class={r.ok ? '' : 'mismatch'}>
              <td>{r.item}</td>
              <td>{r.ledger}</td>
              <td>{r.actual}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

function CredentialCard({ id, hasNvme }: { id: string; hasNvme: boolean }) {
  const act = useAction();
  const now = useNow(5000);
  const cred = useResource(async () => {
    try {
      return await call(api.GET('/workers/{worker_id}/credential', { params: { path: { worker_id: id } } }));
    } catch (e) {
      if (e instanceof ApiFailure && e.status === 404) return null;
      throw e;
    }
  }, [id], ['ledger', 'audit']);
  const c = cred.data;
  const issue = async (rotate: boolean) => {
    if (rotate && !(await confirmAction('Rotate the storage credential?', 'A new DH-HMAC-CHAP secret, TLS PSK and iSCSI CHAP secret (iSCSI disks) are issued and pushed to the agents; the worker picks them up at its next boot.', { confirm: 'Rotate' }))) return;
    if (await act.run(() => call(api.PUT('/workers/{worker_id}/credential', { params: { path: { worker_id: id } }, body: { generate: true } })))) {
      notify(rotate ? 'credential rotated' : 'credential issued');
      void cred.reload();
    }
  };
  return (
    <section class="card" aria-label="NVMe-oF credentials">
      <h3>NVMe-oF credentials</h3>
      <p class="muted">Also the iSCSI CHAP secret of the worker's iSCSI disks (derived from the DH-HMAC-CHAP key).</p>
      <ErrorBox error={act.error ?? cred.error} onClose={act.clear} />
      {c === null && <p class="muted">No credential{hasNvme ? '' : ': one is issued with the first NVMe/TCP or iSCSI disk'}.</p>}
      {c && (
        <>
          <dl class="kv">
            <dt>Host NQN</dt>
            <dd>
              <code>{c.hostnqn}</code>
            </dd>
            <dt>DH-HMAC-CHAP key</dt>
            <dd>sha256 {hashPrefix(c.dhchap_key_sha256)}…</dd>
            <dt>TLS PSK</dt>
            <dd>sha256 {hashPrefix(c.tls_psk_sha256)}…</dd>
            <dt>Issued</dt>
            <dd>{relativeTime(c.issued_at, now)}</dd>
            <dt>State</dt>
            <dd>{c.revoked ? <Badge kind="revoked">revoked {relativeTime(c.revoked_at, now)}</Badge> : <Badge kind="ready">active</Badge>}</dd>
          </dl>
          <table class="plain">
            <thead>
              <tr>
                <th>Agent</th>
                <th>Push</th>
                <th>Attempts</th>
                <th>Last error</th>
                <th>Next attempt</th>
              </tr>
            </thead>
            <tbody>
              {c.agents.map((a) => (
                <tr key={a.agent} class={a.state === 'failed' ? 'mismatch' : ''}>
                  <td>{a.agent}</td>
                  <td>
                    <Badge kind={a.state === 'pushed' ? 'ready' : a.state}>{a.state}</Badge>
                  </td>
                  <td>{a.attempts}</td>
                  <td>{a.last_error ?? ''}</td>
                  <td>{a.next_attempt_at ? relativeTime(a.next_attempt_at, now) : ''}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
      <div class="actions">
        {c && !c.revoked && (
          <button type="button" disabled={act.busy} onClick={() => void issue(true)}>
            Rotate
          </button>
        )}
        {c && c.revoked && (
          <button type="button" disabled={act.busy} onClick={() => void issue(false)}>
            Issue a new credential
          </button>
        )}
        {c && !c.revoked && (
          <button
            type="button"
            class="danger"
            disabled={act.busy}
            onClick={async () => {
              if (!(await confirmAction('Revoke the credential?', `${id} can no longer connect to its NVMe/TCP disks until a new credential is issued.`, { confirm: 'Revoke' }))) return;
              if (await act.run(() => call(api.DELETE('/workers/{worker_id}/credential', { params: { path: { worker_id: id } } })))) void cred.reload();
            }}
          >
            Revoke
          </button>
        )}
      </div>
    </section>
  );
}

function DeleteWorker({ worker }: { worker: Worker }) {
  const act = useAction();
  return (
    <section class="card danger-zone" aria-label="delete worker">
      <h3>Delete worker</h3>
      <button
        type="button"
        class="danger"
        disabled={act.busy}
        onClick={async () => {
          let deleteDisk = false;
          const ok = await confirmAction(
            `Delete ${worker.worker_id}?`,
            <>
              <p>Its binding and targets go; the device returns to the pool.</p>
              <label class="check">
                <input type="checkbox" name="delete_disk" onChange={(e) => (deleteDisk = e.currentTarget.checked)} /> also delete its disk image files
              </label>
            </>,
            { confirm: 'Delete worker' },
          );
          if (!ok) return;
          if (await act.run(() => call(api.DELETE('/workers/{worker_id}', { params: { path: { worker_id: worker.worker_id }, query: { delete_disk: deleteDisk } } })))) {
            notify(`${worker.worker_id} deleted`);
            location.hash = '#/workers';
          }
        }}
      >
        Delete {worker.worker_id}
      </button>
      <ErrorBox error={act.error} onClose={act.clear} />
    </section>
  );
}

/** Whether the machine boots its default disk now (the server's boot_readiness), and why not. */
function BootsNow({ readiness }: { readiness: Worker['boot_readiness'] }) {
  if (readiness.bootable) return <p class="boots-now">Boots its default disk now.</p>;
  return (
    <div class="boots-now">
      <p>
        <Badge kind="failed">will not boot</Badge> what /boot-vars and the agents say now:
      </p>
      <ul>
        {readiness.reasons.map((r) => (
          <li key={r.code}>
            <code>{r.code}</code> {r.message}
          </li>
        ))}
      </ul>
    </div>
  );
}
