#!/usr/bin/env bash
# Checks the Prometheus alert rules: `promtool check rules` (syntax, PromQL, templates) and
# `promtool test rules` (the unit tests in deploy/prometheus/alerts_test.yaml).
# promtool comes with Debian's `prometheus` package; when it is missing and we are root on
# Debian/Ubuntu, this installs the package without starting the Prometheus daemon.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'promtool: %s\n' "$*" >&2; }

install_promtool() {
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    log "promtool is missing: install Debian's 'prometheus' package (or put promtool on PATH)"
    return 1
  fi
  log "installing promtool from Debian's prometheus package"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Install only: a policy-rc.d that answers 101 keeps the package from starting its daemon.
  local policy=/usr/sbin/policy-rc.d created=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created=1
  fi
  local rc=0
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null || rc=$?
  [ -n "$created" ] && rm -f "$policy"
  return "$rc"
}

command -v promtool >/dev/null 2>&1 || install_promtool
promtool check rules deploy/prometheus/alerts.yaml
promtool test rules deploy/prometheus/alerts_test.yaml
