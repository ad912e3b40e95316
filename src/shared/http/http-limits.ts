/** Request limits both HTTP servers (control plane and storage agent) apply. */
export const BODY_LIMIT = 1024 * 1024;
/**
 * Path parameters up to this length (Fastify's default, 100, answered longer ones with an
 * undocumented 404/405): a host NQN may be 223 bytes, and a percent-encoded one three times that.
 */
export const MAX_PARAM_LENGTH = 1024;
