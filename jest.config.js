// ts-jest runs the @nestjs/swagger plugin exactly as `nest build` does, so the OpenAPI document
// a test builds is the one the build serves, and decorator metadata is emitted for Nest's DI.
const swaggerPlugin = { path: '<rootDir>/test/swagger-plugin.transformer.js' };
const transform = {
  '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.json', diagnostics: false, astTransformers: { before: [swaggerPlugin] } }],
};
const base = { testEnvironment: 'node', transform, moduleFileExtensions: ['ts', 'js', 'json'], rootDir: __dirname };

module.exports = {
  testTimeout: 120_000,
  globalSetup: '<rootDir>/test/global-setup.js',
  globalTeardown: '<rootDir>/test/global-teardown.js',
  projects: [
    { ...base, displayName: 'unit', testMatch: ['<rootDir>/test/unit/**/*.spec.ts'] },
    { ...base, displayName: 'e2e', testMatch: ['<rootDir>/test/e2e/**/*.e2e-spec.ts'] },
    { ...base, displayName: 'boot', testMatch: ['<rootDir>/test/boot/**/*.boot-spec.ts'] },
    // The web UI in headless Debian Chromium (playwright-core) against a real control plane and agent.
    { ...base, displayName: 'ui', testMatch: ['<rootDir>/test/ui/**/*.ui-spec.ts'] },
    // The storage agent on real kernels (LIO, nvmet, TLS) in qemu guests (scripts/kernel-node.ts).
    { ...base, displayName: 'kernel', testMatch: ['<rootDir>/test/kernel/**/*.kernel-spec.ts'] },
  ],
};
