import { Controller, Get, Header, Req } from '@nestjs/common';
import type { FastifyRequest } from 'fastify';
import { ApiExtraModels, ApiOkResponse, ApiProduces, ApiQuery, ApiTags, getSchemaPath } from '@nestjs/swagger';
import { ApiErrors } from '../common/api-errors.decorator';
import { Public } from '../common/auth.guard';
import { BootService } from './boot.service';
import { BootVarsDto } from './dto/boot-vars.dto';

@ApiTags('boot')
@ApiExtraModels(BootVarsDto)
@Controller()
export class BootController {
  constructor(private readonly boot: BootService) {}

  /**
   * Per-worker iPXE variables (no auth, read-only). Lookup: hostname, else mac -> bound worker;
   * a mac not bound to the named worker gets the empty script.
   */
  @ApiErrors('public', 400)
  @Public()
  @Get('boot-vars')
  @Header('Cache-Control', 'no-store')
  @ApiProduces('text/plain', 'application/json')
  @ApiQuery({ name: 'mac', required: false, type: String, description: 'MAC in colon or bare-hex form' })
  @ApiQuery({ name: 'hostname', required: false, type: String })
  @ApiQuery({ name: 'format', required: false, enum: ['ipxe', 'json'] })
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
  bootVars(@Req() req: FastifyRequest<{ Querystring: Record<string, unknown> }>): string | BootVarsDto {
    // The raw query through @Req (which no pipe touches) on the hottest route: BootService
    // validates by hand. A string goes out as text/plain, an object as application/json.
    const q = req.query;
    return this.boot.bootVars(q.mac, q.hostname, q.format ?? 'ipxe');
  }
}
