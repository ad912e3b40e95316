import { applyDecorators, Controller, Get, Header, Param, Req } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import { ApiExtraModels, ApiOkResponse, ApiOperation, ApiParam, ApiProduces, ApiQuery, ApiTags, getSchemaPath } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { Public } from '../../shared/http/auth.guard';
import { BootAnswer, BootService } from './boot.service';
import { IPXE_SCRIPTS, IpxeScriptsService } from './ipxe-scripts.service';
import { BootMenuDto, BootVarsDto, ChallengeDto } from './dto/boot-vars.dto';

/** The query of /boot-vars and /boot-menu: who is asking, the answer's form, and the signed nonce. */
function BootQuery() {
  return applyDecorators(
    Public(),
    Header('Cache-Control', 'no-store'),
    ApiProduces('text/plain', 'application/json'),
    ApiQuery({ name: 'mac', required: false, type: String, description: 'MAC in colon or bare-hex form' }),
    ApiQuery({ name: 'hostname', required: false, type: String }),
    ApiQuery({ name: 'format', required: false, enum: ['ipxe', 'json'] }),
    ApiQuery({ name: 'nonce', required: false, type: String, description: 'With signature enforcement: the nonce from /devices/challenge (64 hex digits)' }),
    ApiQuery({
      name: 'sig',
      required: false,
      type: String,
      description: 'With signature enforcement: ECDSA P-256/SHA-256 over nonce (32 bytes) || mac (6 bytes), raw r || s as 128 hex digits (not DER)',
    }),
  );
}

@ApiTags('boot')
@ApiExtraModels(BootVarsDto, BootMenuDto, ChallengeDto)
@Controller()
export class BootController {
  constructor(
    private readonly boot: BootService,
    private readonly scripts: IpxeScriptsService,
  ) {}

  // The Swagger plugin picks up no doc comment of these two handlers: their documentation is here, once.
  @ApiOperation({
    summary: 'Per-worker iPXE variables (no auth, read-only)',
    description:
      'Lookup: hostname, else mac -> bound worker; a mac not bound to the named worker gets the empty script. ' +
      'iSCSI default disk (seed 000): base-iqn, iscsi-server, iscsi-sep, and for a worker with disks on LIO or stgt the CHAP `username` and `password` iPXE answers the target with. ' +
      'NVMe/TCP default disk (seed 004): disk-nqn, storager-ip, nvme-port, hostnqn, tls-psk, dhchap-secret and dhchap-ctrl-secret, and no iSCSI variable; ' +
      'when that disk cannot be connected (credential revoked or not yet on its agent, port unknown or without TLS) no variable, never a fallback: the empty script plus an `echo` of the reason (a fixed boot-readiness message) and a 10 s `prompt`, so the console says why (format=json: `{}`). ' +
      'Secrets go only to the MAC bound to the worker, never to a hostname alone; with signature enforcement on (PUT /settings/signature-enforcement) only to the bound device\'s key.',
  })
  @ApiErrors('public', 400)
  @Get('boot-vars')
  @BootQuery()
  @ApiOkResponse({
    description: 'An iPXE script (default) or, with format=json, the same variables as JSON.',
    content: {
      'text/plain': {
        schema: {
          type: 'string',
          example:
            '#!ipxe\n# boot vars for worker-01\nset base-iqn iqn.2026-07.com.controller\nset iscsi-server 192.168.80.3\nset iscsi-sep :::1:\nset menu-default ubuntu\nset menu-timeout 5000\n',
        },
      },
      'application/json': { schema: { $ref: getSchemaPath(BootVarsDto) } },
    },
  })
  bootVars(@Req() req: FastifyRequest<{ Querystring: Record<string, unknown> }>): BootAnswer<string | BootVarsDto> {
    // The raw query through @Req (which no pipe touches) on the hottest route: BootService
    // validates by hand. A string goes out as text/plain, an object as application/json, a cached
    // answer as the bytes and headers it was encoded with (fast-routes.ts).
    const q = req.query;
    return this.boot.bootVars(q.mac, q.hostname, q.format ?? 'ipxe', q.nonce, q.sig);
  }

  @ApiOperation({
    summary: "The worker's boot menu items, one per disk it can boot now",
    description:
      'Named from its disk records: `set menu-count <n>` and `set menu-<i>-id|label|root` (root = `iscsi:<server><sep><iqn>` or ' +
      '`nvme://<server>:<port>/<nqn>`), plus `install-root` for an install CD. menu.ipxe builds its items from these. ' +
      'Same lookup and enforcement as /boot-vars (a signed nonce works once here and once there).',
  })
  @ApiErrors('public', 400)
  @Get('boot-menu')
  @BootQuery()
  @ApiOkResponse({
    description: 'An iPXE script of `set` lines (default) or, with format=json, the items as JSON.',
    content: {
      'text/plain': {
        schema: {
          type: 'string',
          example:
            '#!ipxe\n# boot menu for worker-01\nset menu-count 1\nset menu-0-id ubuntu\nset menu-0-label ubuntu (iscsi 3f2a9c1b7d4e)\nset menu-0-root iscsi:192.168.80.3:::1:iqn.2026-07.com.controller:worker-01.ubuntu\n',
        },
      },
      'application/json': { schema: { $ref: getSchemaPath(BootMenuDto) } },
    },
  })
  bootMenu(@Req() req: FastifyRequest<{ Querystring: Record<string, unknown> }>): BootAnswer<string | BootMenuDto> {
    const q = req.query;
    return this.boot.bootMenu(q.mac, q.hostname, q.format ?? 'ipxe', q.nonce, q.sig);
  }

  /**
   * One-time challenge for signature enforcement (no auth). The device signs, with ECDSA P-256 /
   * SHA-256, the 38 bytes `nonce (32 bytes) || mac (6 bytes)` and passes the raw `r || s` (128 hex
   * digits) as /boot-vars?...&nonce=<64 hex>&sig=<128 hex>. A nonce is bound to that MAC, lives
   * 60 s and works once for /boot-vars and once for /boot-menu, on whichever control plane of a
   * deployment answers (the nonce seals its MAC and expiry; spent nonces are shared through
   * PostgreSQL). Unknown MACs get an answer of the same form; nothing is stored when a nonce is issued.
   */
  @ApiErrors('public', 400)
  @Public()
  @Get('devices/challenge')
  @Header('Cache-Control', 'no-store')
  @ApiProduces('text/plain', 'application/json')
  @ApiQuery({ name: 'mac', required: true, type: String, description: 'MAC in colon or bare-hex form' })
  @ApiQuery({ name: 'format', required: false, enum: ['ipxe', 'json'] })
  @ApiOkResponse({
    description: '`set nonce <64 hex>` as an iPXE script, or `{nonce, expires_at}` with format=json.',
    content: {
      'text/plain': { schema: { type: 'string', example: '#!ipxe\n# challenge: sign nonce || mac with the device key\nset nonce 9f2c0a41e0b7c3d5a6f8e9d0c1b2a3948576a5b4c3d2e1f0a9b8c7d6e5f40312\n' } },
      'application/json': { schema: { $ref: getSchemaPath(ChallengeDto) } },
    },
  })
  challenge(@Req() req: FastifyRequest<{ Querystring: Record<string, unknown> }>): string | ChallengeDto {
    return this.boot.challenge(req.query.mac, req.query.format ?? 'ipxe');
  }

  /**
   * The scripts after the first hop, for an iPXE with HTTPS (no auth): the shipped
   * `boot.ipxe.cfg` and `menu.ipxe` (IPXE_CP_IPXE_SCRIPTS_DIR). Kurrent's iPXE chains them over
   * HTTPS with the controller's certificate pinned at build time, so nothing after the TFTP
   * pointer can be altered on the network; a stock iPXE keeps fetching them over TFTP.
   */
  @ApiErrors('public', 404)
  @Public()
  @Get('ipxe/:name')
  @Header('Cache-Control', 'no-store')
  @Header('Content-Type', 'text/plain; charset=utf-8')
  @ApiProduces('text/plain')
  @ApiParam({ name: 'name', enum: [...IPXE_SCRIPTS] })
  @ApiOkResponse({ description: 'The iPXE script.', content: { 'text/plain': { schema: { type: 'string', example: '#!ipxe\n...' } } } })
  ipxeScript(@Param('name') name: string): string {
    return this.scripts.script(name);
  }
}
