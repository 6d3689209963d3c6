#!/usr/bin/env bash
# `make chromium` (a prerequisite of `make test`): makes a headless Chromium available for the
# console's browser tests (internal/console, chromedp). It uses a Chromium already on the PATH;
# otherwise, on Debian as root, it installs Debian's chromium package (and a font, so pages
# render text) without starting any service. It prints the browser it found or installed; the
# tests find it on the PATH, or through MAILSVC_CHROMIUM.
set -euo pipefail
cd "$(dirname "$0")/.."
LOG_TAG=chromium
. scripts/lib.sh

find_browser() { command -v chromium || command -v chromium-browser || command -v google-chrome || true; }
browser=$(find_browser)
if [ -z "$browser" ]; then
  debian_root || die "no Chromium found: install it (Debian: apt-get install chromium) and run this again"
  apt_install "headless browser for the console's browser tests" chromium fonts-dejavu-core
  browser=$(find_browser)
  [ -n "$browser" ] || die "chromium was installed but is not on the PATH"
fi
log "headless browser for the console tests: $browser ($("$browser" --version 2>/dev/null | head -1))"
