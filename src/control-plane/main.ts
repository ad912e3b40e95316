import { start } from './server';

// The unbundled entry (tests spawn it); `npm start` runs the bundle through src/start.ts.
void start();
