import { Injectable, OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import { AuditService } from '../audit/audit.service';
import { BootSessionsService } from '../boots/boot-sessions.service';
import { CredentialRepository } from '../repositories/credentials/credential.repository';
import { LedgerRepository } from '../repositories/ledger/ledger.repository';
import { SettingsRepository } from '../repositories/settings/settings.repository';
import { AgentHealthWatcher } from '../storage-nodes/agent-health-watcher';
import { StorageNodeRegistry } from '../storage-nodes/storage-node-registry';
import { ChangeFeed } from './change-feed';

/** How often revision counters are compared (credentials and agents.yml change without an event of their own elsewhere). */
const REVISION_CHECK_MS = 1000;

/**
 * What feeds the change feed: every audit entry recorded here, every ledger change a boot answer
 * depends on (this process's commits, another control plane's, hand edits), boot events (written
 * here or read from the others), settings documents, agents going up or down, and the revisions
 * of the credentials and of agents.yml (another control plane's push, a hand edit).
 */
@Injectable()
export class ChangeSources implements OnModuleInit, OnModuleDestroy {
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly feed: ChangeFeed,
    private readonly audit: AuditService,
    private readonly ledger: LedgerRepository,
    private readonly boots: BootSessionsService,
    private readonly settings: SettingsRepository,
    private readonly credentials: CredentialRepository,
    private readonly registry: StorageNodeRegistry,
    private readonly agents: AgentHealthWatcher,
  ) {}

  onModuleInit(): void {
    this.audit.tap((e) => {
      this.feed.publish('audit');
      // What these operations change is read through other topics' reads too.
      if (e.op.startsWith('settings.') || e.op.startsWith('registration_window.')) this.feed.publish('settings');
      else if (e.op.startsWith('credential.')) this.feed.publish('ledger');
    });
    this.ledger.onBootChange(() => this.feed.publish('ledger'));
    this.ledger.onExternalChange(() => this.feed.publish('ledger'));
    this.boots.onChanged(() => this.feed.publish('boots'));
    this.settings.onChange(() => this.feed.publish('settings'));
    this.agents.onFlip(() => this.feed.publish('agents'));
    let creds = this.credentials.revision;
    let agents = this.registry.revision();
    this.timer = setInterval(() => {
      if (this.credentials.revision !== creds) {
        creds = this.credentials.revision;
        this.feed.publish('ledger');
      }
      if (this.registry.revision() !== agents) {
        agents = this.registry.revision();
        this.feed.publish('agents');
      }
    }, REVISION_CHECK_MS);
    this.timer.unref();
  }

  onModuleDestroy(): void {
    if (this.timer) clearInterval(this.timer);
  }
}
