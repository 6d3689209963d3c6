#!/usr/bin/env bash
# `make run`: PostgreSQL, RabbitMQ and Mailpit available, migrate, `mailsvc serve` with
# configs/dev.yaml, then a small realistic set of demo orders through the real broker.
# Ctrl-C stops what this script started (mailsvc, and Mailpit if it started it), nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
export MAILSVC_CONFIG=configs/dev.yaml
bin=bin/mailsvc

scripts/services.sh --mailpit
started_mailpit=""
[ -f .run/mailpit.pid ] && started_mailpit=$(cat .run/mailpit.pid)
serve_pid=""
cleanup() {
  trap - EXIT INT TERM
  if [ -n "$serve_pid" ]; then kill -TERM "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; fi
  if [ -n "$started_mailpit" ]; then kill "$started_mailpit" 2>/dev/null || true; rm -f .run/mailpit.pid; fi
  echo "stopped."
}
trap cleanup EXIT
trap 'exit 0' INT TERM

"$bin" migrate
mkdir -p .run
"$bin" serve >.run/mailsvc.log 2>&1 &
serve_pid=$!
for _ in $(seq 1 100); do
  curl -fs http://127.0.0.1:8080/readyz >/dev/null 2>&1 && break
  kill -0 "$serve_pid" 2>/dev/null || { echo "mailsvc serve exited; see .run/mailsvc.log:"; tail -20 .run/mailsvc.log; exit 1; }
  sleep 0.2
done

# Order ids unique to this run, so a second `make run` sends new mails.
base=$(( $(date +%s) % 1000000 * 10 ))
vi=$((base + 1)) en=$((base + 2)) dup=$((base + 3)) early=$((base + 4)) late=$((base + 5))
echo "== publishing demo orders through RabbitMQ (order ids $vi..$late)"
"$bin" emit order-confirmed --order-id "$vi" --locale vi --email "nguyen.van.b@example.com"
"$bin" emit order-confirmed --order-id "$en" --locale en --email "jane.doe@example.com"
"$bin" emit order-confirmed --order-id "$dup" --locale vi --email "tran.thi.c@example.com" --duplicate
"$bin" emit order-cancelled --order-id "$early"
"$bin" emit order-confirmed --order-id "$early" --locale en --email "early.cancel@example.com"
"$bin" emit order-confirmed --order-id "$late" --locale vi --email "late.cancel@example.com"
for _ in $(seq 1 50); do
  "$bin" mail show "order-confirmed:$late" 2>/dev/null | grep -q '^status: *sent' && break
  sleep 0.2
done
"$bin" emit order-cancelled --order-id "$late"
sleep 1

cat <<TXT

== mailsvc is running (logs: .run/mailsvc.log). Where to look:
  Mailpit (the mails):  http://127.0.0.1:8025
  Metrics:              http://127.0.0.1:8080/metrics   readiness: http://127.0.0.1:8080/readyz
  One mail's story:     MAILSVC_CONFIG=$MAILSVC_CONFIG $bin mail show order-confirmed:$vi
  An order's mails:     MAILSVC_CONFIG=$MAILSVC_CONFIG $bin mail show --order $late
Expected: 4 mails in Mailpit ($vi vi, $en en, $dup once despite the duplicate event, $late sent
before its cancel arrived -> EmailCancelTooLate); none for $early (cancelled before its confirm).

TXT
"$bin" mail show "order-confirmed:$late" || true
echo
echo "Press Ctrl-C to stop."
wait "$serve_pid"
