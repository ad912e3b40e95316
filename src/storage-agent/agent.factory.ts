import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, NestFastifyApplication } from '@nestjs/platform-fastify';
import { OpenAPIObject, SwaggerModule } from '@nestjs/swagger';
import { Logger } from 'nestjs-pino';
import { BODY_LIMIT, MAX_PARAM_LENGTH } from '../shared/http/http-limits';
import { operationId } from '../shared/http/operation-ids';
import { serveOpenApi } from '../shared/http/openapi-serve';
import { strictHttp } from '../shared/http/routes';
import { tidySpec } from '../shared/http/openapi-tidy';
import { documentBase } from '../shared/http/openapi-info';
import { AgentConfig } from './agent-config';
import { AgentModule } from './agent.module';

export function buildAgentOpenApi(app: NestFastifyApplication): OpenAPIObject {
  const cfg = documentBase(
    'Kurrent storage agent',
    'One storage node: image directory, masters, reflink clones, iSCSI (stgt, LIO) or NVMe/TCP (nvmet) targets. ' +
      'Called by the control plane only; `Authorization: Bearer <IPXE_AGENT_TOKEN>` when a token is set, on every route but /healthz.',
    4840,
    ['luns', 'masters', 'nvme', 'system'],
  )
    .addBearerAuth({ type: 'http', scheme: 'bearer', description: 'An opaque token (IPXE_AGENT_TOKEN), not a JWT.' })
    .build();
  return tidySpec(SwaggerModule.createDocument(app, cfg, { operationIdFactory: operationId }));
}

/** Builds the storage agent app (main, tests, OpenAPI script). */
export async function createAgentApp(config: AgentConfig, opts: { quiet?: boolean } = {}): Promise<NestFastifyApplication> {
  const app = await NestFactory.create<NestFastifyApplication>(
    AgentModule.forRoot(config),
    new FastifyAdapter({ bodyLimit: BODY_LIMIT, routerOptions: { maxParamLength: MAX_PARAM_LENGTH } }),
    { bufferLogs: true, logger: opts.quiet ? false : undefined, bodyParser: false },
  );
  strictHttp(app.getHttpAdapter().getInstance());
  if (!opts.quiet) app.useLogger(app.get(Logger));
  app.enableShutdownHooks();
  serveOpenApi(app, buildAgentOpenApi, false);
  return app;
}
