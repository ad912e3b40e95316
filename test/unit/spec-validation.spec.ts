import 'reflect-metadata';
import { getMetadataStorage } from 'class-validator';
import * as fs from 'node:fs';
import * as path from 'node:path';
// Loading both module graphs registers every DTO class's validation metadata.
import '../../src/control-plane/app.module';
import '../../src/storage-agent/agent.module';

/**
 * The spec says everything the server enforces (issue 28: an outside fuzzer's "rejected valid
 * data" came from a spec that said less). For every request schema in either document whose
 * DTO class carries class-validator rules, each rule must show in the schema: a required field is
 * `required`, a pattern (or a MAC, agent-name or address grammar) has `pattern`, bounds have
 * minimum/maximum/minLength/maxLength/minItems/maxItems, an `IsIn` is an `enum`. Rules a schema
 * cannot express (a token's placeholders, cross-field rules) are not compared.
 */

type Schema = { properties?: Record<string, Prop>; required?: string[] };
type Prop = Record<string, unknown> & { items?: Record<string, unknown> };

const load = (f: string) => JSON.parse(fs.readFileSync(path.join(__dirname, '../../openapi', f), 'utf8')).components.schemas as Record<string, Schema>;
const specs = { 'control-plane': load('control-plane.openapi.json'), agent: load('agent.openapi.json') };

interface Rule {
  name: string;
  property: string;
  each: boolean;
  constraints: unknown[];
}

function rulesByClass(): Map<string, Rule[]> {
  const storage = getMetadataStorage() as unknown as { validationMetadatas: Map<Function, { name?: string; type: string; propertyName: string; each?: boolean; constraints?: unknown[] }[]> };
  const out = new Map<string, Rule[]>();
  for (const [target, metas] of storage.validationMetadatas) {
    const list = metas.map((m) => ({ name: m.name ?? m.type, property: m.propertyName, each: !!m.each, constraints: m.constraints ?? [] }));
    out.set(target.name, list);
  }
  return out;
}

/** What one rule demands of the schema of its property; null when a schema cannot say it. */
function demand(r: Rule): { key: string; where: 'self' | 'items' } | null {
  const where = r.each ? 'items' : 'self';
  switch (r.name) {
    case 'matches':
      return { key: 'pattern', where };
    case 'min':
      return { key: 'minimum', where };
    case 'max':
      return { key: 'maximum', where };
    case 'maxLength':
      return { key: 'maxLength', where };
    case 'minLength':
      return { key: 'minLength', where };
    case 'arrayMaxSize':
      return { key: 'maxItems', where: 'self' };
    case 'arrayMinSize':
      return { key: 'minItems', where: 'self' };
    case 'isIn':
      return { key: 'enum', where };
    // Our own combined validators (src/shared/validators.ts): each has a grammar a pattern states.
    case 'isMac':
    case 'isAgentName':
    case 'isAddress':
      return { key: 'pattern', where };
    default:
      return null;
  }
}

describe('the OpenAPI request schemas say what the validation pipe enforces', () => {
  const rules = rulesByClass();
  const cases: [string, string, Schema, Rule[]][] = [];
  for (const [doc, schemas] of Object.entries(specs)) {
    for (const [name, schema] of Object.entries(schemas)) {
      const r = rules.get(name);
      if (r?.length) cases.push([doc, name, schema, r]);
    }
  }

  it('finds the request DTOs of both documents', () => {
    const names = cases.map(([d, n]) => `${d}:${n}`);
    for (const n of ['control-plane:OpenWindowDto', 'control-plane:CreateDiskDto', 'control-plane:CreateAgentDto', 'control-plane:SetCredentialDto', 'agent:CreateLunDiskDto', 'agent:SetLunAccessDto']) {
      expect(names).toContain(n);
    }
  });

  it.each(cases.map(([doc, name, schema, r]) => [`${doc} ${name}`, schema, r] as const))('%s', (_label, schema, r) => {
    const missing: string[] = [];
    const optional = new Set(r.filter((x) => x.name === 'isOptional' || x.name === 'conditionalValidation').map((x) => x.property));
    for (const prop of new Set(r.map((x) => x.property))) {
      if (!optional.has(prop) && !(schema.required ?? []).includes(prop)) missing.push(`${prop}: required`);
    }
    for (const rule of r) {
      const want = demand(rule);
      if (!want) continue;
      const p = schema.properties?.[rule.property];
      const target = want.where === 'items' ? p?.items : p;
      if (!target || target[want.key] === undefined) missing.push(`${rule.property}: ${want.key} (${rule.name})`);
    }
    expect(missing).toEqual([]);
  });
});
