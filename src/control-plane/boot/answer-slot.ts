/**
 * The cached answers of one raw MAC, by raw hostname (undefined: no hostname asked). Nearly every
 * MAC is only ever asked with one name, its own: that one lives in two fields, and a Map is made
 * from a second name on (a Map per MAC was ~200 bytes a seat of the cache at 100,000 seats).
 * Behaves as a Map of those keys for the three operations the answer cache uses.
 */
export class AnswerSlot<E> {
  private host: string | undefined = undefined;
  private entry: E | undefined = undefined;
  /** Every other name; a name is in one place at most. */
  private more: Map<string | undefined, E> | null = null;

  get(host: string | undefined): E | undefined {
    return this.entry !== undefined && this.host === host ? this.entry : this.more?.get(host);
  }

  set(host: string | undefined, entry: E): void {
    if (this.entry !== undefined && this.host === host) this.entry = entry;
    else if (this.more?.has(host)) this.more.set(host, entry);
    else if (this.entry === undefined) {
      this.host = host;
      this.entry = entry;
    } else (this.more ??= new Map()).set(host, entry);
  }

  /** True when there was an answer for host. */
  delete(host: string | undefined): boolean {
    if (this.entry !== undefined && this.host === host) {
      this.entry = undefined;
      this.host = undefined;
      return true;
    }
    return this.more?.delete(host) ?? false;
  }
}
