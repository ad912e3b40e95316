import { randomUUID } from 'node:crypto';
import * as fs from 'node:fs';
import { crc32 } from 'node:zlib';

/**
 * A GUID Partition Table (UEFI 2.10 section 5.3) for a disk image of either logical block size.
 * Written here because sfdisk lays a table out in the block size of the device it is given, and an
 * image file is always 512: a master served by nvmet (4 KiB blocks) needs its table at byte 4096.
 */
export interface GptPartition {
  /** First block (in the disk's logical blocks). */
  start: number;
  /** Length in blocks. */
  blocks: number;
  /** Partition type GUID. */
  type: string;
  name: string;
}

const ENTRIES = 128;
const ENTRY_SIZE = 128;

/** A GUID in its on-disk form: the first three fields little-endian, the rest as written. */
function guidBytes(guid: string): Buffer {
  const hex = guid.replace(/-/g, '');
  if (!/^[0-9a-fA-F]{32}$/.test(hex)) throw new Error(`not a GUID: ${guid}`);
  const b = Buffer.from(hex, 'hex');
  return Buffer.concat([Buffer.from(b.subarray(0, 4)).reverse(), Buffer.from(b.subarray(4, 6)).reverse(), Buffer.from(b.subarray(6, 8)).reverse(), b.subarray(8)]);
}

/** Writes a protective MBR, the primary and the backup GPT into the image `file` (its size fixed already). */
export function writeGpt(file: string, blockSize: 512 | 4096, partitions: GptPartition[]): void {
  const size = fs.statSync(file).size;
  if (size % blockSize !== 0) throw new Error(`image size ${size} is not a multiple of ${blockSize}`);
  const lastLba = size / blockSize - 1;
  const entryBlocks = (ENTRIES * ENTRY_SIZE) / blockSize;
  const firstUsable = 2 + entryBlocks;
  const lastUsable = lastLba - entryBlocks - 1;

  const entries = Buffer.alloc(ENTRIES * ENTRY_SIZE);
  partitions.forEach((p, i) => {
    const end = p.start + p.blocks - 1;
    if (p.start < firstUsable || end > lastUsable) throw new Error(`partition ${i + 1} (${p.start}..${end}) is outside ${firstUsable}..${lastUsable}`);
    const e = entries.subarray(i * ENTRY_SIZE, (i + 1) * ENTRY_SIZE);
    guidBytes(p.type).copy(e, 0);
    guidBytes(randomUUID()).copy(e, 16);
    e.writeBigUInt64LE(BigInt(p.start), 32);
    e.writeBigUInt64LE(BigInt(end), 40);
    e.write(p.name.slice(0, 36), 56, 'utf16le');
  });
  const entriesCrc = crc32(entries);
  const diskGuid = guidBytes(randomUUID());
  const header = (self: number, alternate: number, entriesLba: number): Buffer => {
    const h = Buffer.alloc(blockSize);
    h.write('EFI PART', 0, 'latin1');
    h.writeUInt32LE(0x00010000, 8);
    h.writeUInt32LE(92, 12);
    h.writeBigUInt64LE(BigInt(self), 24);
    h.writeBigUInt64LE(BigInt(alternate), 32);
    h.writeBigUInt64LE(BigInt(firstUsable), 40);
    h.writeBigUInt64LE(BigInt(lastUsable), 48);
    diskGuid.copy(h, 56);
    h.writeBigUInt64LE(BigInt(entriesLba), 72);
    h.writeUInt32LE(ENTRIES, 80);
    h.writeUInt32LE(ENTRY_SIZE, 84);
    h.writeUInt32LE(entriesCrc, 88);
    h.writeUInt32LE(crc32(h.subarray(0, 92)), 16);
    return h;
  };
  // The protective MBR: one partition of type 0xEE over the whole disk (capped at 2^32-1 blocks).
  const mbr = Buffer.alloc(blockSize);
  const pe = mbr.subarray(446, 462);
  pe.writeUInt8(0x00, 0);
  pe.write('000200', 1, 'hex');
  pe.writeUInt8(0xee, 4);
  pe.write('ffffff', 5, 'hex');
  pe.writeUInt32LE(1, 8);
  pe.writeUInt32LE(Math.min(lastLba, 0xffffffff), 12);
  mbr.writeUInt16LE(0xaa55, 510);

  const fd = fs.openSync(file, 'r+');
  try {
    const at = (lba: number, buf: Buffer) => fs.writeSync(fd, buf, 0, buf.length, lba * blockSize);
    at(0, mbr);
    at(1, header(1, lastLba, 2));
    at(2, entries);
    at(lastLba - entryBlocks, entries);
    at(lastLba, header(lastLba, 1, lastLba - entryBlocks));
  } finally {
    fs.closeSync(fd);
  }
}
