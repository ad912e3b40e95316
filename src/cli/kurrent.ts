import { Command, CommanderError, Option } from 'commander';
import { agentCommands } from './commands/agents';
import { deviceCommands } from './commands/devices';
import { opsCommands } from './commands/ops';
import { bootCommands } from './commands/boots';
import { settingsCommands } from './commands/settings';
import { workerCommands } from './commands/workers';
import { cliContext, EXIT_HELP, Io, seconds } from './context';
import { CliError, EXIT } from './output';

/**
 * `kurrent`: the operator's CLI, one more client of the REST API (the typed client generated from
 * the spec). Global options: --url / KURRENT_URL, --token / KURRENT_TOKEN, --request-timeout / KURRENT_REQUEST_TIMEOUT, --json, --yes.
 * Each command group is a file of its own under commands/; what they share is in context.ts.
 */

export { parseDevices, parsePairs } from './context';

/** Builds the program; `io` is swappable so tests and completion can drive it. */
export function buildProgram(io: Io, env: NodeJS.ProcessEnv = process.env): Command {
  const program = new Command('kurrent')
    .description('Operate a Kurrent control plane: devices, workers, disks, agents, credentials, audit.')
    .addOption(new Option('--url <url>', 'control plane URL').env('KURRENT_URL').default(env.KURRENT_URL ?? 'http://localhost:4839'))
    .addOption(new Option('--token <token>', 'bearer token (IPXE_CP_TOKEN)').env('KURRENT_TOKEN'))
    .addOption(new Option('--request-timeout <seconds>', 'give up on a request without an answer after this long').env('KURRENT_REQUEST_TIMEOUT').default(30).argParser(seconds))
    .option('--json', 'print JSON instead of tables (for scripts)')
    .option('-y, --yes', 'do destructive things without asking')
    .addHelpText('after', EXIT_HELP)
    .showHelpAfterError()
    .configureOutput({ writeOut: io.out, writeErr: io.err })
    .exitOverride();

  const ctx = cliContext(program, io);
  agentCommands(ctx);
  deviceCommands(ctx);
  workerCommands(ctx);
  settingsCommands(ctx);
  opsCommands(ctx);
  bootCommands(ctx);
  const { verb } = ctx;

  // ---- completion ----
  verb(program, 'completion', 'print a bash completion script: source <(kurrent completion)', 'source <(kurrent completion)').action(() => {
    io.out(completionScript(program));
  });
  return program;
}

/** bash completion from the command tree (commands, sub-commands and their options). */
export function completionScript(program: Command): string {
  const words = (c: Command): string[] => [...c.commands.map((s) => s.name()), ...c.options.map((o) => o.long!).filter(Boolean)];
  const cases: string[] = [];
  const walk = (c: Command, path: string[]) => {
    cases.push(`    "${path.join(' ')}") opts="${words(c).join(' ')}" ;;`);
    for (const s of c.commands) walk(s, [...path, s.name()]);
  };
  walk(program, []);
  return `# bash completion for kurrent: source <(kurrent completion)
_kurrent() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" path="" w opts
  for w in "\${COMP_WORDS[@]:1:COMP_CWORD-1}"; do [[ $w == -* ]] || path="\${path:+$path }$w"; done
  case "$path" in
${cases.join('\n')}
    *) opts="" ;;
  esac
  COMPREPLY=( $(compgen -W "$opts" -- "$cur") )
}
complete -F _kurrent kurrent
`;
}

/** Runs the CLI; resolves to the exit code (never calls process.exit itself). */
export async function run(argv: string[], io: Io = { out: (s) => process.stdout.write(s), err: (s) => process.stderr.write(s), isTTY: !!process.stdin.isTTY, stdin: process.stdin }): Promise<number> {
  const program = buildProgram(io);
  try {
    await program.parseAsync(argv, { from: 'user' });
    return EXIT.ok;
  } catch (e) {
    if (e instanceof CommanderError) {
      if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version' || e.code === 'commander.help') return EXIT.ok;
      return EXIT.usage; // commander printed the message and the help
    }
    if (e instanceof CliError) {
      io.err(`kurrent: ${e.message}\n`);
      return e.code;
    }
    io.err(`kurrent: ${(e as Error).message}\n`);
    return EXIT.failed;
  }
}

if (require.main === module) {
  void run(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
