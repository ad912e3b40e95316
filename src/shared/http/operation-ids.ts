/**
 * The operationIds of both APIs: `<verb><Noun>` in camelCase, what generated clients call their
 * functions (`client.listDevices()`, `bindDevice`, `createWorkerDisk`). Keyed by
 * `<Controller>_<handler>` so a renamed handler keeps its id; a route missing here fails the
 * spec build, so every new route gets a name on purpose. Stable from issue 11 on: never rename.
 */
export const OPERATION_IDS: Readonly<Record<string, string>> = {
  // control plane
  Health_health: 'getHealth',
  StorageNodes_list: 'listAgents',
  StorageNodes_create: 'createAgent',
  StorageNodes_probe: 'probeAgent',
  StorageNodes_update: 'updateAgent',
  StorageNodes_remove: 'deleteAgent',
  StorageNodes_luns: 'listAgentLuns',
  StorageNodes_createDisk: 'createAgentDisk',
  StorageNodes_createCd: 'createAgentCd',
  StorageNodes_deleteLun: 'deleteAgentLun',
  StorageNodes_scan: 'scanAgentLuns',
  StorageNodes_masters: 'listMasters',
  Boot_bootVars: 'getBootVars',
  Boot_bootMenu: 'getBootMenu',
  Boot_challenge: 'getDeviceChallenge',
  Boot_ipxeScript: 'getIpxeScript',
  Devices_list: 'listDevices',
  Devices_register: 'registerDevice',
  Devices_get: 'getDevice',
  Devices_revoke: 'revokeDevice',
  Devices_import: 'importDevices',
  Devices_report: 'reportDevice',
  Devices_bind: 'bindDevice',
  Devices_unbind: 'unbindDevice',
  Devices_batch: 'bindDevicesBatch',
  Devices_preview: 'previewBindDevicesBatch',
  Devices_resetKey: 'resetDeviceKey',
  Devices_restore: 'restoreDevice',
  Devices_openWindow: 'openRegistrationWindow',
  Devices_window: 'getRegistrationWindow',
  Devices_closeWindow: 'closeRegistrationWindow',
  Audit_list: 'listOperations',
  Reconciler_run: 'runReconciler',
  Settings_admission: 'getAdmission',
  Settings_get: 'getAutoRegister',
  Settings_set: 'setAutoRegister',
  Settings_getEnforcement: 'getSignatureEnforcement',
  Settings_setEnforcement: 'setSignatureEnforcement',
  Settings_getBootPolicy: 'getBootPolicy',
  Settings_setBootPolicy: 'setBootPolicy',
  Boots_list: 'listBoots',
  Boots_osUp: 'reportOsUp',
  Boots_release: 'releaseBootHold',
  Changes_next: 'waitForChanges',
  Workers_list: 'listWorkers',
  Workers_create: 'createWorker',
  Workers_createBatch: 'createWorkersBatch',
  Workers_removeBatch: 'deleteWorkersBatch',
  Workers_get: 'getWorker',
  Workers_remove: 'deleteWorker',
  Workers_status: 'getWorkerStatus',
  Workers_setMac: 'setWorkerMac',
  Workers_setDefaultOs: 'setWorkerDefaultOs',
  Workers_setDefaultDisk: 'setWorkerDefaultDisk',
  Workers_createDisk: 'createWorkerDisk',
  Workers_createDisks: 'createWorkerDisksBatch',
  Workers_deleteDisk: 'deleteWorkerDisk',
  Credentials_get: 'getWorkerCredential',
  Credentials_set: 'setWorkerCredential',
  Credentials_revoke: 'revokeWorkerCredential',
  Metrics_scrape: 'getMetrics',
  // storage agent
  System_health: 'getHealth',
  System_capabilities: 'getCapabilities',
  System_usage: 'getUsage',
  Luns_list: 'listLuns',
  Luns_createDisk: 'createLunDisk',
  Luns_createCd: 'createLunCd',
  Luns_setAccess: 'setLunAccess',
  Luns_remove: 'deleteLun',
  Luns_scan: 'scanLuns',
  Luns_listMasters: 'listMasters',
  Luns_sessions: 'listInitiatorSessions',
  NvmeHosts_list: 'listNvmeHosts',
  NvmeHosts_put: 'putNvmeHost',
  NvmeHosts_remove: 'deleteNvmeHost',
};

/** operationIdFactory of both documents. */
export function operationId(controllerKey: string, methodKey: string): string {
  const key = `${controllerKey.replace(/Controller$/, '')}_${methodKey}`;
  const id = OPERATION_IDS[key];
  if (!id) throw new Error(`no operationId for ${key}: add one to src/shared/http/operation-ids.ts`);
  return id;
}
