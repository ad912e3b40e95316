import { applyDecorators } from '@nestjs/common';
import { ApiProperty } from '@nestjs/swagger';
import { Transform } from 'class-transformer';
import { IsInt, Max, Min, ValidateBy, ValidationOptions } from 'class-validator';
import { AGENT_NAME, AGENT_NAME_INPUT, isDeviceMac, MAC_INPUT, normalizeAddress, TOKEN } from './grammars';
import { ID_PATTERN, normalizeId, normalizeMac } from './mac';

/**
 * Combined validators: each pairs the class-validator rule, the normalising transform and the
 * ApiProperty the swagger plugin cannot infer, so the spec says exactly what the pipe enforces.
 */

/** A MAC in any accepted spelling, normalised to lower-case colon form. */
export function IsMac(opts: { required?: boolean; description?: string } = {}) {
  return applyDecorators(
    Transform(({ value }) => (typeof value === 'string' ? (normalizeMac(value) ?? value) : value)),
    ValidateBy({
      name: 'isMac',
      validator: {
        validate: (v) => typeof v === 'string' && normalizeMac(v) === v && isDeviceMac(v),
        defaultMessage: (a) =>
          typeof a?.value === 'string' && normalizeMac(a.value) === a.value
            ? `${a?.property} must be a unicast device MAC: broadcast, multicast and all-zero addresses are not devices`
            : `${a?.property} must be a MAC address (00:0c:29:b9:8b:2d, 00-0C-29-B9-8B-2D, 000c.29b9.8b2d or 000c29b98b2d)`,
      },
    }),
    ApiProperty({
      type: String,
      required: opts.required ?? true,
      pattern: MAC_INPUT,
      example: '00:0c:29:b9:8b:2d',
      description: opts.description ?? 'MAC address; colons, hyphens, dots or bare hex, any case.',
    }),
  );
}

/** An agent id or tag: `[a-z0-9._-]`, lower-cased, starting and ending with a letter or digit. */
export function IsAgentName(opts: { each?: boolean; example?: string; description?: string } = {}) {
  return applyDecorators(
    Transform(({ value }) =>
      opts.each && Array.isArray(value)
        ? value.map((x) => (typeof x === 'string' ? x.trim().toLowerCase() : x))
        : typeof value === 'string'
          ? value.trim().toLowerCase()
          : value,
    ),
    ValidateBy(
      {
        name: 'isAgentName',
        validator: {
          validate: (v) => typeof v === 'string' && AGENT_NAME.test(v) && !v.includes('..'),
          defaultMessage: (a) =>
            `${a?.property} must be 1-63 characters of a-z, 0-9, '.', '_' or '-', starting and ending with a letter or digit, without '..'`,
        },
      },
      { each: opts.each },
    ),
    // The pattern of what a request may send (trimmed and lower-cased before the check).
    ...(opts.each
      ? [ApiProperty({ required: false, type: 'array', items: { type: 'string', pattern: AGENT_NAME_INPUT, maxLength: 63 }, maxItems: 32, description: opts.description })]
      : [ApiProperty({ type: String, pattern: AGENT_NAME_INPUT, maxLength: 63, example: opts.example, description: opts.description })]),
  );
}

/** A data-plane address: IPv4, IPv6 (stored bracketed) or a DNS name; anything else is a 400. */
export function IsAddress() {
  return applyDecorators(
    Transform(({ value }) => (typeof value === 'string' && value.trim() !== '' ? (normalizeAddress(value) ?? value) : value)),
    ValidateBy({
      name: 'isAddress',
      validator: {
        validate: (v) => v === undefined || v === '' || (typeof v === 'string' && normalizeAddress(v) === v),
        defaultMessage: (a) => `${a?.property} must be an IPv4 address, an IPv6 address or a DNS name`,
      },
    }),
  );
}

/** A bearer token: visible ASCII (it travels in an HTTP header), or a `${ENV}` placeholder. */
const PLACEHOLDER = /\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

/**
 * Which environment variables an agent token may name: `*_TOKEN` (the reference's own example is
 * `${STORAGE_STGT_02_TOKEN}`), never the control plane's configuration (`IPXE_CP_*`: its API token,
 * the database URL). Anything else would let an API caller send the environment to an agent URL.
 */
export function tokenVariableAllowed(name: string): boolean {
  return name.endsWith('_TOKEN') && !name.startsWith('IPXE_CP_');
}

function placeholdersAllowed(v: string): boolean {
  for (const m of v.matchAll(PLACEHOLDER)) if (!tokenVariableAllowed(m[1])) return false;
  return true;
}

export function IsToken() {
  return ValidateBy({
    name: 'isToken',
    validator: {
      validate: (v) => v === undefined || v === '' || (typeof v === 'string' && TOKEN.test(v) && placeholdersAllowed(v)),
      defaultMessage: (a) =>
        typeof a?.value === 'string' && TOKEN.test(a.value)
          ? `${a.property}: a \${VAR} placeholder must name a variable ending in _TOKEN and not starting with IPXE_CP_ (got ${JSON.stringify(a.value.match(PLACEHOLDER)?.find((p) => !placeholdersAllowed(p)) ?? '')})`
          : `${a?.property} must be visible ASCII characters without spaces (or a \${ENV} placeholder)`,
    },
  });
}

/** worker_id / hostname: letters, digits, dot, underscore, hyphen; lower-cased; no `..`. */
export function IsWorkerId(opts: { required?: boolean; description?: string; example?: string } = {}, vo?: ValidationOptions) {
  return applyDecorators(
    Transform(({ value }) => (typeof value === 'string' ? value.trim().toLowerCase() : value)),
    ValidateBy(
      {
        name: 'isWorkerId',
        validator: {
          validate: (v) => typeof v === 'string' && normalizeId(v) === v,
          defaultMessage: (a) =>
            `${a?.property} must be 1-63 characters of letters, digits, '.', '_' or '-', starting with a letter or digit, without '..'`,
        },
      },
      vo,
    ),
    ApiProperty({
      type: String,
      required: opts.required ?? true,
      pattern: ID_PATTERN.source,
      maxLength: 63,
      example: opts.example ?? 'worker-01',
      description: opts.description,
    }),
  );
}

/** Query-string booleans: only `true`/`false` (also 1/0), anything else is a 400. */
export function QueryBool() {
  return applyDecorators(
    Transform(({ value }) => {
      if (value === true || value === false) return value;
      if (value === 'true' || value === '1') return true;
      if (value === 'false' || value === '0') return false;
      return value;
    }),
    ValidateBy({
      name: 'isQueryBool',
      validator: {
        validate: (v) => typeof v === 'boolean',
        defaultMessage: (a) => `${a?.property} must be true or false`,
      },
    }),
    ApiProperty({ type: Boolean, required: false, default: false }),
  );
}

/** An integer in [min, max], documented as `type: integer` (the plugin would say number). */
export function Int(opts: { min: number; max: number; nullable?: boolean; required?: boolean }) {
  return applyDecorators(
    IsInt(),
    Min(opts.min),
    Max(opts.max),
    ApiProperty({ type: 'integer', minimum: opts.min, maximum: opts.max, nullable: opts.nullable, required: opts.required ?? false }),
  );
}
