const TEXT = 'text/plain; charset=utf-8';
const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * A boot answer encoded once: its bytes and the response headers that go with them, as the flat
 * list `writeHead` takes. The answer cache keeps these, so a cache hit neither serialises nor
 * encodes nor builds a header object (bench:boot-path: bytes allocated per request).
 */
export class EncodedAnswer {
  /** Header name, value, name, value...: boot answers are never to be cached by a client. */
  readonly headers: readonly string[];

  private constructor(
    readonly bytes: Buffer,
    readonly contentType: string,
  ) {
    this.headers = ['cache-control', 'no-store', 'content-type', contentType, 'content-length', String(bytes.length)];
  }

  private wireDate = '';
  private wireKeepAlive = -1;
  private wireBytes: Buffer | null = null;

  /**
   * The whole HTTP/1.1 response of this answer (200, keep-alive) as the boot front writes it: built
   * by `build` when the Date header's second (or the keep-alive timeout) changed, else the same
   * bytes again. Never changed once built, so one Buffer may be queued on many sockets.
   */
  wire(date: string, keepAliveSeconds: number, build: () => Buffer): Buffer {
    if (this.wireBytes === null || this.wireDate !== date || this.wireKeepAlive !== keepAliveSeconds) {
      this.wireBytes = build();
      this.wireDate = date;
      this.wireKeepAlive = keepAliveSeconds;
      builtIn(date, this);
    }
    return this.wireBytes;
  }

  /** Lets go of the built response (its second is over: it would only be built again). */
  dropWire(): void {
    this.wireBytes = null;
  }

  /** A string goes out as text/plain (an iPXE script), an object as JSON. */
  static of(body: string | object): EncodedAnswer {
    return typeof body === 'string' ? new EncodedAnswer(Buffer.from(body, 'utf8'), TEXT) : new EncodedAnswer(Buffer.from(JSON.stringify(body), 'utf8'), JSON_TYPE);
  }
}

/**
 * The answers whose whole response was built in the current second: when the second changes,
 * they let go of it. A storm asks each seat's own answer once, and without this every one of
 * 100,000 answers kept its last response until its next boot (bench:scale, RSS after a storm).
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
