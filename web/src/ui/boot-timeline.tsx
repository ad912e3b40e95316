import { api, call, type Schemas } from '../api';
import { relativeTime } from '../lib/format';
import { Badge, confirmAction, ErrorBox, notify } from './components';
import { useAction, useNow, useResource } from './hooks';

type Boot = Schemas['BootSessionDto'];

/** The badge of an outcome: booted green, in progress and waiting blue, the rest red or grey. */
export function outcomeKind(o: Boot['outcome']): string {
  if (o === 'booted') return 'ok';
  if (o === 'in_progress' || o === 'waiting') return 'running';
  if (o === 'superseded') return 'idle';
  return 'failed';
}

/** What a stage's detail says, in words (the vars answer, the disk login). */
function stageText(s: Boot['stages'][number]): string {
  const d = s.detail;
  if (!d) return s.stage;
  if (s.stage === 'vars') return d.answer === 'disk' ? `vars: ${d.transport ?? 'disk'} on ${d.agent ?? '?'}` : `vars: ${d.answer}`;
  if (s.stage === 'disk') return `disk login on ${d.agent ?? '?'}`;
  return s.stage;
}

/** One boot: outcome, when, each stage with its time since the first, and why it failed. */
export function BootRow({ boot, now, showMac }: { boot: Boot; now: number; showMac?: boolean }) {
  return (
    <li class="boot">
      <Badge kind={outcomeKind(boot.outcome)}>{boot.outcome.replace('_', ' ')}</Badge>{' '}
      {showMac && <code>{boot.mac}</code>} <span class="muted">{relativeTime(boot.started_at, now)}</span>
      {boot.worker_id && showMac && (
        <>
          {' '}
          <a href={`#/workers/${encodeURIComponent(boot.worker_id)}`}>{boot.worker_id}</a>
        </>
      )}
      <ol class="stages" aria-label="stages">
        {boot.stages.map((s) => (
          <li key={s.stage} title={s.at}>
            {stageText(s)} <small class="muted">+{(s.offset_ms / 1000).toFixed(1)} s</small>
          </li>
        ))}
      </ol>
      {boot.reason && <div class="bad">{boot.reason}</div>}
    </li>
  );
}

/** Releases a looping device's hold (audited), after a confirmation. */
export function ReleaseButton({ mac, onDone }: { mac: string; onDone: () => void }) {
  const act = useAction();
  return (
    <>
      <button
        type="button"
        disabled={act.busy}
        onClick={async () => {
          if (!(await confirmAction('Release the boot-loop hold?', `${mac} gets its normal boot answer again and its earlier boots no longer count. Fix the cause first (its disk, its default disk, its credential).`, { confirm: 'Release' }))) return;
          const r = await act.run(() => call(api.POST('/boots/{mac}/release', { params: { path: { mac } } })));
          if (r) {
            notify(r.released ? `${mac} released: it boots normally at its next power-on` : `${mac} was not looping`);
            onDone();
          }
        }}
      >
        Release hold
      </button>
      <ErrorBox error={act.error} onClose={act.clear} />
    </>
  );
}

/**
 * The boot timeline of a device (mac) or of a worker's boots: the last ten, live, with the loop
 * state and its release. Keyed by its subject where it is used, so one page's state never shows on another.
 */
export function BootTimeline({ mac, workerId, onChange }: { mac?: string | null; workerId?: string; onChange?: () => void }) {
  const now = useNow(5000);
  const boots = useResource(
    () => call(api.GET('/boots', { params: { query: { ...(mac ? { mac } : { worker_id: workerId }), limit: 10 } } })),
    [mac, workerId],
    ['boots'],
  );
  const items = boots.data?.items ?? [];
  const looping = items.find((b) => b.looping);
  return (
    <section class="card" aria-label="boot timeline">
      <h3>Boot timeline</h3>
      <ErrorBox error={boots.error} />
      {looping && (
        <div class="warn" role="status">
          <strong>Boot loop:</strong> {looping.mac} keeps booting without reaching its disk
          {items.find((b) => b.outcome === 'held') ? ' and is held (its console says why)' : ''}.{' '}
          <ReleaseButton
            mac={looping.mac}
            onDone={() => {
              void boots.reload();
              onChange?.();
            }}
          />
        </div>
      )}
      {boots.data && !items.length && <p class="muted">No boot seen yet (a boot is recorded from its /devices/report on).</p>}
      <ol class="boots">
        {items.map((b) => (
          <BootRow key={b.id} boot={b} now={now} />
        ))}
      </ol>
    </section>
  );
}
