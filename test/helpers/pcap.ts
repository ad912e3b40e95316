import * as fs from 'node:fs';

/**
 * The TCP stream bytes one port sent, read from a pcap of Ethernet frames (what qemu's
 * `filter-dump` writes for a worker's NIC). Counted per connection as the highest sequence
 * number reached past the SYN, so a retransmission is not counted twice and a connection that
 * closed early still counts (sampling `ss` missed both: what a closed socket received is gone).
 * A record cut off at the end (the writer killed mid-write) is ignored.
 */
export function tcpBytesSentFrom(pcap: string | Buffer, srcPort: number): { bytes: number; connections: number } {
  const b = typeof pcap === 'string' ? fs.readFileSync(pcap) : pcap;
  if (b.length < 24) return { bytes: 0, connections: 0 };
  const magic = b.readUInt32LE(0);
  const le = magic === 0xa1b2c3d4 || magic === 0xa1b23c4d;
  if (!le && b.readUInt32BE(0) !== 0xa1b2c3d4 && b.readUInt32BE(0) !== 0xa1b23c4d) throw new Error('not a pcap file');
  const u32 = (o: number) => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
  if (u32(20) !== 1) throw new Error(`pcap link type ${u32(20)}, not Ethernet`);
  /** Per connection (keyed by the peer's port): the sequence number of the SYN and the furthest byte seen. */
  const streams = new Map<number, { isn: number; end: number }>();
  const closed: number[] = [];
  for (let o = 24; o + 16 <= b.length; ) {
    const len = u32(o + 8);
    const frame = o + 16;
    o = frame + len;
    if (o > b.length) break;
    if (len < 14 + 20 || b.readUInt16BE(frame + 12) !== 0x0800) continue;
    const ip = frame + 14;
    const ihl = (b[ip] & 0x0f) * 4;
    if (b[ip + 9] !== 6 || len < 14 + ihl + 20) continue;
    const tcp = ip + ihl;
    if (b.readUInt16BE(tcp) !== srcPort) continue;
    const peer = b.readUInt16BE(tcp + 2);
    const seq = b.readUInt32BE(tcp + 4);
    const flags = b[tcp + 13];
    const payload = b.readUInt16BE(ip + 2) - ihl - (b[tcp + 12] >> 4) * 4;
    if (flags & 0x02) {
      // A SYN-ACK starts a connection; a port reused by a later one keeps what the earlier one sent.
      const earlier = streams.get(peer);
      if (earlier && earlier.isn !== seq) closed.push(earlier.end);
      if (!earlier || earlier.isn !== seq) streams.set(peer, { isn: seq, end: 0 });
      continue;
    }
    const s = streams.get(peer);
    if (!s || payload <= 0) continue;
    s.end = Math.max(s.end, ((seq - s.isn - 1) >>> 0) + payload);
  }
  let bytes = closed.reduce((a, n) => a + n, 0);
  for (const s of streams.values()) bytes += s.end;
  return { bytes, connections: closed.length + streams.size };
}
