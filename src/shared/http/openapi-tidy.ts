import { MAC_INPUT } from '../grammars';
import type { OpenAPIObject } from '@nestjs/swagger';

type Node = Record<string, unknown>;

/** A MAC as the server answers it: lower-case colon form. */
const MAC_OUT = '^[0-9a-f]{2}(?::[0-9a-f]{2}){5}$';
const ID_IN = '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$';
const ID_OUT = '^[a-z0-9][a-z0-9._-]{0,62}$';
const AGENT = '^[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?$';
const IQN = '^iqn\\.\\d{4}-\\d{2}\\.[a-z0-9][a-z0-9.:-]*$';
const NQN = '^nqn\\.\\d{4}-\\d{2}\\.[a-z0-9][A-Za-z0-9._:-]*$';
const OS_TAG = '^[0-9a-f]{12}$';
const URL = '^https?://[^\\s/?#]+(?::\\d+)?/?$';

/**
 * Patterns of identifiers, by schema property, where the server guarantees (answers) or requires
 * (requests) the form. Fields that echo raw input back (a failed import's mac) have none.
 */
const PROPERTY_PATTERNS: Record<string, Record<string, string>> = {
  DeviceDto: { mac: MAC_OUT, bound_worker_id: ID_OUT },
  DnsmasqBindingDto: { mac: MAC_OUT, hostname: ID_OUT },
  WorkerDto: { mac: MAC_OUT, bound_device: MAC_OUT, worker_id: ID_OUT, hostname: ID_OUT, default_disk: OS_TAG },
  WorkerMacDto: { mac: MAC_OUT, bound_device: MAC_OUT, worker_id: ID_OUT, hostname: ID_OUT, default_disk: OS_TAG },
  DiskDto: { agent: AGENT, iqn: IQN, nqn: NQN, os_tag: OS_TAG },
  CdDto: { agent: AGENT, iqn: IQN },
  AgentDto: { id: AGENT, base_url: URL },
  CreateAgentDto: { id: AGENT, base_url: URL },
  UpdateAgentDto: { base_url: URL },
  ProbeAgentDto: { base_url: URL, agent_id: AGENT },
  BatchPairDto: { mac: MAC_INPUT, worker_id: ID_IN },
  ImportEntryDto: { mac: MAC_INPUT },
  BatchMatchedDto: { mac: MAC_OUT, worker_id: ID_OUT },
  BatchSucceededDto: { mac: MAC_OUT, worker_id: ID_OUT },
  BatchDiskTargetDto: { worker_id: ID_IN, agent: AGENT },
  BatchDiskOkDto: { worker_id: ID_OUT, agent: AGENT },
  CredentialDto: { worker_id: ID_OUT, hostnqn: NQN },
  CredentialPushDto: { agent: AGENT },
  BootVarsDto: { disk_nqn: NQN, hostnqn: NQN },
  BootMenuItemDto: { os_tag: OS_TAG },
  LunTargetDto: { iqn: IQN, nqn: NQN },
  CreatedLunDto: { iqn: '^(?:iqn|nqn)\\.\\d{4}-\\d{2}\\.' },
};

/** Path parameters: what the router accepts in each. */
const PATH_PATTERNS: Record<string, string> = { mac: MAC_INPUT, worker_id: ID_IN, agent_id: '^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$', hostnqn: NQN };

/** `absent` as a property schema: no value is valid, so the property must not be sent. */
const ABSENT = { not: {} };
/** Exactly one of two properties (each branch names both, so linters see every required one defined). */
const oneOfTwo = (a: string, b: string, extra: [Node, Node] = [{}, {}], also: string[] = []): Node => ({
  oneOf: [
    { properties: { ...extra[0], [a]: {}, [b]: ABSENT }, required: [...also, a] },
    { properties: { ...extra[1], [b]: {}, [a]: ABSENT }, required: [...also, b] },
  ],
});
/** type master needs name, type empty needs size (`type` is required anyway; naming it makes the branches exclusive to a linter too). */
const DISK_SOURCE = oneOfTwo('name', 'size', [{ type: { enum: ['master'] } }, { type: { enum: ['empty'] } }], ['type']);
/**
 * Rules between fields that a property list cannot say, as JSON Schema: exactly one of master or
 * size for a disk, exactly one of generate or dhchap_key, at least one field of default-os.
 */
const CONDITIONS: Record<string, Node> = {
  CreateDiskDto: DISK_SOURCE,
  BatchDiskDto: DISK_SOURCE,
  CreateLunDiskDto: oneOfTwo('master', 'size'),
  SetCredentialDto: oneOfTwo('generate', 'dhchap_key'),
  DefaultOsDto: { minProperties: 1 },
};
/** The first sentence of a doc comment (up to a full stop outside backticks), at most 120 characters. */
export function firstSentence(text: string): string {
  let inCode = false;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '`') inCode = !inCode;
    else if (!inCode && text[i] === '.' && (i === text.length - 1 || text[i + 1] === ' ')) return clip(text.slice(0, i));
  }
  return clip(text.replace(/\.$/, ''));
}

function clip(s: string): string {
  return s.length <= 120 ? s : `${s.slice(0, 119).replace(/\s+\S*$/, '')}…`;
}

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
 * - A route without the bearer scheme says so (`security: []`): it answers without a token.
 * - The doc comment of a route is its description; its first sentence is the summary.
 * - A nullable reference (`allOf: [$ref]`) says it is an object, as OpenAPI 3.0 wants beside `nullable`;
 *   a boolean enum is typed boolean.
 */
export function tidySpec(doc: OpenAPIObject): OpenAPIObject {
  walk(doc.components, (n) => {
    if (n.nullable === true && !n.type && Array.isArray(n.allOf)) n.type = 'object';
    // A string rule given for each element (`{ each: true }`) belongs to the items, not the array.
    if (n.type === 'array') for (const k of ['maxLength', 'minLength', 'pattern']) delete n[k];
    // The generator types any enum as number or string; `enum: [true]` is a boolean.
    if (Array.isArray(n.enum) && n.enum.length && n.enum.every((v) => typeof v === 'boolean')) n.type = 'boolean';
  });
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
      op.security ??= [];
      if (typeof op.summary === 'string' && op.description === undefined) {
        op.description = op.summary;
        op.summary = firstSentence(op.summary);
      }
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
  for (const [name, props] of Object.entries(PROPERTY_PATTERNS)) {
    for (const [prop, pattern] of Object.entries(props)) {
      const p = (schemas[name]?.properties as Record<string, Node> | undefined)?.[prop];
      if (!p) continue;
      const target = p.type === 'array' ? (p.items as Node) : p;
      if (target.type === 'string' && !target.pattern && !target.enum) target.pattern = pattern;
    }
  }
  for (const [name, rule] of Object.entries(CONDITIONS)) if (schemas[name]) Object.assign(schemas[name], rule);
  for (const item of Object.values(doc.paths)) {
    for (const op of Object.values(item as Record<string, Node>)) {
      for (const par of (op?.parameters as Node[] | undefined) ?? []) {
        const schema = par.schema as Node | undefined;
        if (par.in === 'path' && schema && !schema.pattern && !schema.enum && PATH_PATTERNS[par.name as string]) schema.pattern = PATH_PATTERNS[par.name as string];
      }
    }
  }
  return doc;
}
