import { tcpBytesSentFrom } from '../helpers/pcap';

/** A pcap (little-endian, Ethernet) of IPv4/TCP segments, as qemu's filter-dump writes it. */
function pcap(segments: { src: number; dst: number; seq: number; flags: number; payload: number }[], cutLast = 0): Buffer {
  const head = Buffer.alloc(24);
  head.writeUInt32LE(0xa1b2c3d4, 0);
  head.writeUInt16LE(2, 4);
  head.writeUInt16LE(4, 6);
  head.writeUInt32LE(65536, 16);
  head.writeUInt32LE(1, 20);
  const records = segments.map((s) => {
    const frame = Buffer.alloc(14 + 20 + 20 + s.payload);
    frame.writeUInt16BE(0x0800, 12);
    frame[14] = 0x45;
    frame.writeUInt16BE(20 + 20 + s.payload, 16);
    frame[14 + 9] = 6;
    frame.writeUInt16BE(s.src, 34);
    frame.writeUInt16BE(s.dst, 36);
    frame.writeUInt32BE(s.seq >>> 0, 38);
    frame[34 + 12] = 5 << 4;
    frame[34 + 13] = s.flags;
    const rec = Buffer.alloc(16);
    rec.writeUInt32LE(frame.length, 8);
    rec.writeUInt32LE(frame.length, 12);
    return Buffer.concat([rec, frame]);
  });
  const all = Buffer.concat([head, ...records]);
  return all.subarray(0, all.length - cutLast);
}

const SYN_ACK = 0x12;
const ACK = 0x10;

describe('tcpBytesSentFrom (the NVMe/TCP boot test\'s byte count)', () => {
  it('counts each connection\'s stream once: retransmissions not twice, other ports not at all, a reused peer port as a new connection', () => {
    const isn = 0xfffffff0; // the sequence numbers wrap inside the stream
    const b = pcap([
      { src: 4420, dst: 50000, seq: isn, flags: SYN_ACK, payload: 0 },
      { src: 50000, dst: 4420, seq: 7, flags: ACK, payload: 300 }, // the worker's own bytes
      { src: 4420, dst: 50000, seq: isn + 1, flags: ACK, payload: 1000 },
      { src: 4420, dst: 50000, seq: isn + 1001, flags: ACK, payload: 1000 },
      { src: 4420, dst: 50000, seq: isn + 1001, flags: ACK, payload: 1000 }, // retransmitted
      { src: 8080, dst: 50001, seq: 5, flags: ACK, payload: 9000 }, // another service
      { src: 4420, dst: 50002, seq: 100, flags: SYN_ACK, payload: 0 },
      { src: 4420, dst: 50002, seq: 101, flags: ACK, payload: 500 },
      { src: 4420, dst: 50000, seq: 9000, flags: SYN_ACK, payload: 0 }, // port 50000 again, a new connection
      { src: 4420, dst: 50000, seq: 9001, flags: ACK, payload: 70 },
    ]);
    expect(tcpBytesSentFrom(b, 4420)).toEqual({ bytes: 2000 + 500 + 70, connections: 3 });
    expect(tcpBytesSentFrom(b, 50000)).toEqual({ bytes: 0, connections: 0 }); // no SYN-ACK from that side
  });

  it('ignores a record cut off by a killed writer, and refuses what is not an Ethernet pcap', () => {
    const segs = [
      { src: 4420, dst: 50000, seq: 1, flags: SYN_ACK, payload: 0 },
      { src: 4420, dst: 50000, seq: 2, flags: ACK, payload: 100 },
      { src: 4420, dst: 50000, seq: 102, flags: ACK, payload: 100 },
    ];
    expect(tcpBytesSentFrom(pcap(segs), 4420).bytes).toBe(200);
    expect(tcpBytesSentFrom(pcap(segs, 10), 4420).bytes).toBe(100);
    expect(() => tcpBytesSentFrom(Buffer.alloc(24, 1), 4420)).toThrow('not a pcap file');
  });
});
