/** A setting of either process that is missing or invalid: the start stops, naming the variable. */
export class ConfigError extends Error {}
