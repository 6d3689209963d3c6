#!/usr/bin/env bash
# Outside checks of the contract in api/, run by hand after changing a schema (not part of
# make test, which must not depend on downloading them): npm ci in tools/modelina (from its
# committed package-lock.json: @asyncapi/modelina, @asyncapi/parser, ajv, ajv-formats), then
#   - the model names @asyncapi/modelina generates from api/asyncapi.yaml (compare them with
#     docs/contract.md, "Generated models");
#   - every schema of api/schemas compiled by Ajv in strict mode.
# Needs node 18+ and npm (Debian: nodejs npm; installed as root when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
LOG_TAG=contract-tools
. scripts/lib.sh

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  debian_root || die "node and npm are missing: install Node.js 18+ and npm (Debian: apt-get install nodejs npm)"
  apt_install "for the contract checks in tools/modelina" nodejs npm
fi
if [ ! -e tools/modelina/node_modules/.package-lock.json ] || [ tools/modelina/package-lock.json -nt tools/modelina/node_modules/.package-lock.json ]; then
  log "npm ci in tools/modelina (about 300 packages from the npm registry; under a minute)"
  (cd tools/modelina && npm ci --no-audit --no-fund --ignore-scripts >/dev/null)
fi
log "model names from @asyncapi/modelina (about 20 s)"
node tools/modelina/names.js api/asyncapi.yaml
node tools/modelina/ajv-strict.js api/schemas
