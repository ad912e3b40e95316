import Ajv, { ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import * as fs from 'node:fs';
import * as path from 'node:path';

/**
 * Every response an e2e test gets through the injector is checked against the committed spec:
 * its status must be documented for that operation (or be one of the framework's answers that
 * every route shares: 404 for an unknown path, 405, 413, 415), its media type must be one the
 * spec lists, and a JSON body must validate against the documented schema. A spec that lies fails
 * the test that caught it, naming the operation.
 */
type Doc = { paths: Record<string, Record<string, { operationId: string; responses: Record<string, { content?: Record<string, { schema?: unknown }> }> }>>; components: unknown };

interface Compiled {
  doc: Doc;
  ajv: Ajv;
  routes: { re: RegExp; template: string }[];
  cache: Map<string, ValidateFunction>;
}

const specs = new Map<string, Compiled>();

function load(file: string): Compiled {
  let c = specs.get(file);
  if (c) return c;
  const doc = JSON.parse(fs.readFileSync(path.join(__dirname, '../../openapi', file), 'utf8')) as Doc;
  const ajv = new Ajv({ strict: false, allErrors: true });
  addFormats(ajv);
  ajv.addSchema({ $id: 'spec', components: rebase(doc.components) } as object);
  const routes = Object.keys(doc.paths)
    .map((t) => ({ template: t, re: new RegExp(`^${t.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+')}$`) }))
    // Literal segments win over parameters (/workers/batch before /workers/{worker_id}).
    .sort((a, b) => (a.template.match(/\{/g)?.length ?? 0) - (b.template.match(/\{/g)?.length ?? 0));
  c = { doc, ajv, routes, cache: new Map() };
  specs.set(file, c);
  return c;
}

/**
 * Rewrites `#/components/...` refs to the registered spec document, and OpenAPI 3.0's
 * `nullable: true` (which JSON Schema cannot read) into `anyOf: [that, null]`.
 */
function rebase(schema: unknown): unknown {
  const fix = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(fix);
    if (!v || typeof v !== 'object') return v;
    const o = Object.fromEntries(Object.entries(v).map(([k, x]) => [k, fix(x)])) as Record<string, unknown>;
    if (o.nullable === true) {
      const { nullable: _n, ...rest } = o;
      return { anyOf: [rest, { type: 'null' }] };
    }
    return o;
  };
  return fix(JSON.parse(JSON.stringify(schema).replace(/"#\/components\//g, '"spec#/components/')));
}

export function checkResponse(file: string, method: string, url: string, status: number, contentType: string | undefined, text: string): void {
  const c = load(file);
  if (/^\/(openapi\.(json|yaml)|docs)/.test(url)) return; // the spec and Swagger UI themselves
  const pathname = url.split('?')[0].replace(/\/+$/, '') || '/';
  const route = c.routes.find((r) => r.re.test(pathname));
  if (!route) {
    if (status === 404) return; // no such path: the one JSON 404 of the framework
    throw new Error(`spec check: ${method} ${pathname} answered ${status} but the spec has no such path`);
  }
  const op = c.doc.paths[route.template][method.toLowerCase()];
  if (!op) {
    if (status === 405 || (method === 'HEAD' && status < 400)) return;
    throw new Error(`spec check: ${method} ${route.template} answered ${status} but the spec has no such operation`);
  }
  if ([413, 415].includes(status)) return; // shared by every body-taking route
  const res = op.responses[String(status)];
  if (!res) throw new Error(`spec check: ${op.operationId} (${method} ${route.template}) answered ${status}, which its spec does not document (documented: ${Object.keys(op.responses).join(', ')})`);
  if (!res.content) {
    if (text !== '') throw new Error(`spec check: ${op.operationId} ${status} documents no body but got ${text.slice(0, 80)}`);
    return;
  }
  const type = (contentType ?? '').split(';')[0].trim();
  const media = res.content[type];
  if (!media) throw new Error(`spec check: ${op.operationId} ${status} answered ${type || 'no content-type'}, the spec lists ${Object.keys(res.content).join(', ')}`);
  if (type !== 'application/json' || !media.schema) return;
  const key = `${op.operationId} ${status}`;
  let validate = c.cache.get(key);
  if (!validate) {
    validate = c.ajv.compile(rebase(media.schema) as object);
    c.cache.set(key, validate);
  }
  if (!validate(JSON.parse(text))) {
    throw new Error(`spec check: ${key} body does not match its schema: ${c.ajv.errorsText(validate.errors, { separator: '; ' })}; body ${text.slice(0, 300)}`);
  }
}
