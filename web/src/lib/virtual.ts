/**
 * Windowing of a fixed-row-height table: only the rows in view (plus an overscan) are rendered,
 * so 10,000 devices cost the same DOM as 40. Spacer heights keep the scrollbar true.
 */
export interface VisibleRange {
  start: number;
  end: number; // exclusive
  padTop: number;
  padBottom: number;
}

export function visibleRange(o: { scrollTop: number; viewport: number; rowHeight: number; count: number; overscan?: number }): VisibleRange {
  const over = o.overscan ?? 8;
  const count = Math.max(0, Math.floor(o.count));
  if (count === 0 || o.rowHeight <= 0) return { start: 0, end: 0, padTop: 0, padBottom: 0 };
  const maxTop = Math.max(0, count * o.rowHeight - o.viewport);
  const top = Math.min(Math.max(0, o.scrollTop), maxTop);
  const first = Math.floor(top / o.rowHeight);
  const inView = Math.ceil(Math.max(0, o.viewport) / o.rowHeight) + 1;
  const start = Math.max(0, first - over);
  const end = Math.min(count, first + inView + over);
  return { start, end, padTop: start * o.rowHeight, padBottom: (count - end) * o.rowHeight };
}
