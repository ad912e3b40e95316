import { useEffect, useState } from 'preact/hooks';
import { api, call } from '../api';

/** What the control plane says changed (GET /changes topics). */
export type Topic = 'ledger' | 'audit' | 'boots' | 'agents' | 'settings';
export type FeedStatus = 'connecting' | 'live' | 'lost';

type Subscriber = { topics: readonly Topic[]; fn: () => void };

/** How long a long-poll waits server-side; retries after a failure back off to RETRY_MAX_MS. */
const WAIT_SECONDS = 25;
const RETRY_MS = 1000;
const RETRY_MAX_MS = 10_000;

/**
 * One long-poll on GET /changes for the whole UI: pages subscribe to the topics their reads
 * depend on and read again when told, instead of each running its own timer. A `reset` (first
 * call, a restarted control plane) tells every subscriber.
 */
class ChangeFeedClient {
  private readonly subs = new Set<Subscriber>();
  private readonly statusSubs = new Set<(s: FeedStatus) => void>();
  private cursor: string | undefined;
  private running = false;
  private abort: AbortController | null = null;
  status: FeedStatus = 'connecting';

  start(): void {
    if (this.running) return;
    this.running = true;
    void this.loop();
  }

  stop(): void {
    this.running = false;
    this.abort?.abort();
    this.cursor = undefined;
    this.setStatus('connecting');
  }

  subscribe(topics: readonly Topic[], fn: () => void): () => void {
    const s = { topics, fn };
    this.subs.add(s);
    return () => this.subs.delete(s);
  }

  onStatus(fn: (s: FeedStatus) => void): () => void {
    this.statusSubs.add(fn);
    return () => this.statusSubs.delete(fn);
  }

  /** A hidden tab reads again only once it is shown, once per subscriber however much changed meanwhile. */
  private readonly hiddenDirty = new Set<Subscriber>();

  private notify(s: Subscriber): void {
    if (document.visibilityState !== 'hidden') return s.fn();
    if (!this.hiddenDirty.size) {
      const shown = () => {
        if (document.visibilityState === 'hidden') return;
        document.removeEventListener('visibilitychange', shown);
        const dirty = [...this.hiddenDirty];
        this.hiddenDirty.clear();
        for (const d of dirty) if (this.subs.has(d)) d.fn();
      };
      document.addEventListener('visibilitychange', shown);
    }
    this.hiddenDirty.add(s);
  }

  private setStatus(s: FeedStatus): void {
    if (s === this.status) return;
    this.status = s;
    for (const fn of this.statusSubs) fn(s);
  }

  private async loop(): Promise<void> {
    let retry = RETRY_MS;
    while (this.running) {
      this.abort = new AbortController();
      try {
        const r = await call(api.GET('/changes', { params: { query: { ...(this.cursor ? { cursor: this.cursor } : {}), wait: WAIT_SECONDS } }, signal: this.abort.signal }));
        if (!this.running) return;
        this.setStatus('live');
        retry = RETRY_MS;
        this.cursor = r.cursor;
        // A reset (the first answer too: a page may have read just before the cursor began) lists every topic.
        const changed = new Set<Topic>(r.topics as Topic[]);
        for (const s of [...this.subs]) if (s.topics.some((t) => changed.has(t))) this.notify(s);
      } catch {
        if (!this.running) return;
        this.setStatus('lost');
        await new Promise((res) => setTimeout(res, retry));
        retry = Math.min(retry * 2, RETRY_MAX_MS);
      }
    }
  }
}

export const changeFeed = new ChangeFeedClient();

/** The feed's state, for the "live" indicator. */
export function useFeedStatus(): FeedStatus {
  const [s, setS] = useState(changeFeed.status);
  useEffect(() => changeFeed.onStatus(setS), []);
  return s;
}
