import type { OpenAPIObject } from '@nestjs/swagger';

type Node = Record<string, unknown>;
const isObj = (v: unknown): v is Node => typeof v === 'object' && v !== null && !Array.isArray(v);

function walk(v: unknown, fn: (n: Node) => void): void {
  if (Array.isArray(v)) v.forEach((x) => walk(x, fn));
  else if (isObj(v)) {
    fn(v);
    Object.values(v).forEach((x) => walk(x, fn));
  }
}

/**
 * What the Swagger generator cannot say by itself, fixed once for both documents so the spec says
 * exactly what the server does:
 * - `@Matches(/re/)` patterns come out as `"/re/"`: the bare ECMA-262 source, as JSON Schema wants.
 * - Every error response is the one JSON ErrorDto (routes that produce text/plain included).
 * - Request bodies, and every schema they reach, are closed (`additionalProperties: false`): the
 *   validation pipe rejects unknown fields.
 * - The bearer scheme is an opaque token, not a JWT.
 * - A 200 documented with an empty example body has no content.
 * - Every operation documents the 500 every route can answer.
 */
export function tidySpec(doc: OpenAPIObject): OpenAPIObject {
  walk(doc, (n) => {
    if (typeof n.pattern === 'string' && /^\/.*\/[a-z]*$/s.test(n.pattern)) n.pattern = n.pattern.slice(1, n.pattern.lastIndexOf('/'));
  });
  const schemas = (doc.components?.schemas ?? {}) as Record<string, Node>;
  const closed = new Set<string>();
  const close = (schema: unknown) =>
    walk(schema, (n) => {
      const ref = typeof n.$ref === 'string' ? n.$ref.replace('#/components/schemas/', '') : null;
      if (ref && !closed.has(ref) && schemas[ref]) {
        closed.add(ref);
        if (schemas[ref].type === 'object' || schemas[ref].properties) schemas[ref].additionalProperties = false;
        close(schemas[ref]);
      }
    });
  for (const item of Object.values(doc.paths)) {
    for (const op of Object.values(item as Record<string, Node>)) {
      if (!isObj(op) || !isObj(op.responses)) continue;
      const body = op.requestBody as Node | undefined;
      if (body) close(body);
      // Any route can fail unexpectedly; the answer is still the one error shape, with an error_id.
      const responses = op.responses as Record<string, Node>;
      responses['500'] ??= { description: 'Internal error: the message carries an error_id, under which the log has the details.' };
      for (const [status, res] of Object.entries(responses)) {
        if (Number(status) >= 400) res.content = { 'application/json': { schema: { $ref: '#/components/schemas/ErrorDto' } } };
        const text = (res.content as Record<string, Node> | undefined)?.['text/plain'];
        if (status === '200' && text && (text.schema as Node | undefined)?.example === '' && Object.keys(res.content as Node).length === 1) delete res.content;
      }
    }
  }
  for (const s of Object.values((doc.components?.securitySchemes ?? {}) as unknown as Record<string, Node>)) delete s.bearerFormat;
  return doc;
}
