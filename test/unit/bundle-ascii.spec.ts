import * as vm from 'node:vm';
import { asciiOnly } from '../../scripts/bundle-options';

/** The bundle is rewritten to ASCII so V8 keeps its source as a one-byte string; the code must mean the same. */
describe('asciiOnly (scripts/bundle-options)', () => {
  const run = (code: string) => vm.runInNewContext(code) as unknown;

  it('leaves no character past ASCII, and regexes, strings and templates match what they matched before', () => {
    const code = [
      '// ÆØÅ in a comment',
      '({',
      '  de: /^[A-ZÄÖÜß]+$/i,',
      '  ja: /^[ぁ-んァ-ヶｦ-ﾟ一-龠ー・。、]+$/i,',
      '  emoji: /^[😀-😂]$/u,',
      '  pair: /^😀$/,',
      '  text: "Ünïcødé — ok",',
      '  tpl: `→${1}`,',
      '})',
    ].join('\n');
    const out = asciiOnly(code);
    expect(out).not.toMatch(/[^\x00-\x7f]/);
    const a = run(code) as Record<string, RegExp | string>;
    const b = run(out) as Record<string, RegExp | string>;
    for (const s of ['ÄÖÜ', 'äöüß', 'ABC', 'Æ', 'ひらがなカタカナ', 'abc', '😀', '😁', '😃', '😀😀', '\ud83d']) {
      for (const k of ['de', 'ja', 'emoji', 'pair']) expect([k, s, (b[k] as RegExp).test(s)]).toEqual([k, s, (a[k] as RegExp).test(s)]);
    }
    expect((b.de as RegExp).test('äöü')).toBe(true);
    expect((b.emoji as RegExp).test('😁')).toBe(true);
    expect(b.text).toBe('Ünïcødé — ok');
    expect(b.tpl).toBe('→1');
  });

  it('stops at a non-ASCII character written after a backslash (its escape would change meaning), not after an escaped backslash', () => {
    expect(() => asciiOnly('/\\Ü/')).toThrow(/escaped non-ASCII character at offset 2/);
    expect(run(asciiOnly('"\\\\Ü"'))).toBe('\\Ü');
    expect(asciiOnly('plain ascii')).toBe('plain ascii');
  });
});
