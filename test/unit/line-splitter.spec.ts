import { LineSplitter } from '../../src/shared/files/line-splitter';

/** The lines a splitter emits for `text` cut into chunks at `cuts` (byte offsets). */
function split(text: string, cuts: number[]): string[] {
  const bytes = Buffer.from(text);
  const out: string[] = [];
  const s = new LineSplitter((l) => out.push(l));
  // One reused buffer, as FileSystem.readChunksSync hands them: what the splitter keeps must be copied.
  const reused = Buffer.alloc(bytes.length);
  let at = 0;
  for (const c of [...cuts, bytes.length]) {
    const n = bytes.copy(reused, 0, at, c);
    s.push(reused.subarray(0, n));
    reused.fill(0x7e);
    at = c;
  }
  s.end();
  return out;
}

describe('LineSplitter', () => {
  const text = '# header\nworkers:\n  "a": {"os":"Débian ✓ 𝄞"}\r\n\n  "b": {"x":"' + 'y'.repeat(300) + '"}\nlast line without newline ü';
  const want = text.split('\n');

  it('gives the lines text.split gives, wherever the chunks are cut (inside multi-byte characters and long lines too)', () => {
    const len = Buffer.byteLength(text);
    for (let a = 0; a <= len; a += 3) {
      for (const b of [a + 1, a + 2, a + 7, a + 61]) expect(split(text, b < len ? [a, b] : [a])).toEqual(want);
    }
    for (let i = 1; i < len; i++) expect(split(text, [i])).toEqual(want);
  });

  it('a text ending with a newline has no empty last line; an empty text has no lines', () => {
    expect(split('a\nb\n', [1])).toEqual(['a', 'b']);
    expect(split('', [])).toEqual([]);
    expect(split('\n\n', [1])).toEqual(['', '']);
  });
});
