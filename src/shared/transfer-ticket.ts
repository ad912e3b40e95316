import { createHmac, timingSafeEqual } from 'node:crypto';

/** Header that carries a transfer ticket to the sending agent. */
export const TRANSFER_TICKET_HEADER = 'x-kurrent-transfer-ticket';

/** How long a ticket the control plane signs stays good (a capped 40 GiB pull takes an hour or more). */
export const TRANSFER_TICKET_SECONDS = 24 * 3600;

const mac = (token: string, name: string, version: number, expires: number) =>
  createHmac('sha256', token).update(`kurrent-transfer\n${name}\n${version}\n${expires}`).digest();

/**
 * A read ticket for one master version on one agent: `<expires>.<HMAC-SHA256 keyed by that
 * agent's token>`. The control plane signs it and hands it to the receiving agent instead of the
 * sender's token: the receiver can read that version's data ranges and bytes until it expires,
 * and nothing else on the sender.
 */
export function signTransferTicket(token: string, name: string, version: number, expires: number): string {
  return `${expires}.${mac(token, name, version, expires).toString('base64url')}`;
}

/** Whether `ticket` was signed with `token` for this version and has not expired (constant time). */
export function checkTransferTicket(token: string, ticket: string, name: string, version: number, nowSeconds: number): boolean {
  const m = /^([1-9][0-9]{0,11})\.([A-Za-z0-9_-]{43})$/.exec(ticket);
  if (!m || !token) return false;
  const expires = Number(m[1]);
  if (expires <= nowSeconds) return false;
  return timingSafeEqual(Buffer.from(m[2], 'base64url'), mac(token, name, version, expires));
}
