import { Controller, Get, Query } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { ApiErrors } from '../../shared/http/api-errors.decorator';
import { ChangeFeed } from './change-feed';
import { ChangesDto, ChangesQueryDto } from './dto/changes.dto';

@ApiTags('changes')
@Controller('changes')
export class ChangesController {
  constructor(private readonly feed: ChangeFeed) {}

  /**
   * A long-poll: answers at once when something changed after `cursor`, else at the first change
   * or after `wait` seconds. The web UI keeps one of these open instead of polling each page; a
   * script can follow the fleet the same way. Changes within 250 ms are answered together.
   */
  @ApiErrors(400)
  @Get()
  next(@Query() q: ChangesQueryDto): Promise<ChangesDto> {
    return this.feed.next(q.cursor, (q.wait ?? 25) * 1000);
  }
}
