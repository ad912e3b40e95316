import { Injectable } from '@nestjs/common';
import { execFile } from 'node:child_process';

export class ProcessError extends Error {}

/** Process execution and signals, behind one injectable so tests can swap them. */
@Injectable()
export class ProcessRunner {
  /** `input` goes to the process's stdin (secrets never go on a command line, where /proc shows them). */
  run(cmd: string, args: string[], timeoutMs = 10_000, input?: Buffer): Promise<{ stdout: string; stderr: string }> {
    return new Promise((resolve, reject) => {
      const child = execFile(cmd, args, { timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
        if (err) {
          const detail = (stderr || err.message).toString().trim().split('\n').slice(-3).join(' | ');
          reject(new ProcessError(`${cmd} ${args[0] ?? ''} failed: ${detail}`));
        } else resolve({ stdout: stdout.toString(), stderr: stderr.toString() });
      });
      if (input) child.stdin?.end(input);
    });
  }

  signal(pid: number, signal: NodeJS.Signals): void {
    process.kill(pid, signal);
  }
}
