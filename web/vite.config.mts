import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

// The UI is static files served by the control plane at /ui/ (src/common/web-ui.ts); in
// development `npx vite --config web/vite.config.ts` proxies the API to a running control plane.
const api = process.env.KURRENT_API ?? 'http://127.0.0.1:4839';
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/ui/',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: { outDir: 'dist', emptyOutDir: true, target: 'es2022', sourcemap: false, chunkSizeWarningLimit: 300 },
  server: {
    proxy: Object.fromEntries(
      ['/devices', '/workers', '/agents', '/masters', '/operations', '/settings', '/reconcile', '/healthz', '/boot-vars'].map((p) => [p, api]),
    ),
  },
});
