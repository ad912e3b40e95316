import * as fs from 'node:fs';
import * as path from 'node:path';
import { allowed, DEV_ONLY, problems, productionTable, readLicences, SHIPPABLE, withTable } from '../../scripts/licenses';

const root = path.join(__dirname, '../..');

describe('licences', () => {
  it('Kurrent is Apache-2.0: LICENSE, NOTICE and package.json agree', () => {
    expect(fs.readFileSync(path.join(root, 'LICENSE'), 'utf8')).toMatch(/^\s*Apache License\s+Version 2\.0, January 2004/);
    expect(JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')).license).toBe('Apache-2.0');
    expect(fs.readFileSync(path.join(root, 'NOTICE'), 'utf8')).toMatch(/Apache License, Version 2\.0[\s\S]*GPL-2\.0-or-later/);
    // Code compiled into iPXE carries iPXE's licence.
    expect(fs.readFileSync(path.join(root, 'ipxe/src/kurrent_cmd.c'), 'utf8')).toMatch(/GNU General Public License[\s\S]*version 2 of the\s+\*?\s*License, or any later version/);
  });

  it('SPDX expressions: an OR needs one allowed alternative, an AND all of them', () => {
    expect(allowed('(MIT OR CC0-1.0)', SHIPPABLE)).toBe(true);
    expect(allowed('(GPL-3.0 OR MIT)', SHIPPABLE)).toBe(true);
    expect(allowed('(MIT AND GPL-2.0)', SHIPPABLE)).toBe(false);
    expect(allowed('MPL-2.0', SHIPPABLE)).toBe(false);
    expect(allowed('MPL-2.0', [...SHIPPABLE, ...DEV_ONLY])).toBe(true);
    expect(problems([{ name: 'x', version: '1.0.0', license: 'GPL-3.0', dev: false }, { name: 'y', version: '1.0.0', license: 'MPL-2.0', dev: true }])).toEqual(['x@1.0.0: GPL-3.0 (production)']);
  });

  it('every npm package in package-lock.json has an allowed licence, and THIRD_PARTY.md lists the production ones as they are', () => {
    const list = readLicences(root);
    expect(list.length).toBeGreaterThan(100);
    expect(problems(list)).toEqual([]);
    const doc = fs.readFileSync(path.join(root, 'THIRD_PARTY.md'), 'utf8');
    expect(withTable(doc, productionTable(list))).toBe(doc); // else: npm run licenses -- --write
  });
});
