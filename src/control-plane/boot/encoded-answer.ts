const TEXT = 'text/plain; charset=utf-8';
const JSON_TYPE = 'application/json; charset=utf-8';

/** An HTTP Date value (IMF-fixdate, `Date.prototype.toUTCString`) is always this long. */
export const DATE_LENGTH = 29;

/**
 * The head of a response up to its blank line, as bytes, with a Date value written at `dateAt`
 * (DATE_LENGTH bytes). The boot front shares one per status line and header values (type, length,
 * keep-alive), so an answer keeps no head of its own.
 */
export interface ResponseHead {
  bytes: Buffer;
  dateAt: number;
}

/**
 * A boot answer encoded once: its body as one flat string of known byte length. The answer cache
 * keeps these, so a cache hit neither serialises nor builds a header object. The body is kept as a
 * string rather than a Buffer: at 100,000 cached answers, a Buffer and a whole response each
 * (two Buffer objects, an ArrayBuffer and its malloc'd store, a header list) were ~1.1 KB an
 * answer; a one-byte string is its length plus 16 bytes (bench:scale, RSS after a storm).
 */
export class EncodedAnswer {
  /** The body's length in bytes (UTF-8). */
  readonly length: number;
  /** Every body character is ASCII: written as latin1, a plain copy. */
  private readonly ascii: boolean;

  private constructor(
    /** The body: a sequential string (never a rope or a slice of a larger one). */
    readonly text: string,
    readonly contentType: string,
    /** Served to many devices (see wire). */
    private readonly shared: boolean,
  ) {
    this.length = Buffer.byteLength(text);
    this.ascii = this.length === text.length;
  }

  /** The body's bytes, as a new Buffer (the paths that do not go through the boot front). */
  get bytes(): Buffer {
    return Buffer.from(this.text, this.ascii ? 'latin1' : 'utf8');
  }

  /** Header name, value, name, value... as `writeHead` takes them: boot answers are never to be cached by a client. */
  get headers(): string[] {
    return ['cache-control', 'no-store', 'content-type', this.contentType, 'content-length', String(this.length)];
  }

  /** The response built in the current second (see wire), or null. */
  private wireBytes: Buffer | null = null;
  private wireDate = '';

  /**
   * The whole response: `head` with `date` written in, then the body. Within one second the same
   * Buffer again (a flood of one answer allocates nothing), in a new second a new one; but a
   * device's own answer is kept only from its second request in that second on. A storm asks each
   * seat once: kept for the second, each of its responses outlived the young generation and was
   * promoted, and its bytes (outside the heap) waited for a full GC (bench:scale, RSS after the
   * storm: ~90 MB of them); building every one anew instead cost 7% of a flood of hits
   * (bench:boot-path). A Buffer handed out is never changed, so one may be queued on many
   * sockets, or be half written, while a newer second is served.
   */
  wire(head: ResponseHead, date: string): Buffer {
    const again = this.wireDate === date;
    if (again && this.wireBytes !== null) return this.wireBytes;
    const at = head.bytes.length;
    const out = Buffer.allocUnsafe(at + this.length);
    head.bytes.copy(out);
    out.write(date, head.dateAt, DATE_LENGTH, 'latin1');
    out.write(this.text, at, this.length, this.ascii ? 'latin1' : 'utf8');
    this.wireDate = date;
    if (!this.shared && !again) {
      // An earlier second's copy must never answer for this one.
      this.wireBytes = null;
      return out;
    }
    this.wireBytes = out;
    builtIn(date, this);
    return out;
  }

  /** Lets go of the response built for a second that is over. */
  dropWire(): void {
    this.wireBytes = null;
  }

  /** A string goes out as text/plain (an iPXE script), an object as JSON; `shared`: an answer many devices get (see wire). */
  static of(body: string | object, shared = false): EncodedAnswer {
    const text = typeof body === 'string' ? body : JSON.stringify(body);
    // A rendered script is a rope of many pieces: kept as one fresh flat string of its own.
    const bytes = Buffer.from(text, 'utf8');
    return new EncodedAnswer(bytes.length === text.length ? bytes.toString('latin1') : bytes.toString('utf8'), typeof body === 'string' ? TEXT : JSON_TYPE, shared);
  }
}

/**
 * The shared answers whose response was served in the current second: when the second changes,
 * they let go of that second's copy.
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
