#!/usr/bin/env bash
# Prepares examples/node for the tests (e2e TestExamples) and runs its unit tests: installs
# Debian's nodejs and npm when node is missing (as root on Debian; elsewhere it says what to
# install), then `npm ci` from the committed package-lock.json when node_modules is missing or
# older than the lock file (offline, the same amqplib tarball from vendor/, checked against the
# lock file's SHA-512), then `node --test` (the projection's rules, no server).
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
  if ! npm ci --no-audit --no-fund --ignore-scripts --fetch-retries=1 >/dev/null 2>&1; then
    # No registry (an offline machine): the same tarball is kept in vendor/, installed only
    # when its SHA-512 is the one package-lock.json pins.
    log "npm ci failed (npm registry unreachable?): installing amqplib from examples/node/vendor, checked against package-lock.json"
    node -e '
      const fs = require("fs"), crypto = require("crypto");
      const want = require("./package-lock.json").packages["node_modules/amqplib"].integrity;
      const got = "sha512-" + crypto.createHash("sha512").update(fs.readFileSync("vendor/amqplib-2.3.1.tgz")).digest("base64");
      if (got !== want) { console.error("vendor/amqplib-2.3.1.tgz is " + got + ", package-lock.json pins " + want); process.exit(1); }
    ' || die "examples/node/vendor/amqplib-2.3.1.tgz does not match package-lock.json"
    npm install --offline --no-save --no-audit --no-fund --ignore-scripts ./vendor/amqplib-2.3.1.tgz >/dev/null
  fi
fi
log "node --test in examples/node (the projection's rules)"
node --test >/dev/null || { node --test; die "examples/node unit tests failed"; }
