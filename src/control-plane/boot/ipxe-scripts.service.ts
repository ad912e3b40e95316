import { Injectable } from '@nestjs/common';
import * as path from 'node:path';
import { notFound } from '../../shared/http/api-error';
import { AppConfig } from '../config/app-config';
import { FileSystem } from '../../shared/files/file-system';

/** The scripts a worker chains after the first (TFTP) hop, when it has HTTPS (Kurrent's iPXE). */
export const IPXE_SCRIPTS = ['boot.ipxe.cfg', 'menu.ipxe'] as const;

/**
 * GET /ipxe/{name}: the shipped scripts from IPXE_CP_IPXE_SCRIPTS_DIR, read on each request (a
 * deployment edits them in place, as it does on the TFTP server). Only the names above: nothing
 * else of that directory, and no path, can be asked for.
 */
@Injectable()
export class IpxeScriptsService {
  constructor(
    private readonly config: AppConfig,
    private readonly fs: FileSystem,
  ) {}

  script(name: string): string {
    if (!(IPXE_SCRIPTS as readonly string[]).includes(name)) throw notFound(`no iPXE script ${JSON.stringify(name)}: one of ${IPXE_SCRIPTS.join(', ')}`);
    const text = this.fs.readTextSync(path.join(this.config.ipxeScriptsDir, name));
    if (text === null) throw notFound(`${name} is missing from ${this.config.ipxeScriptsDir} (IPXE_CP_IPXE_SCRIPTS_DIR)`);
    return text;
  }
}
