/** The registration window as the Devices page shows it: open or not, time and seats left. */
export interface WindowLike {
  open: boolean;
  expires_at?: string | null;
  max_devices?: number | null;
  admitted?: number | null;
  remaining?: number | null;
}

export function windowView(w: WindowLike | null, nowMs: number): { open: boolean; msLeft: number; seatsLeft: number | null; label: string } {
  if (!w) return { open: false, msLeft: 0, seatsLeft: null, label: 'unknown' };
  const exp = w.expires_at ? Date.parse(w.expires_at) : NaN;
  const msLeft = Number.isNaN(exp) ? 0 : Math.max(0, exp - nowMs);
  const seatsLeft = typeof w.remaining === 'number' ? w.remaining : null;
  // The server closes the window at expiry; between reads the clock says so first.
  const open = w.open && msLeft > 0 && seatsLeft !== 0;
  const label = !w.open ? 'closed' : msLeft <= 0 ? 'expired' : seatsLeft === 0 ? 'full' : 'open';
  return { open, msLeft, seatsLeft, label };
}
