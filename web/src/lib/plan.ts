/**
 * Batch disk creation: the dry-run plan, the operator's per-row overrides, and the targets that
 * execute exactly what was previewed (each row pinned to the agent shown, so the placement cannot
 * move between preview and execution).
 */
export interface PlanRow {
  worker_id: string;
  agent: string | null; // planned agent (dry run), or null when the row is skipped / failed
  status: 'planned' | 'skipped' | 'failed';
  reason?: string;
}

export interface DryRun {
  succeeded: { worker_id: string; agent: string; iqn?: string }[];
  skipped: { worker_id: string; reason: string }[];
  failed: { worker_id: string; agent?: string | null; error: string }[];
}

export function planRows(workerIds: readonly string[], r: DryRun): PlanRow[] {
  const by = new Map<string, PlanRow>();
  for (const s of r.succeeded) by.set(s.worker_id, { worker_id: s.worker_id, agent: s.agent, status: 'planned' });
  for (const s of r.skipped) by.set(s.worker_id, { worker_id: s.worker_id, agent: null, status: 'skipped', reason: s.reason });
  for (const f of r.failed) by.set(f.worker_id, { worker_id: f.worker_id, agent: f.agent ?? null, status: 'failed', reason: f.error });
  return workerIds.map((w) => by.get(w) ?? { worker_id: w, agent: null, status: 'failed', reason: 'not in the plan' });
}

/** Targets to execute: planned rows (or rows the operator pinned), each with its agent; '' skips a row. */
export function executeTargets(rows: readonly PlanRow[], overrides: Readonly<Record<string, string>>): { worker_id: string; agent: string }[] {
  const out: { worker_id: string; agent: string }[] = [];
  for (const r of rows) {
    // An override ('' = skip this row) wins over the plan; otherwise only planned rows run.
    const o = overrides[r.worker_id];
    const agent = o !== undefined ? o : r.status === 'planned' ? r.agent : null;
    if (agent) out.push({ worker_id: r.worker_id, agent });
  }
  return out;
}

/** Disks per agent after the plan: what the operator checks for balance. */
export function planLoad(rows: readonly PlanRow[], overrides: Readonly<Record<string, string>>): Record<string, number> {
  const load: Record<string, number> = {};
  for (const t of executeTargets(rows, overrides)) load[t.agent] = (load[t.agent] ?? 0) + 1;
  return load;
}
