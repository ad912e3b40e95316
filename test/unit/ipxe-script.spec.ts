import fc from 'fast-check';
import { isIPv4 } from 'node:net';
import { REFUSED_SCRIPT, renderBlocked, renderIpxe, ScriptRefused } from '../../src/control-plane/boot/ipxe-script';
import { cleanReportString, GRAMMARS, GrammarName, isDeviceMac, normalizeAddress, REPORT_FIELD_MAX } from '../../src/shared/grammars';

const VARS: [string, GrammarName][] = [
  ['base-iqn', 'target-base'],
  ['iscsi-server', 'address'],
  ['iscsi-sep', 'iscsi-sep'],
  ['menu-default', 'menu-name'],
  ['menu-timeout', 'number'],
  ['nonce', 'hex64'],
  ['disk-nqn', 'nqn'],
  ['hostnqn', 'nqn'],
  ['tls-psk', 'tls-psk'],
  ['dhchap-secret', 'dhchap-secret'],
  ['menu-0-label', 'menu-label'],
  ['menu-0-root', 'root-path'],
];

/** Strings an attacker would try: any Unicode, plus fragments of iPXE syntax and line breaks. */
const hostile = fc.oneof(
  fc.string({ unit: 'grapheme', maxLength: 80 }),
  fc.string({ unit: 'binary', maxLength: 80 }),
  fc
    .array(fc.constantFrom('10.0.0.1', 'iqn.2026-07.com.x', 'nqn.2026-07.com.x:', 'nvme://', 'iscsi:', 'NVMeTLSkey-1:01:', '\n', '\r', ' ', '||', '&&', '#', '${net0/ip}', '${', '}', 'chain http://x/', ';', ':::1:', '\u2028', '\t', '0'), {
      maxLength: 8,
    })
    .map((a) => a.join('')),
);

/**
 * What a rendered line may look like: the shebang, a one-line comment, or `set <name> <value>`
 * where the value never holds `$`, `{`, `}` (iPXE expands settings again after expanding one) or a
 * character iPXE would read as syntax; only menu labels have spaces.
 */
const LINE = /^(?:#!ipxe|# [\x20-\x7e]*|set [a-z][a-z0-9-]* [A-Za-z0-9.:[\]_/+=() -]+)$/;

describe('the iPXE renderer (property-based)', () => {
  it('no generated value ever produces a line outside `set <name> <value>`: it renders safely or refuses', () => {
    fc.assert(
      fc.property(fc.subarray(VARS, { minLength: 1 }), fc.array(hostile, { minLength: VARS.length, maxLength: VARS.length }), hostile, (vars, values, label) => {
        const list = vars.map(([name, grammar], i) => ({ name, grammar, value: values[i] }));
        let text: string;
        try {
          text = renderIpxe(`boot vars for ${label}`, list);
        } catch (e) {
          expect(e).toBeInstanceOf(ScriptRefused);
          return;
        }
        const lines = text.split('\n');
        expect(lines.pop()).toBe('');
        expect(lines).toHaveLength(list.length + 2);
        for (const l of lines) expect(l).toMatch(LINE);
        list.forEach((v, i) => expect(lines[i + 2]).toBe(`set ${v.name} ${v.value}`));
      }),
      { numRuns: 3000 },
    );
  });

  it('refuses addresses no initiator can connect to: unspecified, broadcast, multicast, reserved', () => {
    const notUnicast = fc.oneof(
      fc.tuple(fc.constant(0), fc.nat(255), fc.nat(255), fc.nat(255)),
      fc.tuple(fc.integer({ min: 224, max: 255 }), fc.nat(255), fc.nat(255), fc.nat(255)),
    );
    fc.assert(
      fc.property(notUnicast, (o) => {
        expect(() => renderIpxe('x', [{ name: 'iscsi-server', grammar: 'address', value: o.join('.') }])).toThrow(ScriptRefused);
      }),
      { numRuns: 500 },
    );
    for (const v of ['[::]', '[ff02::1]', '[0:0:0:0:0:0:0:0]']) expect(() => renderIpxe('x', [{ name: 'iscsi-server', grammar: 'address', value: v }])).toThrow(ScriptRefused);
    for (const v of ['iqn.2026-13.com.x', 'iqn.2026-00.com.x', 'iqn.1969-12.com.x']) expect(() => renderIpxe('x', [{ name: 'base-iqn', grammar: 'target-base', value: v }])).toThrow(ScriptRefused);
  });

  it('accepts every well-formed value of each grammar', () => {
    // Unicast: an initiator can connect to it (0.0.0.0/8, multicast and above are refused below).
    const ipv4 = fc.tuple(fc.integer({ min: 1, max: 223 }), fc.nat(255), fc.nat(255), fc.nat(255)).map((o) => o.join('.'));
    const label = fc.stringMatching(/^[a-z0-9](?:[a-z0-9-]{0,10}[a-z0-9])?$/);
    const dns = fc.array(label, { minLength: 1, maxLength: 4 }).map((l) => [...l, 'example'].join('.'));
    const iqn = fc.tuple(fc.integer({ min: 2000, max: 2099 }), fc.integer({ min: 1, max: 12 }), dns).map(([y, m, d]) => `iqn.${y}-${String(m).padStart(2, '0')}.${d}`);
    fc.assert(
      fc.property(ipv4, dns, iqn, fc.nat(), fc.stringMatching(/^[0-9a-f]{64}$/), (ip, host, base, n, hex) => {
        expect(renderIpxe('boot vars for w1', [
          { name: 'iscsi-server', grammar: 'address', value: ip },
          { name: 'iscsi-server', grammar: 'address', value: host },
          { name: 'base-iqn', grammar: 'target-base', value: base },
          { name: 'menu-timeout', grammar: 'number', value: n },
          { name: 'nonce', grammar: 'hex64', value: hex },
        ])).toContain(`set base-iqn ${base}\n`);
      }),
    );
    expect(GRAMMARS.address('[fd00::3]')).toBe(true);
    expect(GRAMMARS.address('fd00::3')).toBe(false); // must be bracketed in a URI
    expect(normalizeAddress('FD00::3')).toBe('[fd00::3]');
    for (const bad of ['10.9.9.9\nchain x', 'ì', '__main__', '999.1.1.1', '10.0.0.1:3260', '-a.example', 'a..b', '']) {
      expect(GRAMMARS.address(bad)).toBe(false);
    }
    expect(['::::', ':::1:'].every(GRAMMARS['iscsi-sep'])).toBe(true);
    // NVMe/TCP and menu values (seed 004): what /boot-vars and /boot-menu send, and what they refuse.
    expect(GRAMMARS.nqn('nqn.2026-07.com.controller:w1.3f2a9c1b7d4e')).toBe(true);
    expect(GRAMMARS.nqn('nqn.2014-08.org.nvmexpress:uuid:5b8f1d2c-1111-2222-3333-444455556666')).toBe(true);
    expect(GRAMMARS['tls-psk']('NVMeTLSkey-1:01:nAqgGFD9wOUa9NfTGWiP5c4scW6J+VEh3D+0DypRaf7rWRas:')).toBe(true);
    expect(GRAMMARS['menu-label']('ubuntu 22.04 (nvme 3f2a9c1b7d4e)')).toBe(true);
    expect(GRAMMARS['root-path']('iscsi:10.0.2.2:::1:iqn.2026-07.com.controller:seat-01.ubuntu')).toBe(true);
    expect(GRAMMARS['root-path']('iscsi:[fd00::3]::::iqn.2026-07.com.controller:seat-01.ubuntu')).toBe(true);
    expect(GRAMMARS['root-path']('nvme://192.168.80.3:4421/nqn.2026-07.com.controller:w1.3f2a9c1b7d4e')).toBe(true);
    for (const bad of ['nvme://192.168.80.3:4421/nqn.x:${evil}', 'nvme://a b:4421/nqn.2026-07.c:x', 'nvme://1.2.3.4:70000/nqn.2026-07.c:x', 'iscsi:1.2.3.4:::1:iqn.2026-07.c:x\nchain x', 'http://x/']) {
      expect(GRAMMARS['root-path'](bad)).toBe(false);
    }
    for (const bad of ['ubuntu ${x}', 'a\nb', 'x{y}', ' lead']) expect(GRAMMARS['menu-label'](bad)).toBe(false);
    for (const bad of ['NVMeTLSkey-1:01:${x}:', 'NVMeTLSkey-1:03:AAAA:', 'DHHC-1:00:AAAA:']) expect(GRAMMARS['tls-psk'](bad)).toBe(false);
    expect(GRAMMARS['dhchap-secret']('DHHC-1:00:nAqgGFD9wOUa9NfTGWiP5c4scW6J+VEh3D+0DypRaf7rWRas:')).toBe(true);
    for (const bad of ['DHHC-1:00:${x}:', 'DHHC-1:04:nAqgGFD9wOUa9NfTGWiP5c4scW6J+VEh3D+0DypRaf7rWRas:', 'DHHC-1:00:AAAA:', 'NVMeTLSkey-1:01:nAqgGFD9wOUa9NfTGWiP5c4scW6J+VEh3D+0DypRaf7rWRas:']) {
      expect(GRAMMARS['dhchap-secret'](bad)).toBe(false);
    }
  });

  it('a refusal is the inert script, never a partial one', () => {
    expect(() => renderIpxe('ok', [{ name: 'menu-default', grammar: 'menu-name', value: 'ubuntu\nchain http://x/' }])).toThrow(ScriptRefused);
    expect(REFUSED_SCRIPT).toMatch(/^#!ipxe\n# [^\n]*\n$/);
  });

  it('a blocked default disk: no variable, the reason on the console, nothing iPXE would expand or run', () => {
    const s = renderBlocked("the worker's key ${evil}\nsanboot nvme://x/ && shell");
    expect(s.startsWith('#!ipxe\n# no per-worker boot vars found\n')).toBe(true);
    expect(s.split('\n').filter((l) => l.startsWith('echo Kurrent:'))).toEqual(["echo Kurrent: the default disk does not boot now: the worker's key   evil  sanboot nvme://x/    shell"]);
    expect(s).not.toMatch(/\$\{evil|&&/);
    expect(s.split('\n').filter((l) => /^(set|chain|imgfetch|sanboot|shell)\b/.test(l))).toEqual([]);
    expect(s.endsWith('Press any key for the menu ||\n')).toBe(true);
  });
});

describe('stored strings and MACs (property-based)', () => {
  it('report strings keep no control, format or astral characters and are capped', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 400 }), (raw) => {
        const s = cleanReportString(raw);
        expect(s.length).toBeLessThanOrEqual(REPORT_FIELD_MAX);
        expect(s).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u2028\u2029\p{Cf}\u{10000}-\u{10ffff}]|[\ud800-\udfff]/u);
        expect(s).toBe(s.trim());
      }),
      { numRuns: 2000 },
    );
    expect(cleanReportString('ASUSTeK COMPUTER INC.')).toBe('ASUSTeK COMPUTER INC.');
  });

  it('a device MAC is unicast and not all zero', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 6, maxLength: 6 }), (b) => {
        const mac = [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
        expect(isDeviceMac(mac)).toBe((b[0] & 1) === 0 && b.some((x) => x !== 0));
      }),
    );
    expect(isIPv4('10.0.0.1')).toBe(true);
  });
});
