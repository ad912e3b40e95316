const TEXT = 'text/plain; charset=utf-8';
const JSON_TYPE = 'application/json; charset=utf-8';

/** An HTTP Date value (IMF-fixdate, `Date.prototype.toUTCString`) is always this long. */
const DATE_LENGTH = 29;

/** A whole response as the boot front builds it, and where its Date value starts. */
export interface BuiltResponse {
  bytes: Buffer;
  dateAt: number;
}

/**
 * A boot answer encoded once: its bytes and the response headers that go with them, as the flat
 * list `writeHead` takes. The answer cache keeps these, so a cache hit neither serialises nor
 * encodes nor builds a header object (bench:boot-path: bytes allocated per request).
 */
export class EncodedAnswer {
  /** Header name, value, name, value...: boot answers are never to be cached by a client. */
  readonly headers: readonly string[];

  private constructor(
    bytes: Buffer,
    readonly contentType: string,
  ) {
    this.body = bytes;
    this.headers = ['cache-control', 'no-store', 'content-type', contentType, 'content-length', String(bytes.length)];
  }

  private body: Buffer;
  /** The answer's bytes (once the boot front built its response, a view of that response's tail: kept once). */
  get bytes(): Buffer {
    return this.body;
  }

  /** The first whole response built (200, keep-alive), kept: later seconds copy it and write their Date into the copy. */
  private template: Buffer | null = null;
  private templateDateAt = 0;
  private templateKeepAlive = -1;
  private wireDate = '';
  private wireBytes: Buffer | null = null;

  /**
   * The whole HTTP/1.1 response of this answer (200, keep-alive) as the boot front writes it, or
   * null when the front must build it first (`keep`): the same bytes again within a second; in a
   * new second a copy of the first one built with the new Date written in (no string building,
   * encoding or closure per request; bench:boot-path counts bytes per request). A Buffer handed
   * out is never changed, so one may be queued on many sockets, or be half written, while a newer
   * second is served.
   */
  wire(date: string, keepAliveSeconds: number): Buffer | null {
    if (this.templateKeepAlive !== keepAliveSeconds) return null;
    if (this.wireBytes !== null && this.wireDate === date) return this.wireBytes;
    if (this.template === null || date.length !== DATE_LENGTH) return null;
    const out = Buffer.allocUnsafe(this.template.length);
    this.template.copy(out);
    out.write(date, this.templateDateAt, DATE_LENGTH, 'latin1');
    return this.served(out, date);
  }

  /** Keeps the response the front built for `date` as this answer's template, and returns its bytes. */
  keep(built: BuiltResponse, date: string, keepAliveSeconds: number): Buffer {
    // A memory of its own: a small Buffer is a slice of a shared 8 KB pool slab, and a cached answer
    // would keep its whole slab (other requests' garbage) alive: ~60 MB after a 100,000-seat storm.
    this.template = Buffer.allocUnsafeSlow(built.bytes.length);
    built.bytes.copy(this.template);
    this.templateDateAt = built.dateAt;
    this.templateKeepAlive = keepAliveSeconds;
    // The body lives on as the template's tail instead of twice.
    this.body = this.template.subarray(this.template.length - this.body.length);
    return this.served(this.template, date);
  }

  private served(out: Buffer, date: string): Buffer {
    this.wireBytes = out;
    this.wireDate = date;
    builtIn(date, this);
    return out;
  }

  /** Lets go of the response built for a second that is over (the template stays). */
  dropWire(): void {
    this.wireBytes = null;
  }

  /** A string goes out as text/plain (an iPXE script), an object as JSON. */
  static of(body: string | object): EncodedAnswer {
    return typeof body === 'string' ? new EncodedAnswer(Buffer.from(body, 'utf8'), TEXT) : new EncodedAnswer(Buffer.from(JSON.stringify(body), 'utf8'), JSON_TYPE);
  }
}

/**
 * The answers whose response was served in the current second: when the second changes, they let
 * go of that second's copy (the template stays: its head, ~200 bytes, is all an answer keeps
 * beyond its body). A storm asks each seat's own answer once, and without this every one of
 * 100,000 answers kept a second copy of its response until its next boot (bench:scale, RSS after
 * a storm).
 */
let builtSecond = '';
let built: EncodedAnswer[] = [];

function builtIn(date: string, answer: EncodedAnswer): void {
  if (date !== builtSecond) {
    for (const a of built) if (a !== answer) a.dropWire();
    built = [];
    builtSecond = date;
  }
  built.push(answer);
}
