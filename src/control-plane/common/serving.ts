import { Injectable } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import type { Server } from 'node:net';

/**
 * Work that waits until the control plane serves (its HTTP server listens): what no request needs
 * at once, kept out of the start-up's path. An app that is only initialised (the e2e tests)
 * never listens, so such work must also be done on demand by whoever needs it.
 */
@Injectable()
export class Serving {
  constructor(private readonly host: HttpAdapterHost) {}

  /** Runs fn once (not named `then`: Nest awaits providers, and a thenable never resolves), on the turn after the server starts listening (the next turn, if it already does). */
  whenListening(fn: () => void): void {
    const server = this.host.httpAdapter?.getHttpServer() as Server | undefined;
    if (!server) return;
    if (server.listening) setImmediate(fn);
    else server.once('listening', () => setImmediate(fn));
  }
}
