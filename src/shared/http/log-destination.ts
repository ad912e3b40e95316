import pino from 'pino';

let failedWrites = 0;

/** Log lines that could not be written (full or failing log disk) since the process started. */
export function logWriteFailures(): number {
  return failedWrites;
}

/**
 * Where both processes log: stdout, as pino does by default, but a failed write (a full disk
 * under a redirected log file, a closed pipe) is counted and dropped instead of an unhandled
 * 'error' that kills the process. Logging is never a reason to stop answering boots.
 */
export function logDestination(): pino.DestinationStream {
  const dest = pino.destination({ dest: 1, sync: true });
  dest.on('error', () => {
    failedWrites++;
  });
  return dest;
}

/** The process's own stdout/stderr writes (the start banner, fatal messages) fail quietly too. */
export function tolerateStdioErrors(): void {
  for (const s of [process.stdout, process.stderr]) {
    if (s.listenerCount('error') === 0) s.on('error', () => failedWrites++);
  }
}
