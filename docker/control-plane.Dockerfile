# Kurrent control plane (port 4839). Build from the repository root:
#   docker build -f docker/control-plane.Dockerfile -t kurrent/control-plane .
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
COPY web ./web
# npm run build: nest build, the bundle and its V8 code cache (src/start.ts), the web UI (web/dist).
RUN npm run build && npm prune --omit=dev

FROM ${NODE_IMAGE}
# docker-cli: the `docker:<container>` dnsmasq reload strategy (needs /var/run/docker.sock).
RUN apt-get update && apt-get install -y --no-install-recommends docker.io procps && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# The web UI's static files, served at /ui/ (IPXE_CP_WEB_DIR).
COPY --from=build /app/web/dist ./web/dist
COPY package.json ./
# The scripts GET /ipxe/{name} serves (IPXE_CP_IPXE_SCRIPTS_DIR).
COPY docker/tftp ./docker/tftp
ENV IPXE_CP_CONFIG_DIR=/app/config IPXE_CP_STATE_DIR=/app/state IPXE_CP_DNSMASQ_DIR=/app/dnsmasq
VOLUME ["/app/config", "/app/state", "/app/dnsmasq"]
EXPOSE 4839
# /healthz on the port (and scheme) the container's own settings give (IPXE_CP_PORT, IPXE_CP_TLS_*).
HEALTHCHECK --interval=10s --timeout=5s CMD ["node", "dist/scripts/wait-healthy.js", "--timeout", "3"]
# glibc's malloc as npm run start:prod sets it: large blocks mapped and given back (README, "Memory").
ENV MALLOC_MMAP_THRESHOLD_=16384 MALLOC_TRIM_THRESHOLD_=131072
CMD ["node", "--max-semi-space-size=16", "--single-threaded-gc", "dist/src/control-plane/start.js"]
