#!/usr/bin/env bash
# Rebuilds Mailpit's web UI (tools/mailpit-ui/dist) from the sources in the Mailpit Go module
# that tools/go.mod pins, with npm. Needed only when that version changes: the result is
# committed, because Mailpit's Go module ships the UI's sources but not the compiled app.js and
# app.css its server embeds (without them http://127.0.0.1:8025 is a blank page), and a
# developer's `make run` must not need node or the npm registry.
#
# The npm inputs are tools/mailpit-ui/package.json and package-lock.json: Mailpit's own
# dependencies minus rapidoc (only its API docs page at /api/v1/ uses it; that page stays
# blank) and minus its lint and browser-test tools. Needs node 18+ and npm (Debian: nodejs npm).
set -euo pipefail
cd "$(dirname "$0")/.."
LOG_TAG=mailpit-ui
. scripts/lib.sh

command -v npm >/dev/null 2>&1 || { debian_root && apt_install "to build Mailpit's UI" nodejs npm; } ||
  die "npm is missing: install node 18+ and npm (Debian: apt-get install nodejs npm)"
version=$(cd tools && go list -m -f '{{.Version}}' github.com/axllent/mailpit)
src=$(cd tools && go mod download -json github.com/axllent/mailpit | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "building Mailpit $version's UI from $src in $work"
cp -r "$src/." "$work/" && chmod -R u+w "$work"
cp tools/mailpit-ui/package.json tools/mailpit-ui/package-lock.json "$work/"
sed -i 's|"server/ui-src/app.js", "server/ui-src/docs.js"|"server/ui-src/app.js"|' "$work/esbuild.config.mjs"
grep -q '\["server/ui-src/app.js"\]' "$work/esbuild.config.mjs" || die "esbuild.config.mjs changed upstream: adjust this script"
log "npm ci (downloads the UI's dependencies; about 30 s)"
(cd "$work" && npm ci --no-audit --no-fund --ignore-scripts --legacy-peer-deps >npm.log 2>&1) || { tail -20 "$work/npm.log" >&2; die "npm ci failed"; }
log "npm run build (esbuild)"
(cd "$work" && npm run build >>npm.log 2>&1) || { tail -20 "$work/npm.log" >&2; die "npm run build failed"; }
rm -rf tools/mailpit-ui/dist && cp -r "$work/server/ui/dist" tools/mailpit-ui/dist
echo "$version" >tools/mailpit-ui/VERSION
log "wrote tools/mailpit-ui/dist for Mailpit $version: commit it"
