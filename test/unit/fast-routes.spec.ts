import 'reflect-metadata';
import { Controller, Get } from '@nestjs/common';
import { Public } from '../../src/shared/http/auth.guard';
import { assertPublic, route } from '../../src/control-plane/boot/fast-routes';
import { BootController } from '../../src/control-plane/boot/boot.controller';
import { DevicesController } from '../../src/control-plane/devices/devices.controller';

@Controller()
class Probe {
  @Public()
  @Get('open')
  open(): string {
    return 'open';
  }

  @Get('guarded')
  guarded(): string {
    return 'guarded';
  }
}

describe('the boot fast path serves only routes marked @Public()', () => {
  it('the four boot routes carry @Public()', () => {
    expect(() =>
      assertPublic({
        '/boot-vars': route(BootController, 'bootVars', () => null),
        '/boot-menu': route(BootController, 'bootMenu', () => null),
        '/devices/challenge': route(BootController, 'challenge', () => null),
        '/devices/report': route(DevicesController, 'report', () => null),
      }),
    ).not.toThrow();
  });

  it('a handler without @Public() fails the start, naming the route and the method', () => {
    expect(() => assertPublic({ '/open': route(Probe, 'open', () => null) })).not.toThrow();
    expect(() => assertPublic({ '/guarded': route(Probe, 'guarded', () => null) })).toThrow(
      'the boot fast path would serve GET /guarded (Probe.guarded) without the auth guard, but it is not marked @Public()',
    );
  });
});
