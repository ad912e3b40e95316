import { cloneElement, type ComponentChildren, type TargetedKeyboardEvent, type VNode } from 'preact';
import { useEffect, useId, useRef, useState } from 'preact/hooks';
import { ApiFailure } from '../api';
import { visibleRange } from '../lib/virtual';

/** The API's message, as is; per-field errors listed under it. */
export function ErrorBox({ error, onClose }: { error: Error | undefined | null; onClose?: () => void }) {
  if (!error) return null;
  const f = error instanceof ApiFailure ? error : null;
  return (
    <div class="error" role="alert">
      <strong>{f && f.status ? `${f.status}: ` : ''}</strong>
      {error.message}
      {f?.hint && <p class="hint">{f.hint}</p>}
      {f && f.errors.length > 0 && (
        <ul>
          {f.errors.map((e) => (
            <li key={e.field}>
              <code>{e.field}</code>: {e.message}
            </li>
          ))}
        </ul>
      )}
      {onClose && (
        <button type="button" class="link" onClick={onClose} aria-label="dismiss">
          ×
        </button>
      )}
    </div>
  );
}

export function Badge({ kind, children }: { kind: string; children: ComponentChildren }) {
  return <span class={`badge badge-${kind}`}>{children}</span>;
}

// ---- confirmation dialog and notices: one host component, called from anywhere ----

interface ConfirmReq {
  title: string;
  body: ComponentChildren;
  confirm: string;
  danger: boolean;
  resolve: (ok: boolean) => void;
}
let pushConfirm: (r: ConfirmReq) => void = () => undefined;

/** Asks before a destructive action; resolves true only on an explicit confirm. */
export function confirmAction(title: string, body: ComponentChildren, opts: { confirm?: string; danger?: boolean } = {}): Promise<boolean> {
  return new Promise((resolve) => pushConfirm({ title, body, confirm: opts.confirm ?? 'Confirm', danger: opts.danger ?? true, resolve }));
}

let pushNotice: (text: string) => void = () => undefined;
export function notify(text: string): void {
  pushNotice(text);
}

export function DialogHost() {
  const [req, setReq] = useState<ConfirmReq | null>(null);
  const [notices, setNotices] = useState<{ id: number; text: string }[]>([]);
  const cancelRef = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    pushConfirm = setReq;
    let n = 0;
    pushNotice = (text) => {
      const id = ++n;
      // The last three, four seconds each: confirmations, not a log (Operations is the log).
      setNotices((l) => [...l, { id, text }].slice(-3));
      setTimeout(() => setNotices((l) => l.filter((x) => x.id !== id)), 4000);
    };
  }, []);
  useEffect(() => {
    if (req) cancelRef.current?.focus();
  }, [req]);
  const done = (ok: boolean) => {
    req?.resolve(ok);
    setReq(null);
  };
  return (
    <>
      {req && (
        <div class="backdrop" onKeyDown={(e) => e.key === 'Escape' && done(false)}>
          <div class="dialog" role="alertdialog" aria-modal="true" aria-labelledby="dlg-title">
            <h2 id="dlg-title">{req.title}</h2>
            <div>{req.body}</div>
            <div class="actions">
              <button type="button" ref={cancelRef} onClick={() => done(false)}>
                Cancel
              </button>
              <button type="button" class={req.danger ? 'danger' : 'primary'} onClick={() => done(true)}>
                {req.confirm}
              </button>
            </div>
          </div>
        </div>
      )}
      <div class="notices" aria-live="polite">
        {notices.map((n) => (
          <div class="notice" key={n.id}>
            {n.text}
          </div>
        ))}
      </div>
    </>
  );
}

/** A panel that opens inline (forms of a page); Escape closes it. */
export function Panel({ title, onClose, children }: { title: string; onClose: () => void; children: ComponentChildren }) {
  return (
    <section class="panel" aria-label={title} onKeyDown={(e) => e.key === 'Escape' && onClose()}>
      <header>
        <h2>{title}</h2>
        <button type="button" class="link" onClick={onClose} aria-label={`close ${title}`}>
          Close
        </button>
      </header>
      {children}
    </section>
  );
}

/**
 * A labelled control: `<label for>` names it with exactly the label (a wrapping label would add the
 * selected option's text to a select's name), the hint is its description.
 */
export function Field({ label, children, hint }: { label: string; children: VNode<{ id?: string; 'aria-describedby'?: string }>; hint?: string }) {
  const id = useId();
  return (
    <div class="field">
      <label for={id}>{label}</label>
      {cloneElement(children, { id, ...(hint ? { 'aria-describedby': `${id}-hint` } : {}) })}
      {hint && <small id={`${id}-hint`}>{hint}</small>}
    </div>
  );
}

export interface Column<T> {
  key: string;
  title: string;
  width?: string;
  render: (row: T) => ComponentChildren;
}

const ROW_H = 34;

/**
 * A windowed table: fixed row height, only the visible rows in the DOM (see lib/virtual.ts).
 * Rows are focusable and open with Enter, so the keyboard reaches every row.
 */
export function VirtualTable<T>({
  rows,
  columns,
  rowKey,
  onOpen,
  selected,
  height = 520,
  label,
}: {
  rows: readonly T[];
  columns: Column<T>[];
  rowKey: (r: T) => string;
  onOpen?: (r: T) => void;
  selected?: string | null;
  height?: number;
  label: string;
}) {
  const ref = useRef<HTMLDivElement>(null);
  const [top, setTop] = useState(0);
  const [viewport, setViewport] = useState(height);
  useEffect(() => {
    const el = ref.current;
    if (!el) return;
    const ro = new ResizeObserver(() => setViewport(el.clientHeight));
    ro.observe(el);
    return () => ro.disconnect();
  }, []);
  const r = visibleRange({ scrollTop: top, viewport, rowHeight: ROW_H, count: rows.length });
  const grid = columns.map((c) => c.width ?? '1fr').join(' ');
  // Flexible columns keep 120 px: narrower windows scroll the table sideways, not the page.
  const minWidth = columns.reduce((n, c) => n + (c.width?.endsWith('px') ? parseInt(c.width, 10) : 120), 0);
  const onKey = (e: TargetedKeyboardEvent<HTMLDivElement>, row: T) => {
    if (e.key === 'Enter' || e.key === ' ') {
      e.preventDefault();
      onOpen?.(row);
    } else if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      const next = (e.currentTarget as HTMLElement)[e.key === 'ArrowDown' ? 'nextElementSibling' : 'previousElementSibling'] as HTMLElement | null;
      if (next?.classList.contains('vrow')) next.focus();
      else ref.current!.scrollTop += e.key === 'ArrowDown' ? ROW_H : -ROW_H;
    }
  };
  return (
    <div class="vtable" role="table" aria-label={label} aria-rowcount={rows.length}>
      <div class="vhead" role="row" style={{ gridTemplateColumns: grid, minWidth: `${minWidth}px` }}>
        {columns.map((c) => (
          <div role="columnheader" key={c.key}>
            {c.title}
          </div>
        ))}
      </div>
      <div class="vbody" ref={ref} style={{ height: `${height}px`, minWidth: `${minWidth}px` }} onScroll={(e) => setTop((e.currentTarget as HTMLDivElement).scrollTop)}>
        <div style={{ height: `${r.padTop}px` }} />
        {rows.slice(r.start, r.end).map((row, i) => {
          const k = rowKey(row);
          return (
            <div
              key={k}
              role="row"
              aria-rowindex={r.start + i + 1}
              tabIndex={0}
              data-key={k}
              class={`vrow${selected === k ? ' selected' : ''}`}
              style={{ gridTemplateColumns: grid, height: `${ROW_H}px` }}
              onClick={() => onOpen?.(row)}
              onKeyDown={(e) => onKey(e, row)}
            >
              {columns.map((c) => (
                <div role="cell" key={c.key}>
                  {c.render(row)}
                </div>
              ))}
            </div>
          );
        })}
        <div style={{ height: `${r.padBottom}px` }} />
        {rows.length === 0 && <p class="empty">Nothing to show.</p>}
      </div>
    </div>
  );
}

/**
 * The outcome of a batch call (import, batch bind, batch create): the counts, then one line per
 * row that did not simply succeed, with the API's reason.
 */
export function Outcome({ label, counts, rows }: { label: string; counts: [number, string][]; rows: { key: string; text: ComponentChildren; bad?: boolean }[] }) {
  return (
    <div class="result" aria-label={label}>
      <p>
        {counts.map(([n, what], i) => (
          <span key={what}>
            {i > 0 && ' · '}
            <strong>{n}</strong> {what}
          </span>
        ))}
      </p>
      <ul>
        {rows.map((r) => (
          <li key={r.key} class={r.bad ? 'bad' : ''}>
            {r.text}
          </li>
        ))}
      </ul>
    </div>
  );
}

/** `<option>`s of an enumeration of the spec. */
export function Options({ values }: { values: readonly string[] }) {
  return (
    <>
      {values.map((v) => (
        <option key={v}>{v}</option>
      ))}
    </>
  );
}
