import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api, call, session, whenUnauthorized } from './api';
import { DialogHost } from './ui/components';
import { changeFeed, useFeedStatus } from './ui/changes';
import { DevicesPage } from './pages/devices';
import { WorkersPage } from './pages/workers';
import { WorkerDetailPage } from './pages/worker-detail';
import { BatchDisksPage } from './pages/batch-disks';
import { AgentsPage } from './pages/agents';
import { MastersPage } from './pages/masters';
import { OperationsPage } from './pages/operations';
import { OverviewPage } from './pages/overview';
import { LoginPage } from './pages/login';
import './styles.css';

/** Hash routes (#/devices, #/workers/w1): the control plane serves one index.html at /ui/. */
function useRoute(): string[] {
  const parse = () => (location.hash.replace(/^#\/?/, '') || 'overview').split('/').map(decodeURIComponent);
  const [route, setRoute] = useState(parse);
  useEffect(() => {
    const on = () => setRoute(parse());
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}

const NAV: [string, string][] = [
  ['overview', 'Overview'],
  ['devices', 'Devices'],
  ['workers', 'Workers'],
  ['batch-disks', 'Batch disks'],
  ['agents', 'Agents'],
  ['masters', 'Masters'],
  ['operations', 'Operations'],
];

type AuthState = 'checking' | 'ok' | 'needed' | 'refused' | 'down';

function App() {
  const route = useRoute();
  const [auth, setAuth] = useState<AuthState>('checking');
  const [downMsg, setDownMsg] = useState('');
  const check = async () => {
    try {
      // Any authenticated route tells whether a token is needed and whether ours is accepted.
      await call(api.GET('/settings/auto-register'));
      setAuth('ok');
    } catch (e) {
      const status = (e as { status?: number }).status;
      if (status === 401) setAuth(session.token ? 'refused' : 'needed');
      else {
        setDownMsg((e as Error).message);
        setAuth('down');
      }
    }
  };
  useEffect(() => {
    whenUnauthorized(() => setAuth(session.token ? 'refused' : 'needed'));
    void check();
  }, []);
  if (auth === 'checking') return <p class="loading">Connecting to the control plane…</p>;
  if (auth === 'needed' || auth === 'refused')
    return (
      <LoginPage
        refused={auth === 'refused'}
        onToken={(t) => {
          session.token = t;
          setAuth('checking');
          void check();
        }}
      />
    );
  if (auth === 'down')
    return (
      <main class="login">
        <h1>Kurrent</h1>
        <div class="error" role="alert">
          The control plane is not answering: {downMsg}
        </div>
        <button type="button" onClick={() => void check()}>
          Retry
        </button>
      </main>
    );
  const [page, ...rest] = route;
  return <Shell page={page} rest={rest} signOut={() => setAuth('needed')} />;
}

const FEED_TEXT = { connecting: 'Connecting live updates…', live: 'Live', lost: 'Live updates lost: retrying (pages show what they last read)' } as const;

/** The signed-in UI: the change feed runs while it is shown. */
function Shell({ page, rest, signOut }: { page: string; rest: string[]; signOut: () => void }) {
  useEffect(() => {
    changeFeed.start();
    return () => changeFeed.stop();
  }, []);
  const feed = useFeedStatus();
  return (
    <div class="shell">
      <nav class="side" aria-label="main">
        <a class="brand" href="#/overview">
          Kurrent
        </a>
        {NAV.map(([k, t]) => (
          <a key={k} href={`#/${k}`} aria-current={page === k ? 'page' : undefined}>
            {t}
          </a>
        ))}
        <span class="grow" />
        <span class={`feed feed-${feed}`} role="status" aria-label="live updates">
          {FEED_TEXT[feed]}
        </span>
        <a href="/docs" target="_blank" rel="noreferrer">
          API docs
        </a>
        {session.token && (
          <button
            type="button"
            class="link"
            onClick={() => {
              session.token = '';
              signOut();
            }}
          >
            Sign out
          </button>
        )}
      </nav>
      <main class="content">
        {page === 'overview' && <OverviewPage />}
        {page === 'devices' && <DevicesPage />}
        {page === 'workers' && !rest[0] && <WorkersPage />}
        {page === 'workers' && rest[0] && <WorkerDetailPage id={rest[0]} />}
        {page === 'batch-disks' && <BatchDisksPage />}
        {page === 'agents' && <AgentsPage />}
        {page === 'masters' && <MastersPage />}
        {page === 'operations' && <OperationsPage />}
        {!NAV.some(([k]) => k === page) && <p>No page {page}. <a href="#/devices">Devices</a></p>}
      </main>
      <DialogHost />
    </div>
  );
}

render(<App />, document.getElementById('app')!);
