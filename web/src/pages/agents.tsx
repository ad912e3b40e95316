import { useState } from 'preact/hooks';
import { api, call, type Agent, type Schemas } from '../api';
import { bytes } from '../lib/format';
import { Badge, confirmAction, ErrorBox, Field, notify, Panel } from '../ui/components';
import { useAction, useResource } from '../ui/hooks';
import { AgentUsage } from '../ui/agent-usage';

export function AgentsPage() {
  const agents = useResource(() => call(api.GET('/agents', { params: { query: { live: true } } })), [], ['agents', 'audit'], 3000);
  const masters = useResource(() => call(api.GET('/masters')), [], ['agents', 'audit'], 3000);
  const [adding, setAdding] = useState(false);
  const [open, setOpen] = useState<string | null>(null);
  const [editing, setEditing] = useState<string | null>(null);
  const act = useAction();
  const list = agents.data ?? [];
  return (
    <div class="page">
      <header class="page-head">
        <h1>Agents</h1>
        <span class="muted">
          {list.length} agents · {list.filter((a) => a.health === 'ok').length} healthy
        </span>
        <span class="grow" />
        <button type="button" onClick={() => setAdding(true)}>
          Add agent
        </button>
        <button type="button" onClick={() => void agents.reload()} disabled={agents.loading}>
          Refresh
        </button>
      </header>
      <ErrorBox error={agents.error ?? act.error} onClose={act.clear} />
      {adding && (
        <AddAgent
          onClose={() => setAdding(false)}
          onDone={() => {
            void agents.reload();
            void masters.reload();
          }}
        />
      )}
      <table class="plain" aria-label="agents">
        <thead>
          <tr>
            <th>Agent</th>
            <th>Health</th>
            <th>Backend</th>
            <th>Data address</th>
            <th>Role</th>
            <th>Tags</th>
            <th>Masters</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {list.map((a) => {
            const m = masters.data?.agents.find((x) => x.agent === a.id);
            return [
              <tr key={a.id} class={a.health === 'ok' || a.health === 'disabled' ? '' : 'mismatch'}>
                <td>
                  <strong>{a.id}</strong>
                  <br />
                  <small class="muted">{a.base_url}</small>
                </td>
                <td>
                  <Badge kind={a.health ?? 'unknown'}>{a.enabled ? (a.health ?? 'unknown') : 'drained'}</Badge>
                  {a.error && <small class="bad"> {a.error}</small>}
                </td>
                <td>
                  {a.capabilities ? `${a.capabilities.backend} · ${a.capabilities.transport ?? 'iscsi'} · ${a.capabilities.fs_type} · clone ${a.capabilities.clone}` : '—'}
                  {a.capabilities?.nvme_port ? ` · nvme ${a.capabilities.nvme_port}${a.capabilities.nvme_tls ? ' tls' : ''}` : ''}
                  {a.usage && <br />}
                  <AgentUsage usage={a.usage} />
                </td>
                <td>{a.iscsi_server}</td>
                <td>{[a.role.disk && 'disk', a.role.cd && 'cd'].filter(Boolean).join(', ')}</td>
                <td>{a.tags.join(', ')}</td>
                <td>{m ? m.masters.length : '—'}</td>
                <td class="row-actions">
                  <button type="button" onClick={() => setOpen(open === a.id ? null : a.id)} aria-expanded={open === a.id}>
                    {open === a.id ? 'Hide' : 'LUNs & masters'}
                  </button>
                  <button type="button" onClick={() => setEditing(a.id)}>
                    Edit
                  </button>
                  <button
                    type="button"
                    disabled={act.busy}
                    onClick={async () => {
                      if (a.enabled && !(await confirmAction(`Drain ${a.id}?`, 'No new disks or CDs go to it; existing disks keep serving.', { confirm: 'Drain' }))) return;
                      if (await act.run(() => call(api.PUT('/agents/{agent_id}', { params: { path: { agent_id: a.id } }, body: { ...editable(a), enabled: !a.enabled } })))) {
                        notify(`${a.id} ${a.enabled ? 'drained' : 'enabled'}`);
                        void agents.reload();
                      }
                    }}
                  >
                    {a.enabled ? 'Drain' : 'Enable'}
                  </button>
                </td>
              </tr>,
              open === a.id && (
                <tr key={`${a.id}-detail`}>
                  <td colSpan={8}>
                    <AgentDetail agent={a} masters={m} />
                  </td>
                </tr>
              ),
              editing === a.id && (
                <tr key={`${a.id}-edit`}>
                  <td colSpan={8}>
                    <EditAgent agent={a} onClose={() => setEditing(null)} onDone={() => void agents.reload()} />
                  </td>
                </tr>
              ),
            ];
          })}
        </tbody>
      </table>
    </div>
  );
}

/** The fields PUT /agents/{id} takes, from the current view (the token is kept when omitted). */
function editable(a: Agent): Schemas['UpdateAgentDto'] {
  return { base_url: a.base_url, iscsi_server: a.iscsi_server, role: { disk: a.role.disk, cd: a.role.cd }, tags: [...a.tags], enabled: a.enabled };
}

function AgentDetail({ agent, masters }: { agent: Agent; masters: Schemas['AgentMastersDto'] | undefined }) {
  const luns = useResource(() => call(api.GET('/agents/{agent_id}/luns', { params: { path: { agent_id: agent.id } } })), [agent.id], ['audit']);
  return (
    <div class="cols">
      <div>
        <h4>LUNs</h4>
        <ErrorBox error={luns.error} />
        <ul class="small">
          {(luns.data ?? []).map((t) => (
            <li key={t.iqn ?? t.nqn}>
              <code>{t.iqn ?? t.nqn}</code> {t.cd ? '(cd)' : ''} {t.luns.map((l) => l.backing).join(', ')}
            </li>
          ))}
          {luns.data?.length === 0 && <li class="muted">none</li>}
        </ul>
      </div>
      <div>
        <h4>Masters</h4>
        {masters?.error && <p class="bad">{masters.error}</p>}
        <ul class="small">
          {(masters?.masters ?? []).map((m) => (
            <li key={m.name}>
              {m.name} · {bytes(m.size)} · {m.versions.length ? `versions ${m.versions.map((v) => `v${v.version}`).join(', ')}` : 'no version yet'}
            </li>
          ))}
        </ul>
      </div>
    </div>
  );
}

function AgentForm({ initial, submit, busy, label }: { initial: { base_url: string; iscsi_server: string; tags: string; disk: boolean; cd: boolean; token: string }; submit: (v: typeof initial) => void; busy: boolean; label: string }) {
  const [v, setV] = useState(initial);
  return (
    <form
      class="grid-form"
      onSubmit={(e) => {
        e.preventDefault();
        submit(v);
      }}
    >
      <Field label="base_url">
        <input name="base_url" required value={v.base_url} onInput={(e) => setV({ ...v, base_url: e.currentTarget.value })} />
      </Field>
      <Field label="data address (iscsi_server)">
        <input name="iscsi_server" value={v.iscsi_server} onInput={(e) => setV({ ...v, iscsi_server: e.currentTarget.value })} />
      </Field>
      <Field label="tags" hint="comma separated">
        <input name="tags" value={v.tags} onInput={(e) => setV({ ...v, tags: e.currentTarget.value })} />
      </Field>
      <Field label="token" hint="empty keeps the current one">
        <input name="token" type="password" autoComplete="off" value={v.token} onInput={(e) => setV({ ...v, token: e.currentTarget.value })} />
      </Field>
      <label class="check">
        <input type="checkbox" checked={v.disk} onChange={(e) => setV({ ...v, disk: e.currentTarget.checked })} /> disks
      </label>
      <label class="check">
        <input type="checkbox" checked={v.cd} onChange={(e) => setV({ ...v, cd: e.currentTarget.checked })} /> install CDs
      </label>
      <button type="submit" class="primary" disabled={busy}>
        {label}
      </button>
    </form>
  );
}

const tagList = (s: string) => s.split(/[\s,]+/).filter(Boolean);

function EditAgent({ agent, onClose, onDone }: { agent: Agent; onClose: () => void; onDone: () => void }) {
  const act = useAction();
  return (
    <Panel title={`Edit ${agent.id}`} onClose={onClose}>
      <AgentForm
        label="Save"
        busy={act.busy}
        initial={{ base_url: agent.base_url, iscsi_server: agent.iscsi_server, tags: agent.tags.join(', '), disk: agent.role.disk, cd: agent.role.cd, token: '' }}
        submit={async (v) => {
          const body: Schemas['UpdateAgentDto'] = { ...editable(agent), base_url: v.base_url, iscsi_server: v.iscsi_server, tags: tagList(v.tags), role: { disk: v.disk, cd: v.cd } };
          if (v.token) body.token = v.token;
          if (await act.run(() => call(api.PUT('/agents/{agent_id}', { params: { path: { agent_id: agent.id } }, body })))) {
            notify(`${agent.id} saved`);
            onDone();
            onClose();
          }
        }}
      />
      <ErrorBox error={act.error} />
    </Panel>
  );
}

/** Add an agent: probe it first (what it says about itself), then confirm and register. */
function AddAgent({ onClose, onDone }: { onClose: () => void; onDone: () => void }) {
  const act = useAction();
  const [base, setBase] = useState('');
  const [token, setToken] = useState('');
  const [probe, setProbe] = useState<Schemas['ProbeResultDto']>();
  const [id, setId] = useState('');
  return (
    <Panel title="Add an agent" onClose={onClose}>
      <form
        class="inline"
        onSubmit={async (e) => {
          e.preventDefault();
          const body: Schemas['ProbeAgentDto'] = { base_url: base };
          if (token) body.token = token;
          const r = await act.run(() => call(api.POST('/agents/probe', { body })));
          if (r) {
            setProbe(r);
            if (!id) setId(new URL(r.base_url).hostname.replace(/[^a-z0-9.-]/gi, '-').toLowerCase());
          }
        }}
      >
        <Field label="base_url">
          <input name="base_url" required placeholder="http://10.0.0.5:4840" value={base} onInput={(e) => setBase(e.currentTarget.value)} />
        </Field>
        <Field label="token">
          <input name="token" type="password" autoComplete="off" value={token} onInput={(e) => setToken(e.currentTarget.value)} />
        </Field>
        <button type="submit" disabled={act.busy}>
          Probe
        </button>
      </form>
      <ErrorBox error={act.error} />
      {probe && (
        <div class="result" aria-label="probe result">
          <p>
            {probe.backend} on {probe.fs_type} · clone {probe.clone} · empty disks {probe.empty_disk} · {probe.persistent} · data address {probe.iscsi_server} · base IQN {probe.base_iqn}
          </p>
          <form
            class="inline"
            onSubmit={async (e) => {
              e.preventDefault();
              const body: Schemas['CreateAgentDto'] = { id, base_url: probe.base_url, iscsi_server: probe.iscsi_server, role: probe.role, tags: probe.tags, enabled: true };
              if (token) body.token = token;
              if (await act.run(() => call(api.POST('/agents', { body })))) {
                notify(`agent ${id} added`);
                onDone();
                onClose();
              }
            }}
          >
            <Field label="agent id">
              <input name="id" required value={id} onInput={(e) => setId(e.currentTarget.value)} />
            </Field>
            <button type="submit" class="primary" disabled={act.busy}>
              Confirm and add
            </button>
          </form>
        </div>
      )}
    </Panel>
  );
}
