import { Injectable } from '@nestjs/common';
import { Clock } from '../../common/clock';
import { NonceClaim, NonceRepository } from './nonce.repository';

/**
 * Files (one control plane): a random key per process start (a restart voids the nonces of the
 * last minute: the device's next boot asks again) and the spent set in memory.
 */
@Injectable()
export class FileNonceRepository extends NonceRepository {
  constructor(clock: Clock) {
    super(clock);
  }

  protected init(): Promise<void> {
    return Promise.resolve();
  }

  protected claimShared(): NonceClaim {
    return 'claimed';
  }
}
