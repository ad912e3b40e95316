import type { BuildOptions } from 'esbuild';

/** esbuild options shared by the control plane's bundle (scripts/bundle.ts) and the guest agent's (scripts/kernel-node.ts). */
export const NODE_BUNDLE: BuildOptions = {
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'cjs',
  // Class names are data here (Nest tokens, DTO names that key the OpenAPI schemas).
  keepNames: true,
  logLevel: 'warning',
  external: [
    // Optional Nest packages, required only when used (never here).
    '@nestjs/microservices',
    '@nestjs/microservices/*',
    '@nestjs/websockets',
    '@nestjs/websockets/*',
    '@nestjs/platform-express',
    '@fastify/view',
    '@fastify/cors',
    'class-transformer/storage',
    // Serves its files from its own directory (found through __dirname).
    'swagger-ui-dist',
  ],
};

/**
 * The bundle's text with every character past ASCII written as a `\uXXXX` escape. esbuild escapes
 * them in strings and templates but not in regular expression literals (validator's locale
 * alphabets): those few made V8 keep the whole 7 MB source as a two-byte string, 13 MB of heap
 * for as long as the process runs. In a regex, as in a string, `\uXXXX` (a surrogate pair as two)
 * is the same character, with or without the u flag. A character after a backslash would change
 * meaning, so it stops the build instead.
 */
export function asciiOnly(code: string): string {
  return code.replace(/[^\x00-\x7f]/g, (ch, at: number) => {
    let slashes = 0;
    while (code.charCodeAt(at - 1 - slashes) === 0x5c) slashes++;
    if (slashes % 2) throw new Error(`bundle: an escaped non-ASCII character at offset ${at} cannot be rewritten as \\u${hex4(ch)}`);
    return `\\u${hex4(ch)}`;
  });
}

const hex4 = (ch: string) => ch.charCodeAt(0).toString(16).padStart(4, '0');
