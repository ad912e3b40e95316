# Kurrent storage agent (port 4840). Runs on the storage node, privileged for configfs/loop:
#   docker build -f docker/agent.Dockerfile -t kurrent/agent .
#   docker run --privileged --network host -v /srv/images:/images -e DISK_DIR=/images kurrent/agent
# The base (node 20 on Debian 12): NODE_IMAGE lets a site (or CI, scripts/image-check.sh) use its own build of it.
ARG NODE_IMAGE=node:20-bookworm-slim
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json nest-cli.json ./
COPY src ./src
COPY scripts ./scripts
COPY bench ./bench
RUN npx nest build && npm prune --omit=dev

FROM ${NODE_IMAGE}
# tgt: the stgt backend drives tgtadm against a tgtd started beside the agent.
RUN apt-get update && apt-get install -y --no-install-recommends tgt nvme-cli && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
ENV DISK_DIR=/images IPXE_AGENT_STATE_DIR=/app/agent-state
VOLUME ["/images", "/app/agent-state"]
EXPOSE 4840
# /healthz on the port the agent's settings give (IPXE_AGENT_PORT).
HEALTHCHECK --interval=10s --timeout=5s CMD ["node", "dist/scripts/wait-healthy.js", "--agent", "--timeout", "3"]
CMD ["sh", "-c", "if [ \"${IPXE_AGENT_BACKEND:-stgt}\" = stgt ]; then tgtd; fi; exec node dist/src/storage-agent/main.js"]
