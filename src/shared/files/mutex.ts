/** A FIFO async lock: the one write lock every ledger mutation runs under. */
export class Mutex {
  private tail: Promise<void> = Promise.resolve();
  private depth = 0;

  get busy(): boolean {
    return this.depth > 0;
  }

  run<T>(fn: () => Promise<T> | T): Promise<T> {
    this.depth++;
    const result = this.tail.then(fn);
    this.tail = result.then(
      () => {
        this.depth--;
      },
      () => {
        this.depth--;
      },
    );
    return result;
  }
}
