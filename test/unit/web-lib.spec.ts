import fc from 'fast-check';
import { byMac, deviceMatcher, type DeviceFilter } from '../../src/shared/device-filter';
import { bytes, countdown, hashPrefix, relativeTime } from '../../web/src/lib/format';
import { parseImport, parsePairs } from '../../web/src/lib/paste';
import { handover } from '../../web/src/lib/handover';
import { nextStep } from '../../web/src/lib/next-step';
import { executeTargets, planLoad, planRows } from '../../web/src/lib/plan';
import { statusRows } from '../../web/src/lib/status';
import { visibleRange } from '../../web/src/lib/virtual';
import { windowView } from '../../web/src/lib/window';

/** The web UI's logic (web/src/lib): pure functions, tested without a browser. */

describe('virtual table window', () => {
  it('renders every row in view, no more than view + 2 x overscan, and the spacers add up to the full height', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 20_000 }),
        fc.integer({ min: 0, max: 2_000_000 }),
        fc.integer({ min: 1, max: 2000 }),
        fc.integer({ min: 10, max: 60 }),
        fc.integer({ min: 0, max: 20 }),
        (count, scrollTop, viewport, rowHeight, overscan) => {
          const r = visibleRange({ scrollTop, viewport, rowHeight, count, overscan });
          expect(r.start).toBeGreaterThanOrEqual(0);
          expect(r.end).toBeLessThanOrEqual(count);
          expect(r.padTop + (r.end - r.start) * rowHeight + r.padBottom).toBe(count * rowHeight);
          expect(r.end - r.start).toBeLessThanOrEqual(Math.ceil(viewport / rowHeight) + 1 + 2 * overscan);
          // Every row intersecting the viewport (scrollTop clamped as the browser clamps it) is rendered.
          const top = Math.min(scrollTop, Math.max(0, count * rowHeight - viewport));
          const firstVisible = Math.floor(top / rowHeight);
          const lastVisible = Math.min(count - 1, Math.floor((top + viewport - 1) / rowHeight));
          if (count > 0) {
            expect(r.start).toBeLessThanOrEqual(firstVisible);
            expect(r.end - 1).toBeGreaterThanOrEqual(lastVisible);
          }
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('10,000 rows at 34 px in a 520 px view: 25 + 16 overscan rows at most, wherever it is scrolled', () => {
    for (const top of [0, 170_000, 339_480, 10_000_000]) {
      const r = visibleRange({ scrollTop: top, viewport: 520, rowHeight: 34, count: 10_000 });
      expect(r.end - r.start).toBeLessThanOrEqual(41);
    }
    expect(visibleRange({ scrollTop: 10_000_000, viewport: 520, rowHeight: 34, count: 10_000 }).end).toBe(10_000);
  });
});

describe('formatting', () => {
  const now = Date.parse('2026-12-01T12:00:00Z');
  it('relative times', () => {
    expect(relativeTime(null, now)).toBe('never');
    expect(relativeTime('2026-12-01T11:59:58Z', now)).toBe('just now');
    expect(relativeTime('2026-12-01T11:59:00Z', now)).toBe('1 min ago');
    expect(relativeTime('2026-12-01T11:59:30Z', now)).toBe('30 s ago');
    expect(relativeTime('2026-12-01T09:00:00Z', now)).toBe('3 h ago');
    expect(relativeTime('2026-11-28T12:00:00Z', now)).toBe('3 d ago');
    expect(relativeTime('2026-12-01T12:05:00Z', now)).toBe('in 5 min');
    expect(relativeTime('garbage', now)).toBe('garbage');
  });
  it('countdowns, sizes, hash prefixes', () => {
    expect(countdown(300_000)).toBe('5:00');
    expect(countdown(299_001)).toBe('5:00');
    expect(countdown(61_000)).toBe('1:01');
    expect(countdown(3_723_000)).toBe('1:02:03');
    expect(countdown(-5)).toBe('0:00');
    expect(bytes(8 << 20)).toBe('8.0 MiB');
    expect(bytes(512)).toBe('512 B');
    expect(bytes(null)).toBe('');
    expect(hashPrefix('ab'.repeat(32))).toBe('abababababab');
    expect(hashPrefix(null)).toBe('');
  });
});

describe('device filter (GET /devices/page and the UI)', () => {
  const devs = [
    { mac: '52:54:00:aa:00:02', state: 'bound', bound_worker_id: 'lab-07', key_hash: 'k', fingerprint: { serial: 'SN-2', product: 'OptiPlex 7090', manufacturer: 'Dell' } },
    { mac: '52:54:00:aa:00:01', state: 'pooled', key_hash: null, fingerprint: { serial: 'SN-1', product: 'ThinkCentre', manufacturer: 'Lenovo' } },
    { mac: '00:0c:29:b9:8b:2d', state: 'revoked', fingerprint: null },
  ];
  const filterDevices = (list: typeof devs, f: DeviceFilter) => list.filter(deviceMatcher(f)).sort(byMac);
  it('searches MACs in any spelling, fingerprints and workers; filters by state and key; sorts by MAC', () => {
    expect(filterDevices(devs, {}).map((d) => d.mac)).toEqual(['00:0c:29:b9:8b:2d', '52:54:00:aa:00:01', '52:54:00:aa:00:02']);
    expect(filterDevices(devs, { q: '000C.29B9' }).map((d) => d.mac)).toEqual(['00:0c:29:b9:8b:2d']);
    expect(filterDevices(devs, { q: '52-54-00-AA-00-02' }).map((d) => d.mac)).toEqual(['52:54:00:aa:00:02']);
    expect(filterDevices(devs, { q: 'optiplex' }).map((d) => d.mac)).toEqual(['52:54:00:aa:00:02']);
    expect(filterDevices(devs, { q: 'LAB-07' }).map((d) => d.mac)).toEqual(['52:54:00:aa:00:02']);
    expect(filterDevices(devs, { q: 'sn-1' }).map((d) => d.mac)).toEqual(['52:54:00:aa:00:01']);
    expect(filterDevices(devs, { state: 'pooled' }).map((d) => d.mac)).toEqual(['52:54:00:aa:00:01']);
    expect(filterDevices(devs, { key: 'claimed' }).map((d) => d.mac)).toEqual(['52:54:00:aa:00:02']);
    expect(filterDevices(devs, { key: 'none', state: 'revoked' }).map((d) => d.mac)).toEqual(['00:0c:29:b9:8b:2d']);
    expect(filterDevices(devs, { state: 'all', key: 'any' })).toHaveLength(3);
  });
});

describe('pasted manifests', () => {
  it('CSV with and without a header, TSV, JSON; structure errors name the line', () => {
    expect(parseImport('52:54:00:00:00:01\n52:54:00:00:00:02,SN2,Box').rows).toEqual([{ mac: '52:54:00:00:00:01' }, { mac: '52:54:00:00:00:02', serial: 'SN2', product: 'Box' }]);
    expect(parseImport('mac;product\n52:54:00:00:00:01;Box\n# comment\n').rows).toEqual([{ mac: '52:54:00:00:00:01', product: 'Box' }]);
    expect(parsePairs('mac\tworker_id\n52:54:00:00:00:01\tw1').rows).toEqual([{ mac: '52:54:00:00:00:01', worker_id: 'w1' }]);
    expect(parsePairs('[{"mac":"m1","worker_id":"w1","serial":"S"}]').rows).toEqual([{ mac: 'm1', worker_id: 'w1', serial: 'S' }]);
    expect(parsePairs('{"pairs":[{"mac":"m1","worker_id":"w1"}]}').rows).toHaveLength(1);
    expect(parsePairs('m1\nm2,w2').errors).toEqual([{ line: 1, message: 'line 1: worker_id missing' }]);
    expect(parsePairs('mac,worker_id,color\nm1,w1,red').errors[0].message).toContain('unknown column(s) color');
    expect(parsePairs('[{"mac":"m1"}]').errors[0].message).toBe('item 1: worker_id missing');
    expect(parsePairs('[1').errors[0].message).toMatch(/^not valid JSON/);
    expect(parseImport('m1,a,b,c,d,e,f').errors[0].message).toContain('7 cells');
    expect(parseImport('  ').rows).toEqual([]);
  });
});

describe('batch disk plan', () => {
  const dry = {
    succeeded: [
      { worker_id: 'w1', agent: 'a', iqn: 'i1' },
      { worker_id: 'w2', agent: 'b', iqn: 'i2' },
    ],
    skipped: [{ worker_id: 'w3', reason: 'already has an ubuntu disk' }],
    failed: [{ worker_id: 'w4', agent: null, error: 'no agent holds the master' }],
  };
  it('rows in the picked order; execution pins each row to the agent shown, overrides win, "" skips', () => {
    const rows = planRows(['w4', 'w3', 'w2', 'w1', 'w5'], dry);
    expect(rows.map((r) => [r.worker_id, r.status, r.agent])).toEqual([
      ['w4', 'failed', null],
      ['w3', 'skipped', null],
      ['w2', 'planned', 'b'],
      ['w1', 'planned', 'a'],
      ['w5', 'failed', null],
    ]);
    expect(executeTargets(rows, {})).toEqual([
      { worker_id: 'w2', agent: 'b' },
      { worker_id: 'w1', agent: 'a' },
    ]);
    expect(executeTargets(rows, { w1: '', w4: 'c' })).toEqual([
      { worker_id: 'w4', agent: 'c' },
      { worker_id: 'w2', agent: 'b' },
    ]);
    expect(planLoad(rows, { w2: 'a' })).toEqual({ a: 2 });
  });
});

describe('live status and the registration window', () => {
  it('highlights every difference between the ledger and what is actually there', () => {
    const worker = {
      worker_id: 'w1',
      hostname: 'w1',
      bound_device: '52:54:00:00:00:01',
      disks: [
        { os: 'windows', agent: 'a', iqn: 'iqn.x:w1.windows' },
        { os: 'ubuntu', agent: 'b', iqn: 'iqn.x:w1.ubuntu' },
      ],
      cd: null,
    };
    const rows = statusRows(worker, {
      dnsmasq: { mac: '52:54:00:00:00:01', hostname: 'w1' },
      disks: [
        { os: 'windows', exists: true, target: { iqn: 'iqn.x:w1.windows', luns: [{}] } },
        { os: 'ubuntu', exists: false, target: null },
      ],
      cd: null,
    });
    expect(rows.map((r) => [r.item, r.ok])).toEqual([
      ['dnsmasq', true],
      ['disk windows', true],
      ['disk ubuntu', false],
    ]);
    const drift = statusRows(worker, { dnsmasq: null, disks: [{ os: 'windows', exists: true, error: 'agent a unreachable', target: null }], cd: null });
    expect(drift.map((r) => [r.item, r.ok, r.actual])).toEqual([
      ['dnsmasq', false, 'no binding'],
      ['disk windows', false, 'agent a unreachable'],
      ['disk ubuntu', false, 'not checked'],
    ]);
  });

  it('the window is open only while time and seats remain, whatever the last poll said', () => {
    const now = Date.parse('2026-12-01T12:00:00Z');
    const w = { open: true, expires_at: '2026-12-01T12:04:00Z', max_devices: 5, admitted: 2, remaining: 3 };
    expect(windowView(w, now)).toEqual({ open: true, msLeft: 240_000, seatsLeft: 3, label: 'open' });
    expect(windowView(w, now + 300_000)).toMatchObject({ open: false, msLeft: 0, label: 'expired' });
    expect(windowView({ ...w, remaining: 0 }, now)).toMatchObject({ open: false, label: 'full' });
    expect(windowView({ ...w, open: false }, now)).toMatchObject({ open: false, label: 'closed' });
    expect(windowView({ open: true, expires_at: '2026-12-01T12:04:00Z', remaining: null }, now)).toMatchObject({ open: true, seatsLeft: null });
    expect(windowView(null, now).label).toBe('unknown');
  });
});

describe('nextStep: what an operator can do about a failed request', () => {
  it('names the agent and what it did for agent failures, and says nothing changed', () => {
    expect(nextStep(503, { agent: 'stgt-01', error: 'connect ECONNREFUSED 10.0.0.3:4840' })).toBe(
      'The storage agent stgt-01 refused the connection (is it running?). Check it on the Agents page (base URL, token, its service), then try again; nothing was changed here.',
    );
    expect(nextStep(503, { agent: 'a', error: 'timeout after 3000 ms' })).toMatch(/^The storage agent a did not answer in time\./);
    expect(nextStep(502, { agent: 'a', error: 'HTTP 500' })).toMatch(/^The storage agent a failed\./);
  });

  it('covers the control plane itself: unreachable, storage unavailable or full, conflicts; none for plain 4xx', () => {
    expect(nextStep(0)).toMatch(/did not answer/);
    expect(nextStep(503)).toMatch(/cannot write its state/);
    expect(nextStep(507)).toMatch(/state disk is full/);
    expect(nextStep(409)).toMatch(/^This conflicts/);
    expect(nextStep(400)).toBeNull();
    expect(nextStep(404)).toBeNull();
  });
});

describe('handover: what keeps a disk once the OS runs (docs/KERNEL-STAGE.md)', () => {
  it('names the EFI variable for NVMe/TCP disks and the iBFT for iSCSI ones (also a record from before transports)', () => {
    expect(handover('nvme-tcp')).toBe('kernel stage: KurrentNvmeBoot EFI variable from iPXE (UEFI)');
    expect([handover('iscsi'), handover(null), handover(undefined)]).toEqual(Array(3).fill('kernel stage: iBFT from iPXE'));
  });
});
