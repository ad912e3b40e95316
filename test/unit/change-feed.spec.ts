import { ChangeFeed, CHANGE_TOPICS } from '../../src/control-plane/changes/change-feed';

describe('change feed (GET /changes)', () => {
  it('a first call, or a cursor of another process or start, answers at once with reset and every topic', async () => {
    const feed = new ChangeFeed();
    const first = await feed.next(undefined, 60_000);
    expect(first).toEqual({ cursor: `${feed.epoch}.0`, topics: [...CHANGE_TOPICS], reset: true });
    const other = new ChangeFeed();
    other.publish('ledger');
    const foreign = await feed.next((await other.next(undefined, 0)).cursor, 60_000);
    expect(foreign.reset).toBe(true);
    // A cursor ahead of this process's count is not one of its cursors either.
    expect((await feed.next(`${feed.epoch}.99`, 60_000)).reset).toBe(true);
    expect((await feed.next(`${feed.epoch}.x`, 60_000)).reset).toBe(true);
  });

  it('answers at once with the topics changed after the cursor, and only those', async () => {
    const feed = new ChangeFeed();
    const { cursor } = await feed.next(undefined, 0);
    feed.publish('boots');
    feed.publish('audit');
    feed.publish('boots');
    const a = await feed.next(cursor, 60_000);
    expect(a).toEqual({ cursor: `${feed.epoch}.3`, topics: ['audit', 'boots'], reset: false });
    feed.publish('agents');
    expect((await feed.next(a.cursor, 0)).topics).toEqual(['agents']);
    // The older cursor still sees everything after it.
    expect((await feed.next(cursor, 0)).topics).toEqual(['audit', 'boots', 'agents']);
  });

  it('waits for the first change and answers the changes of the coalescing window together', async () => {
    const feed = new ChangeFeed();
    const { cursor } = await feed.next(undefined, 0);
    let answered: string[] | null = null;
    const pending = feed.next(cursor, 60_000).then((r) => (answered = r.topics));
    await new Promise((r) => setImmediate(r));
    expect(answered).toBeNull();
    feed.publish('ledger');
    feed.publish('settings');
    await pending;
    expect(answered).toEqual(['ledger', 'settings']);
  });

  it('an empty answer with the same cursor when the wait runs out; shutdown ends every wait', async () => {
    const feed = new ChangeFeed();
    const { cursor } = await feed.next(undefined, 0);
    expect(await feed.next(cursor, 20)).toEqual({ cursor, topics: [], reset: false });
    const waiting = feed.next(cursor, 60_000);
    feed.onModuleDestroy();
    expect(await waiting).toEqual({ cursor, topics: [], reset: false });
  });
});
