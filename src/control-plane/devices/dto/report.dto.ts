/** The 11 report fields (query string). Parsed by hand on this hot, unauthenticated path. */
export const REPORT_FIELDS = [
  'mac',
  'uuid',
  'manufacturer',
  'product',
  'serial',
  'cpumodel',
  'mem-total',
  'mem-type',
  'mem-speed',
  'chip',
  'busid',
  'pubkey',
] as const;
export type ReportQuery = Partial<Record<(typeof REPORT_FIELDS)[number], string | string[]>>;
