/** Shared by both processes' loggers. */
/** Paths whose values must never reach a log line. */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  '*.token',
  '*.source_ticket',
  'req.headers["x-kurrent-transfer-ticket"]',
  '*.dhchap_key',
  '*.dhchap_ctrl_key',
  '*.tls_psk',
  '*.dhchap_secret',
  '*.dhchap_ctrl_secret',
  '*.iscsi_password',
  '*.chap.secret',
];
