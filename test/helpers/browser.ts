import * as fs from 'node:fs';
import * as path from 'node:path';
import { chromium, type Browser } from 'playwright-core';

/** Debian's Chromium (apt-get install chromium): `npx playwright install` cannot download here. */
export const CHROMIUM = '/usr/bin/chromium';

/** Screenshots of every page, kept as test artifacts (the README's come from here: docs/screenshots). */
export const SCREENSHOT_DIR = path.join(__dirname, '../../build/ui-screenshots');

export async function launchChromium(): Promise<Browser> {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (scripts/system-deps.sh does)`);
  fs.mkdirSync(SCREENSHOT_DIR, { recursive: true });
  // --no-sandbox: the tests run as root, where Chromium's sandbox refuses to start.
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
}
