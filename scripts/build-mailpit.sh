#!/usr/bin/env bash
# Builds bin/mailpit: the Mailpit that tools/go.mod pins, with its web UI. Mailpit's Go module
# has the UI's sources but not the compiled app.js/app.css its server embeds, so this copies
# the module, puts tools/mailpit-ui/dist (built by scripts/mailpit-ui.sh, committed) where the
# embed expects it, and builds that copy in place of the module (a replace directive in a
# private copy of tools/go.mod: same dependency versions, nothing downloaded beyond them).
set -euo pipefail
cd "$(dirname "$0")/.."
LOG_TAG=mailpit
. scripts/lib.sh

version=$(cd tools && go list -m -f '{{.Version}}' github.com/axllent/mailpit)
ui=$(cat tools/mailpit-ui/VERSION 2>/dev/null || echo none)
[ "$ui" = "$version" ] || die "tools/mailpit-ui/dist was built for Mailpit $ui, tools/go.mod pins $version: run scripts/mailpit-ui.sh (needs npm) and commit tools/mailpit-ui"
src=$(cd tools && go mod download -json github.com/axllent/mailpit | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -n "$src" ] || die "cannot find the Mailpit module ($version)"
work=$PWD/bin/.mailpit-build
rm -rf "$work" && mkdir -p "$work"
cp -r "$src" "$work/src" && chmod -R u+w "$work/src"
cp -r tools/mailpit-ui/dist "$work/src/server/ui/dist"
cp tools/go.mod "$work/go.mod" && cp tools/go.sum "$work/go.sum"
echo "replace github.com/axllent/mailpit => $work/src" >>"$work/go.mod"
log "building bin/mailpit (Mailpit $version with its web UI; about a minute the first time)"
(cd tools && go build -modfile="$work/go.mod" -trimpath \
  -ldflags "-s -w -X github.com/axllent/mailpit/config.Version=$version" -o ../bin/mailpit github.com/axllent/mailpit)
rm -rf "$work"
