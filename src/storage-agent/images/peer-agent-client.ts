import { Injectable } from '@nestjs/common';
import type { MasterExtentsDto } from '../../shared/agent-contract/transfers.dto';
import { TRANSFER_TICKET_HEADER } from '../../shared/transfer-ticket';

/** Another agent, as the control plane named it for one transfer, with a read ticket for that version (held in memory only). */
export interface PeerAgent {
  url: string;
  ticket: string;
}

/** The peer answered with an error, or could not be reached: the message says which and why. */
export class PeerError extends Error {
  constructor(
    message: string,
    readonly status: number | null,
  ) {
    super(message);
  }
}

/** The agent's one outbound HTTP client: reads a version from another agent (GET only). */
@Injectable()
export class PeerAgentClient {
  extents(peer: PeerAgent, name: string, version: number, signal: AbortSignal): Promise<MasterExtentsDto> {
    return this.get(peer, `/masters/${encodeURIComponent(name)}/versions/${version}/extents`, signal, 30_000).then(async (res) => (await res.json()) as MasterExtentsDto);
  }

  /** Exactly `length` bytes from `offset`, else a PeerError. */
  async content(peer: PeerAgent, name: string, version: number, offset: number, length: number, signal: AbortSignal): Promise<Buffer> {
    const res = await this.get(peer, `/masters/${encodeURIComponent(name)}/versions/${version}/content?offset=${offset}&length=${length}`, signal, 120_000);
    const buf = Buffer.from(await res.arrayBuffer());
    if (buf.length !== length) throw new PeerError(`short read from ${peer.url}: ${buf.length} of ${length} bytes at ${offset}`, null);
    return buf;
  }

  private async get(peer: PeerAgent, path: string, signal: AbortSignal, timeoutMs: number): Promise<Response> {
    let res: Response;
    try {
      res = await fetch(peer.url + path, {
        headers: peer.ticket ? { [TRANSFER_TICKET_HEADER]: peer.ticket } : {},
        signal: AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]),
      });
    } catch (e) {
      const err = e as Error & { cause?: { code?: string; message?: string } };
      if (signal.aborted) throw new PeerError('stopped', null);
      const detail = err.name === 'TimeoutError' ? `timeout after ${timeoutMs} ms` : (err.cause?.code ?? err.cause?.message ?? err.message);
      throw new PeerError(`${peer.url} unreachable: ${detail}`, null);
    }
    if (!res.ok) {
      const text = await res.text().catch(() => '');
      let detail = text.slice(0, 300);
      try {
        detail = String((JSON.parse(text) as { message?: unknown }).message ?? detail);
      } catch {
        // not JSON: the text as it is
      }
      throw new PeerError(`${peer.url} answered ${res.status}: ${detail}`, res.status);
    }
    return res;
  }
}
