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
