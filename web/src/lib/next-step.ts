/**
 * What the operator can do about a failed request, in a sentence shown under the server's own
 * message (which stays: it names the field, the file or the agent).
 */
export function nextStep(status: number, body: { agent?: unknown; error?: unknown } = {}): string | null {
  const agent = typeof body.agent === 'string' ? body.agent : null;
  const why = typeof body.error === 'string' ? body.error : '';
  if (status === 0) return 'The control plane did not answer: check that it runs and that this page points at it, then try again.';
  if (agent && (status === 502 || status === 503 || status === 504)) {
    const refused = /ECONNREFUSED|connection refused/i.test(why);
    const timedOut = /timeout|ETIMEDOUT/i.test(why);
    const what = refused ? 'refused the connection (is it running?)' : timedOut ? 'did not answer in time' : 'failed';
    return `The storage agent ${agent} ${what}. Check it on the Agents page (base URL, token, its service), then try again; nothing was changed here.`;
  }
  if (status === 503) return 'The control plane cannot write its state right now (database or state disk unavailable); nothing was changed. Try again once it is back.';
  if (status === 507) return "The control plane's state disk is full; nothing was changed. Free space there, then try again.";
  if (status === 409) return 'This conflicts with the current state (someone else may have changed it): reload, check, and try again.';
  return null;
}
