import { HttpAdapterHost } from '@nestjs/core';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Serving } from '../../src/control-plane/common/serving';
import { until } from '../helpers/poll';

describe('Serving: work that waits until the server listens', () => {
  const hostOf = (server: http.Server | undefined) => ({ httpAdapter: server && { getHttpServer: () => server } }) as unknown as HttpAdapterHost;

  it('runs after listen, not before; once listening, on the next turn', async () => {
    const server = http.createServer();
    const serving = new Serving(hostOf(server));
    const ran: string[] = [];
    serving.whenListening(() => ran.push('early'));
    // Nothing runs while the server only exists (what an init-only app is).
    await new Promise((r) => setImmediate(r));
    expect(ran).toEqual([]);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      expect((server.address() as AddressInfo).port).toBeGreaterThan(0);
      expect(await until(async () => ran.length === 1, 5000)).toBe(true);
      serving.whenListening(() => ran.push('late'));
      expect(ran).toEqual(['early']); // not inside the call
      expect(await until(async () => ran.length === 2, 5000)).toBe(true);
      expect(ran).toEqual(['early', 'late']);
    } finally {
      await new Promise((r) => server.close(r));
    }
  });

  it('without an HTTP server, nothing runs (the work is done on demand instead)', async () => {
    const ran: string[] = [];
    new Serving(hostOf(undefined)).whenListening(() => ran.push('x'));
    await new Promise((r) => setImmediate(r));
    expect(ran).toEqual([]);
  });
});
