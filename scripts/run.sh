#!/usr/bin/env bash
# `make run`: servers, Mailpit, migrate, serve with configs/dev.yaml. Ctrl-C stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh --mailpit
export MAILSVC_CONFIG=configs/dev.yaml
bin/mailsvc migrate
started_mailpit=""
[ -f .run/mailpit.pid ] && started_mailpit=$(cat .run/mailpit.pid)
cleanup() {
  [ -n "${serve_pid:-}" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
  [ -n "$started_mailpit" ] && kill "$started_mailpit" 2>/dev/null && rm -f .run/mailpit.pid
}
trap cleanup EXIT INT TERM
bin/mailsvc serve &
serve_pid=$!
echo "mailsvc serving: Mailpit UI http://127.0.0.1:8025, metrics http://127.0.0.1:8080/metrics"
wait "$serve_pid"
