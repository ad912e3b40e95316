import 'reflect-metadata';
import { runMain } from '../shared/http/bootstrap';
import { loadAgentConfig } from './agent-config';
import { createAgentApp } from './agent.factory';

void runMain('kurrent-agent', () => loadAgentConfig(process.env), (c) => createAgentApp(c), 'IPXE_AGENT_TOKEN', 'IPXE_AGENT_HOST', 'IPXE_AGENT_PORT');
