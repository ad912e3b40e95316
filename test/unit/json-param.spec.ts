import { jsonParam } from '../../src/control-plane/repositories/pg/database';

const back = (v: unknown) => JSON.parse(jsonParam(v).toString('utf8')) as unknown;

describe('jsonParam: one JSON parameter PostgreSQL takes whatever the strings hold', () => {
  it('turns a NUL and an unpaired surrogate into U+FFFD, which PostgreSQL would refuse for the whole batch', () => {
    expect(back([{ a: 'x\u0000y', b: 'p\ud800q', c: 'r\udfffs', d: 'end\udbff' }])).toEqual([{ a: 'x\ufffdy', b: 'p\ufffdq', c: 'r\ufffds', d: 'end\ufffd' }]);
    expect(jsonParam('\ud800').toString('utf8')).toBe('"\\ufffd"');
  });

  it('leaves text that only looks like such an escape, and everything else, as it was', () => {
    const kept = ['\\u0000', '\\\\ud800', 'a\\ud800b', 'pair \ud83d\ude00', 'quote " and \\ backslash', 'Zoë', '\u0001 tab\t'];
    expect(back(kept)).toEqual(kept);
    // An escaped backslash right before a real NUL: the backslash stays, the NUL goes.
    expect(back(['\\\u0000', '\\\\\ud800'])).toEqual(['\\\ufffd', '\\\\\ufffd']);
  });
});
