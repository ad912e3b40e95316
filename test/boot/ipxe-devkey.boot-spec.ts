import { createECDH } from 'node:crypto';
import { execFileSync, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parsePubkey, verifyDeviceSignature } from '../../src/control-plane/common/device-key';
import { tempDir } from '../helpers/app';
import { pinnedIpxe } from '../helpers/ipxe';

/**
 * Kurrent's own iPXE (npm run build:ipxe) on real UEFI firmware: qemu (TCG) with OVMF, whose
 * variable store is a per-VM copy of OVMF_VARS_4M.fd, boots build/ipxe/out/selftest.efi (the
 * EFI iPXE with ipxe/selftest.ipxe embedded) from a FAT disk. The script runs kurrent-keygen and
 * kurrent-sign over a fixed nonce and MAC and prints the public key and r||s on the serial port.
 * Node then checks them with the verifier /boot-vars uses, the key's persistence in NVRAM, and
 * that the private scalar stored there is the key's and was never printed.
 */
const OVMF_CODE = '/usr/share/OVMF/OVMF_CODE_4M.fd';
const OVMF_VARS = '/usr/share/OVMF/OVMF_VARS_4M.fd';
const NONCE = Buffer.from('000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f', 'hex');
const MAC = '52:54:00:12:34:56';

interface Boot {
  pubkey: string;
  sig: string;
  serial: string;
  ms: number;
}

describe('the device key in EFI NVRAM (kurrent-keygen, kurrent-sign) on OVMF', () => {
  const dir = tempDir('kurrent-devkey-');
  const esp = path.join(dir, 'esp.img');

  beforeAll(() => {
    // Builds once (~1.5 min on 2 cores), then skips while ipxe/ and the tarball are unchanged.
    const { out } = pinnedIpxe();
    // A FAT disk with the self-test as the removable-media boot file OVMF falls back to.
    execFileSync('dd', ['if=/dev/zero', `of=${esp}`, 'bs=1M', 'count=8', 'status=none']);
    execFileSync('mkfs.vfat', [esp], { stdio: 'ignore' });
    execFileSync('mmd', ['-i', esp, '::/EFI', '::/EFI/BOOT']);
    execFileSync('mcopy', ['-i', esp, path.join(out, 'selftest.efi'), '::/EFI/BOOT/BOOTX64.EFI']);
  }, 900_000);

  /** One power-on of a VM whose NVRAM is `vars` (created from OVMF's template when absent). */
  function boot(vars: string): Promise<Boot> {
    if (!fs.existsSync(vars)) fs.copyFileSync(OVMF_VARS, vars);
    const serialFile = `${vars}.serial`;
    fs.rmSync(serialFile, { force: true });
    const t0 = performance.now();
    const q = spawn(
      'qemu-system-x86_64',
      [
        ...['-accel', 'tcg', '-m', '256', '-machine', 'q35', '-no-reboot', '-net', 'none', '-display', 'none', '-monitor', 'none'],
        ...['-drive', `if=pflash,format=raw,unit=0,readonly=on,file=${OVMF_CODE}`, '-drive', `if=pflash,format=raw,unit=1,file=${vars}`],
        ...['-drive', `file=${esp},format=raw,if=ide,snapshot=on`, '-serial', `file:${serialFile}`],
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    q.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => q.kill('SIGKILL'), 170_000);
      q.on('exit', () => {
        clearTimeout(timer);
        const serial = fs.existsSync(serialFile) ? fs.readFileSync(serialFile, 'latin1').replace(/\r/g, '') : '';
        const pubkey = /KURRENT-PUBKEY ([0-9a-f]+)/.exec(serial)?.[1];
        const sig = /KURRENT-SIG ([0-9a-f]+)/.exec(serial)?.[1];
        if (!pubkey || !sig || !serial.includes('KURRENT-SELFTEST-DONE')) return reject(new Error(`self-test did not finish; qemu: ${stderr.trim()}; serial:\n${serial.slice(-2000)}`));
        resolve({ pubkey, sig, serial, ms: performance.now() - t0 });
      });
    });
  }

  /** The KurrentDeviceKey variable in an OVMF variable store: attributes and data. */
  function nvramKey(vars: string): { attributes: number; data: Buffer } {
    const fd = fs.readFileSync(vars);
    const name = Buffer.from('KurrentDeviceKey\0', 'utf16le');
    const at = fd.indexOf(name);
    expect(at).toBeGreaterThan(60);
    // AUTHENTICATED_VARIABLE_HEADER (60 bytes) before the name: StartId 0x55aa, State, Reserved,
    // Attributes, MonotonicCount, TimeStamp, PubKeyIndex, NameSize, DataSize, VendorGuid.
    const h = at - 60;
    expect(fd.readUInt16LE(h)).toBe(0x55aa);
    const nameSize = fd.readUInt32LE(h + 36);
    const dataSize = fd.readUInt32LE(h + 40);
    expect(nameSize).toBe(name.length);
    return { attributes: fd.readUInt32LE(h + 4), data: fd.subarray(at + nameSize, at + nameSize + dataSize) };
  }

  it('signs nonce || mac with a key that stays in NVRAM across boots; a new NVRAM is a new key', async () => {
    const vm1 = path.join(dir, 'vm1.vars.fd');
    const first = await boot(vm1);
    const key = parsePubkey(first.pubkey);
    expect(key.ok).toBe(true);
    if (!key.ok) return;
    expect(first.pubkey).toMatch(/^04[0-9a-f]{128}$/);
    expect(first.sig).toMatch(/^[0-9a-f]{128}$/);
    // Exactly the contract /boot-vars verifies; a wrong MAC or nonce fails.
    expect(verifyDeviceSignature(key.key, NONCE, MAC, first.sig)).toBe(true);
    expect(verifyDeviceSignature(key.key, NONCE, '52:54:00:12:34:57', first.sig)).toBe(false);
    const otherNonce = Buffer.from(NONCE);
    otherNonce[31] ^= 1;
    expect(verifyDeviceSignature(key.key, otherNonce, MAC, first.sig)).toBe(false);

    // NVRAM: non-volatile + boot-service + runtime access, a 32-byte scalar whose point is the
    // reported key, and that scalar appears nowhere on the console.
    const nv = nvramKey(vm1);
    expect(nv.attributes & 0x7).toBe(0x7);
    expect(nv.data.length).toBe(32);
    const ecdh = createECDH('prime256v1');
    ecdh.setPrivateKey(nv.data);
    expect(ecdh.getPublicKey('hex')).toBe(first.pubkey);
    expect(first.serial).not.toContain(nv.data.toString('hex'));

    // Second power-on of the same machine: the same key (signing is deterministic, so the same r||s).
    const second = await boot(vm1);
    expect(second.pubkey).toBe(first.pubkey);
    expect(verifyDeviceSignature(key.key, NONCE, MAC, second.sig)).toBe(true);

    // A fresh variable store is a new device key.
    const other = await boot(path.join(dir, 'vm2.vars.fd'));
    expect(other.pubkey).not.toBe(first.pubkey);
    console.log(`OVMF power-on to self-test done: ${Math.round(first.ms)} ms (first), ${Math.round(second.ms)} ms (second), ${Math.round(other.ms)} ms (new NVRAM)`);
  }, 600_000);
});
