import { GRAMMARS, GrammarName } from '../../shared/grammars';

/** One `set <name> <value>` line; the name is fixed in code, the value must match its grammar. */
export interface IpxeVar {
  name: string;
  grammar: GrammarName;
  value: string | number;
}

/** A value that failed its grammar: nothing of the script is emitted. */
export class ScriptRefused extends Error {
  constructor(
    readonly variable: string,
    readonly value: string,
  ) {
    super(`boot script refused: ${variable} does not match its grammar`);
  }
}

const VAR_NAME = /^[a-z][a-z0-9-]{0,31}$/;

/** The script sent instead of a refused one: a valid, inert iPXE script. */
export const REFUSED_SCRIPT = '#!ipxe\n# boot vars refused: a stored value failed its grammar (see GET /operations)\n';

/**
 * The one renderer of every iPXE script the control plane emits. Each value is checked against
 * the grammar of its variable before anything is produced; any failure refuses the whole script
 * (ScriptRefused), so a stored value can never add a line or a command. The comment is checked
 * too (one line of printable ASCII).
 */
export function renderIpxe(comment: string, vars: IpxeVar[]): string {
  if (!GRAMMARS.comment(comment)) throw new ScriptRefused('comment', comment);
  let text = `#!ipxe\n# ${comment}\n`;
  for (const v of vars) {
    const value = String(v.value);
    if (!VAR_NAME.test(v.name)) throw new ScriptRefused(v.name, value);
    if (!GRAMMARS[v.grammar](value)) throw new ScriptRefused(v.name, value);
    text += `set ${v.name} ${value}\n`;
  }
  return text;
}

/** Checks values without rendering (the JSON form of the same variables). */
export function checkVars(vars: IpxeVar[]): void {
  for (const v of vars) {
    if (!GRAMMARS[v.grammar](String(v.value))) throw new ScriptRefused(v.name, String(v.value));
  }
}

/** Text a hold message may carry: letters, digits and plain punctuation (never `$`, `{` or a newline). */
const HOLD_TEXT = /[^A-Za-z0-9 .,:;()/_-]/g;

/**
 * The boot-loop hold (GET /settings/boot-policy, loop_action hold): a script that stops the
 * machine on a console message saying why and where to release it (`${controller}` is the
 * control plane's address as boot.ipxe.cfg set it), waits an hour or a key press, and reboots.
 * The reason is ours (counts and stage names), still reduced to plain text here.
 */
export function renderHold(mac: string, reason: string): string {
  const r = reason.replace(HOLD_TEXT, ' ').slice(0, 200);
  const m = mac.replace(HOLD_TEXT, ' ');
  return (
    '#!ipxe\n# boot-loop hold\n' +
    'echo\n' +
    `echo Kurrent holds this machine (${m}): ${r}\n` +
    `echo An operator releases it in the web UI (Boots) or with: kurrent boots release ${m}\n` +
    'echo Control plane: ${controller}\n' +
    'prompt --timeout 3600000 Press any key to boot again once it is released ||\n' +
    'reboot\n'
  );
}

/** Text a refusal message may carry: the hold's plain text plus the apostrophe (iPXE has no quoting). */
const BLOCKED_TEXT = /[^A-Za-z0-9 .,:;()/_'-]/g;

/**
 * /boot-vars for a worker whose default disk cannot boot now (an NVMe/TCP disk whose credential is
 * revoked or not yet on its agent, a port without TLS...): no variable, as the empty script, plus
 * the reason on the console and a pause to read it before menu.ipxe takes the screen. The reason is
 * a fixed BOOT_BLOCKERS message, still reduced to plain text here.
 */
export function renderBlocked(reason: string): string {
  const r = reason.replace(BLOCKED_TEXT, ' ').slice(0, 200);
  return (
    '#!ipxe\n# no per-worker boot vars found\n' +
    'echo\n' +
    `echo Kurrent: the default disk does not boot now: ${r}\n` +
    'echo The worker\'s boot readiness (web UI, Workers; or GET /workers) says the same.\n' +
    'prompt --timeout 10000 Press any key for the menu ||\n'
  );
}
