import { Controller, Get, Header, Query, Res } from '@nestjs/common';
import { ApiExtraModels, ApiOkResponse, ApiProduces, ApiQuery, ApiTags, getSchemaPath } from '@nestjs/swagger';
import type { FastifyReply } from 'fastify';
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
  bootVars(
    @Query('mac') mac: unknown,
    @Query('hostname') hostname: unknown,
    @Query('format') format: unknown,
    @Res({ passthrough: true }) res: FastifyReply,
  ): string | BootVarsDto {
    const r = this.boot.bootVars(mac, hostname, format ?? 'ipxe');
    res.type(r.contentType);
    return r.body;
  }
}
