import { ArgumentMetadata, BadRequestException, ValidationError, ValidationPipe } from '@nestjs/common';

type Schema = { properties?: Record<string, Schema>; nullable?: boolean; $ref?: string; items?: Schema; type?: string; oneOf?: Schema[]; allOf?: Schema[] };

/** The component schemas of the documents built so far (both apps may live in one test process). */
const schemas = new Map<string, Schema>();

/** Documents not built yet: built on the first validation that needs them (not at start-up). */
const pending: (() => Record<string, unknown> | undefined)[] = [];

/**
 * Called with each OpenAPI document, or a function that builds it: the spec decides where null
 * is allowed. A function is called once, when a body is first validated, so building the
 * document (~0.1 s) is not part of start-up.
 */
export function registerSchemas(s: Record<string, unknown> | undefined | (() => Record<string, unknown> | undefined)): void {
  if (typeof s === 'function') pending.push(s);
  else for (const [name, schema] of Object.entries(s ?? {})) schemas.set(name, schema as Schema);
}

function schemaOf(name: string): Schema | undefined {
  while (pending.length) registerSchemas(pending.shift()!());
  return schemas.get(name);
}

const refName = (s: Schema | undefined) => (s?.$ref ?? s?.allOf?.[0]?.$ref)?.replace('#/components/schemas/', '');

/** Fields that are null where the schema does not say nullable (class-validator's IsOptional lets null through). */
function nullProblems(value: unknown, schema: Schema | undefined, prefix: string, out: { field: string; message: string }[]): void {
  if (!schema?.properties || typeof value !== 'object' || value === null || Array.isArray(value)) return;
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    const prop = schema.properties[k];
    if (!prop) continue; // unknown fields: the whitelist check names them
    const field = prefix ? `${prefix}.${k}` : k;
    const target = refName(prop) ? schemaOf(refName(prop)!) : prop;
    if (v === null) {
      if (!prop.nullable && !target?.nullable && !prop.oneOf?.some((o) => o.type === 'null')) out.push({ field, message: 'must not be null' });
    } else if (Array.isArray(v) && prop.items) {
      const item = refName(prop.items) ? schemaOf(refName(prop.items)!) : prop.items;
      v.forEach((x, i) => nullProblems(x, item, `${field}.${i}`, out));
    } else nullProblems(v, target, field, out);
  }
}

function flatten(errors: ValidationError[], prefix = ''): { field: string; message: string }[] {
  const out: { field: string; message: string }[] = [];
  for (const e of errors) {
    const field = prefix ? `${prefix}.${e.property}` : e.property;
    if (e.constraints) {
      const keys = Object.keys(e.constraints);
      // A missing field is missing, whatever rule comes first; whitelist violations say so plainly.
      const message = keys.includes('whitelistValidation') ? `unknown field ${field}` : e.value === undefined ? 'is required' : Object.values(e.constraints)[0];
      out.push({ field, message });
    }
    if (e.children?.length) out.push(...flatten(e.children, field));
  }
  return out;
}

/** `mac: must be a MAC address ...`: the field once (class-validator's sentences begin with the property's own name). */
const headline = (e: { field: string; message: string }) => {
  const own = `${e.field.slice(e.field.lastIndexOf('.') + 1)} `;
  return `${e.field}: ${e.message.startsWith(own) ? e.message.slice(own.length) : e.message}`;
};

const fail = (list: { field: string; message: string }[]) => new BadRequestException({ message: list.map(headline).join('; ') || 'invalid request', errors: list });

/** Unknown fields rejected, null only where the spec allows it, messages name the (dotted) field. */
class StrictValidationPipe extends ValidationPipe {
  override async transform(value: unknown, metadata: ArgumentMetadata): Promise<unknown> {
    const name = metadata.metatype?.name;
    const schema = metadata.type === 'body' && name ? schemaOf(name) : undefined;
    if (schema) {
      const list: { field: string; message: string }[] = [];
      nullProblems(value, schema, '', list);
      if (list.length) throw fail(list);
    }
    return super.transform(value, metadata);
  }
}

/** Global pipe of both apps. */
export function createValidationPipe(): ValidationPipe {
  return new StrictValidationPipe({
    whitelist: true,
    forbidNonWhitelisted: true,
    transform: true,
    transformOptions: { enableImplicitConversion: false },
    // The value stays inside the pipe (to tell "missing" apart); messages never quote it.
    validationError: { target: false, value: true },
    exceptionFactory: (errors) => fail(flatten(errors)),
  });
}
