import type { StageNote } from '../boots/boot-sessions.service';
import { EncodedAnswer } from './encoded-answer';

/** A cached answer and what serving it tells the boot sessions (null: nothing, an unknown device). */
export interface CachedAnswer {
  readonly body: EncodedAnswer;
  readonly note: StageNote | null;
  /** A boot of this MAC restores reset-mode disks first: a hit must still go through DiskResetService. */
  readonly restores: boolean;
}

/** What an empty slot's fields hold (never served: get answers undefined then). */
const NO_BODY = EncodedAnswer.of('', true);

/**
 * The cached answers of one raw MAC, by raw hostname (undefined: no hostname asked). Nearly every
 * MAC is only ever asked with one name, its own: that answer lives in the slot's own fields (get
 * returns the slot itself for it), and a Map of answer objects is made from a second name on (a
 * Map per MAC was ~200 bytes a seat of the cache at 100,000 seats, an answer object 48 more).
 * Behaves as a Map of those keys for the three operations the answer cache uses; `ownsAnswerOf`
 * and `deleteOwn` let a dependency refer to the answer in the slot's fields without a name.
 */
export class AnswerSlot implements CachedAnswer {
  private held = false;
  private host: string | undefined = undefined;
  body: EncodedAnswer = NO_BODY;
  note: StageNote | null = null;
  restores = false;
  /** Every other name; a name is in one place at most. */
  private more: Map<string | undefined, CachedAnswer> | null = null;

  /**
   * The answer for host. The slot's own answer is the slot: read it before anything that may
   * change the cache (serving tells the boot sessions, whose listeners may drop answers).
   */
  get(host: string | undefined): CachedAnswer | undefined {
    return this.held && this.host === host ? this : this.more?.get(host);
  }

  set(host: string | undefined, body: EncodedAnswer, note: StageNote | null, restores: boolean): void {
    if (this.held && this.host === host) this.fill(body, note, restores);
    else if (this.more?.has(host)) this.more.set(host, { body, note, restores });
    else if (!this.held) {
      this.held = true;
      this.host = host;
      this.fill(body, note, restores);
    } else (this.more ??= new Map()).set(host, { body, note, restores });
  }

  /** True when there was an answer for host. */
  delete(host: string | undefined): boolean {
    if (this.held && this.host === host) return this.deleteOwn();
    return this.more?.delete(host) ?? false;
  }

  /**
   * Whether host's answer is in the slot's own fields. It stays there until deleted (a name never
   * moves between the fields and the Map while it has an answer), so a dependency may hold the
   * slot itself for it: deleteOwn then drops it, or, once it is gone, whatever answer took its
   * place (dropping more than needed costs a render, never a stale answer).
   */
  ownsAnswerOf(host: string | undefined): boolean {
    return this.held && this.host === host;
  }

  /** Drops the answer in the slot's own fields; true when there was one. */
  deleteOwn(): boolean {
    if (!this.held) return false;
    this.held = false;
    this.host = undefined;
    this.fill(NO_BODY, null, false);
    return true;
  }

  /** Drops every answer; returns how many there were. */
  clear(): number {
    const n = (this.held ? 1 : 0) + (this.more?.size ?? 0);
    this.deleteOwn();
    this.more = null;
    return n;
  }

  private fill(body: EncodedAnswer, note: StageNote | null, restores: boolean): void {
    this.body = body;
    this.note = note;
    this.restores = restores;
  }
}
