#!/usr/bin/env bash
# Checks the Prometheus alert rules: `promtool check rules` (syntax, PromQL, templates) and
# `promtool test rules` (the unit tests in deploy/prometheus/alerts_test.yaml).
# promtool comes with Debian's `prometheus` package; when it is missing and we are root on
# Debian/Ubuntu, this installs the package without starting the Prometheus daemon.
set -euo pipefail
cd "$(dirname "$0")/.."

LOG_TAG=promtool
. scripts/lib.sh

install_promtool() {
  debian_root || die "promtool is missing: install Debian's 'prometheus' package (or put promtool on PATH)"
  # apt_install keeps the package from starting its Prometheus daemon.
  apt_install "promtool, to check deploy/prometheus" prometheus
  disable_at_boot prometheus
  log "Debian's prometheus service was not started and is disabled at boot (only promtool is used)"
}

command -v promtool >/dev/null 2>&1 || install_promtool
promtool check rules deploy/prometheus/alerts.yaml
promtool test rules deploy/prometheus/alerts_test.yaml
