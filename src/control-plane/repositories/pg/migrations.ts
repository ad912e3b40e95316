/**
 * The PostgreSQL schema, as ordered migrations run at start (Database.init) inside one
 * transaction under an advisory lock, so two control planes starting together migrate once.
 * Append only: a released migration is never edited, a change is a new entry.
 *
 * The invariants are the database's job: one device per worker (unique partial index on
 * bound_worker_id), one worker per device (a device row holds one bound_worker_id), a binding
 * names an existing worker (deferred foreign key: a worker delete unbinds in the same
 * transaction), hostnames unique, audit ids from a sequence taken under a lock so they increase
 * in commit order.
 */
export interface Migration {
  id: number;
  name: string;
  sql: string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    id: 1,
    name: 'ledger, changes feed, documents, credentials, audit',
    sql: `
CREATE TABLE workers (
  worker_id text PRIMARY KEY,
  hostname  text NOT NULL,
  data      jsonb NOT NULL
);
CREATE UNIQUE INDEX workers_hostname ON workers (hostname);

CREATE TABLE devices (
  mac             text PRIMARY KEY CHECK (mac ~ '^[0-9a-f]{2}(:[0-9a-f]{2}){5}$'),
  state           text NOT NULL CHECK (state IN ('pooled', 'bound', 'revoked')),
  bound_worker_id text REFERENCES workers (worker_id) DEFERRABLE INITIALLY DEFERRED,
  data            jsonb NOT NULL,
  CHECK ((state = 'bound') = (bound_worker_id IS NOT NULL))
);
CREATE UNIQUE INDEX devices_one_per_worker ON devices (bound_worker_id) WHERE bound_worker_id IS NOT NULL;

-- Which keys each commit touched: the feed other control planes catch up from (LISTEN kurrent_ledger).
CREATE TABLE ledger_changes (
  id      bigserial PRIMARY KEY,
  at      timestamptz NOT NULL DEFAULT now(),
  origin  text NOT NULL,
  devices text[] NOT NULL,
  workers text[] NOT NULL
);

-- Whole small documents (runtime settings), versioned; NOTIFY kurrent_documents on change.
CREATE TABLE documents (
  name    text PRIMARY KEY,
  version bigint NOT NULL,
  body    jsonb NOT NULL
);

-- NVMe-oF credentials (secrets: the table is the 0600 file of the file store) and pending removals.
CREATE TABLE credentials (
  worker_id text PRIMARY KEY,
  body      jsonb NOT NULL
);
CREATE TABLE credential_removals (
  worker_id text NOT NULL,
  hostnqn   text NOT NULL,
  agent     text NOT NULL,
  body      jsonb NOT NULL,
  PRIMARY KEY (hostnqn, agent)
);

CREATE SEQUENCE audit_ids;
CREATE TABLE audit (
  id    bigint PRIMARY KEY,
  entry jsonb NOT NULL
);
CREATE INDEX audit_mac ON audit ((entry->>'mac'));
CREATE INDEX audit_worker ON audit ((entry->>'worker_id'));
`,
  },
  {
    id: 2,
    name: 'challenge nonces that verify on any control plane',
    sql: `
-- Secrets every control plane of the deployment shares (the challenge sealing key). Never exported.
CREATE TABLE secrets (
  name  text PRIMARY KEY,
  value bytea NOT NULL
);
-- Spent signed nonces, per use (vars, menu): a nonce works once per use across all control planes.
CREATE TABLE nonce_uses (
  nonce      bytea NOT NULL,
  use        text NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (nonce, use)
);
CREATE INDEX nonce_uses_expiry ON nonce_uses (expires_at);
`,
  },
  {
    id: 3,
    name: 'boot events (boot sessions, boot-loop holds)',
    sql: `
-- Stages of boots seen by any control plane, and releases of boot-loop holds; pruned by age.
CREATE TABLE boot_events (
  id     bigserial PRIMARY KEY,
  at     timestamptz NOT NULL,
  mac    text NOT NULL,
  stage  text NOT NULL,
  node   text NOT NULL,
  worker text,
  detail jsonb
);
CREATE INDEX boot_events_at ON boot_events (at);
`,
  },
  {
    id: 4,
    name: 'audit retention holds of followers',
    sql: `
-- The lowest GET /operations cursor each control plane's followers hold: retention on any of them
-- keeps every entry above the lowest fresh one.
CREATE TABLE audit_holds (
  node   text PRIMARY KEY,
  cursor bigint NOT NULL,
  at     timestamptz NOT NULL
);
`,
  },
  {
    id: 5,
    name: 'credential rows carry the version that wrote them; deletions leave tombstones',
    sql: `
-- A control plane catches up with the rows written after the version it has (and the tombstones
-- of rows deleted after it) instead of reading the whole table on every change or NOTIFY.
ALTER TABLE credentials ADD COLUMN version bigint NOT NULL DEFAULT 0;
ALTER TABLE credential_removals ADD COLUMN version bigint NOT NULL DEFAULT 0;
CREATE INDEX credentials_version ON credentials (version);
CREATE INDEX credential_removals_version ON credential_removals (version);
CREATE TABLE credential_tombstones (
  version bigint NOT NULL,
  kind    text NOT NULL,
  key     text NOT NULL,
  at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX credential_tombstones_version ON credential_tombstones (version);
`,
  },
  {
    id: 6,
    name: 'boot events found by device, for the prune to what the timelines hold',
    sql: `
-- Each device's events before its cut are deleted in batches; without this every batch scans and
-- hashes the whole table (seconds at millions of rows, close to the statement timeout).
CREATE INDEX boot_events_mac_at ON boot_events (mac, at);
`,
  },
  {
    id: 7,
    name: 'ledger changes that are report telemetry only',
    sql: `
-- A telemetry flush (last_seen, first_seen, uuid, fingerprint of known devices) is marked, so the
-- other control planes read those four fields and update their records in place instead of
-- reading and replacing whole records. Rows of older control planes are false: the whole record.
ALTER TABLE ledger_changes ADD COLUMN telemetry boolean NOT NULL DEFAULT false;
`,
  },
];
