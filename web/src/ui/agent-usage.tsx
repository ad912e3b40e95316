import type { Schemas } from '../api';
import { bytes } from '../lib/format';

type Usage = NonNullable<Schemas['AgentDto']['usage']>;

/** Share of DISK_DIR's filesystem in use from which the meter warns (a clone without reflink needs room). */
const HIGH = 0.85;

/** An agent's disk space and target counts (GET /agents?live=true → usage), or nothing when unknown. */
export function AgentUsage({ usage }: { usage: Usage | null | undefined }) {
  if (!usage) return null;
  const share = usage.total_bytes ? usage.used_bytes / usage.total_bytes : 0;
  const logins = usage.sessions === null ? 'logins not visible' : `${usage.sessions} logged in`;
  return (
    <span class="usage">
      <meter min={0} max={1} high={HIGH} value={share} aria-label="disk used" title={`${Math.round(share * 100)}% used`} />{' '}
      <span>
        {bytes(usage.used_bytes)} used · {bytes(usage.free_bytes)} free
      </span>{' '}
      <span class="muted">
        {usage.disk_targets} {usage.disk_targets === 1 ? 'disk' : 'disks'}
        {usage.cd_targets ? ` · ${usage.cd_targets} CD` : ''} · {logins}
      </span>
    </span>
  );
}
