import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { changeFeed, type Topic } from './changes';

export interface Resource<T> {
  data: T | undefined;
  error: Error | undefined;
  loading: boolean;
  reload: () => Promise<void>;
}

/**
 * Loads `load()` on mount and when deps change, and again whenever the change feed says one of
 * `topics` changed (live views): at most one read in flight, the next one after it and no sooner
 * than `minGapMs` after the last (a boot storm wakes a page every 250 ms); a slow answer never
 * overwrites a newer one.
 */
export function useResource<T>(load: () => Promise<T>, deps: unknown[], topics: readonly Topic[] = [], minGapMs = 1000): Resource<T> {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<Error>();
  const [loading, setLoading] = useState(true);
  const seq = useRef(0);
  const reload = useCallback(async () => {
    const n = ++seq.current;
    setLoading(true);
    try {
      const d = await load();
      if (n === seq.current) {
        setData(d);
        setError(undefined);
      }
    } catch (e) {
      if (n === seq.current) setError(e as Error);
    } finally {
      if (n === seq.current) setLoading(false);
    }
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);
  const key = topics.join(',');
  useEffect(() => {
    if (!topics.length) {
      void reload();
      return;
    }
    let busy = false;
    let again = false;
    let last = 0;
    let timer: ReturnType<typeof setTimeout> | null = null;
    let alive = true;
    const run = async () => {
      timer = null;
      busy = true;
      last = Date.now();
      await reload();
      busy = false;
      if (again && alive) {
        again = false;
        changed();
      }
    };
    const changed = () => {
      if (busy) {
        again = true;
        return;
      }
      if (timer) return;
      timer = setTimeout(() => void run(), Math.max(0, last + minGapMs - Date.now()));
    };
    void run(); // the first read counts as in flight: a change meanwhile reads again after it
    const off = changeFeed.subscribe(topics, changed);
    return () => {
      alive = false;
      off();
      if (timer) clearTimeout(timer);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [reload, key, minGapMs]);
  return { data, error, loading, reload };
}

/** `value`, once it has stayed the same for `ms` (a search box asks the server per pause, not per key). */
export function useDebounced<T>(value: T, ms: number): T {
  const [v, setV] = useState(value);
  useEffect(() => {
    const t = setTimeout(() => setV(value), ms);
    return () => clearTimeout(t);
  }, [value, ms]);
  return v;
}

/** The current time, ticking every `ms` (countdowns, relative times). */
export function useNow(ms = 1000): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}

/** Runs an async action with a busy flag and its error; returns the result or undefined. */
export function useAction(): {
  busy: boolean;
  error: Error | undefined;
  run: <T>(fn: () => Promise<T>) => Promise<T | undefined>;
  clear: () => void;
} {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<Error>();
  const run = useCallback(async <T,>(fn: () => Promise<T>) => {
    setBusy(true);
    setError(undefined);
    try {
      return await fn();
    } catch (e) {
      setError(e as Error);
      return undefined;
    } finally {
      setBusy(false);
    }
  }, []);
  return { busy, error, run, clear: () => setError(undefined) };
}
