/** Polls fn until it returns a truthy value or the deadline passes (then the last value is returned for the assertion). */
export async function until<T>(fn: () => Promise<T>, ms = 15_000): Promise<T> {
  const end = Date.now() + ms;
  let v = await fn();
  while (!v && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 100));
    v = await fn();
  }
  return v;
}
