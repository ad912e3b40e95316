import * as fs from 'node:fs';

export const BOOT_MARKER = 'KURRENT-BOOT-OK';

/**
 * A bootable master: an MBR whose code writes BOOT_MARKER to COM1 (port 0x3f8) and halts, plus a
 * partition table (SeaBIOS' int13 boot of a bare MBR on a tiny disk fails without one).
 */
export function writeBootableMaster(file: string, sizeBytes = 8 << 20, marker = BOOT_MARKER): void {
  const mbr = Buffer.alloc(512);
  const code = [
    0x31, 0xc0, // xor ax,ax
    0x8e, 0xd8, // mov ds,ax
    0xbe, 0x15, 0x7c, // mov si,0x7c15 (msg)
    0xba, 0xf8, 0x03, // mov dx,0x3f8
    0xac, // loop: lodsb
    0x84, 0xc0, // test al,al
    0x74, 0x03, // jz done
    0xee, // out dx,al
    0xeb, 0xf8, // jmp loop
    0xf4, // done: hlt
    0xeb, 0xfd, // jmp done
  ];
  Buffer.from(code).copy(mbr, 0);
  Buffer.from(`${marker}\r\n\0`, 'latin1').copy(mbr, 0x15);
  // One bootable partition from LBA 2048 to the end.
  const e = 446;
  mbr[e] = 0x80;
  mbr.writeUInt8(0x83, e + 4);
  mbr.writeUInt32LE(2048, e + 8);
  mbr.writeUInt32LE(sizeBytes / 512 - 2048, e + 12);
  mbr[510] = 0x55;
  mbr[511] = 0xaa;
  const fd = fs.openSync(file, 'w');
  fs.ftruncateSync(fd, sizeBytes);
  fs.writeSync(fd, mbr, 0, 512, 0);
  fs.closeSync(fd);
}
