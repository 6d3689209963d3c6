#!/usr/bin/env bash
# Prepares examples/node for the tests (e2e TestExamples) and runs its unit tests: installs
# Debian's nodejs and npm when node is missing (as root on Debian; elsewhere it says what to
# install), then `npm ci` from the committed package-lock.json when node_modules is missing or
# older than the lock file, then `node --test` (the projection's rules, no server).
set -euo pipefail
cd "$(dirname "$0")/.."
LOG_TAG=examples-node
. scripts/lib.sh

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  debian_root || die "node and npm are missing: install Node.js 18+ and npm (Debian: apt-get install nodejs npm)"
  apt_install "for the Node.js examples in examples/node" nodejs npm
fi
cd examples/node
if [ ! -e node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  log "npm ci in examples/node (amqplib, from the npm registry; a few seconds)"
  npm ci --no-audit --no-fund --ignore-scripts >/dev/null
fi
log "node --test in examples/node (the projection's rules)"
node --test >/dev/null || { node --test; die "examples/node unit tests failed"; }
