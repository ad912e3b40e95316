import { useState } from 'preact/hooks';
import { api, call, type Schemas } from '../api';
import { bytes } from '../lib/format';
import { Badge, confirmAction, ErrorBox, notify } from '../ui/components';
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
        </section>
      ))}
    </div>
  );
}
