#!/usr/bin/env bash
# `make run`: PostgreSQL, RabbitMQ and Mailpit available, migrate, `mailsvc serve` with
# configs/dev.yaml, then a small realistic set of demo orders through the real broker.
# Ctrl-C stops what this run started (mailsvc; Mailpit, PostgreSQL and RabbitMQ when this run
# started them) and says which servers it leaves running because they were there before.
set -euo pipefail
cd "$(dirname "$0")/.."
export MAILSVC_CONFIG=configs/dev.yaml
bin=bin/mailsvc
say() { printf '== %s\n' "$*"; }

mkdir -p .run
export MAILSVC_SERVICES_STARTED=.run/started.$$
: >"$MAILSVC_SERVICES_STARTED"
serve_pid=""
files_pid=""
cleanup() {
  trap - EXIT INT TERM
  echo
  if [ -n "$files_pid" ]; then
    kill -TERM "$files_pid" 2>/dev/null || true
    wait "$files_pid" 2>/dev/null || true
  fi
  if [ -n "$serve_pid" ]; then
    say "stopping mailsvc serve"
    kill -TERM "$serve_pid" 2>/dev/null || true
    wait "$serve_pid" 2>/dev/null || true
  fi
  local ours
  mapfile -t ours <"$MAILSVC_SERVICES_STARTED"
  rm -f "$MAILSVC_SERVICES_STARTED"
  if [ ${#ours[@]} -gt 0 ]; then
    say "stopping what this run started: ${ours[*]}"
    scripts/services.sh stop "${ours[@]}" || true
  fi
  [ -n "${used:-}" ] && say "left running as they were before this run: $used"
  echo "stopped."
}
trap cleanup EXIT
trap 'exit 0' INT TERM

say "making PostgreSQL, RabbitMQ and Mailpit available (scripts/services.sh)"
scripts/services.sh --mailpit
. .run/dev.env
used="" # servers this run uses but did not start: named on Ctrl-C
grep -qx postgres "$MAILSVC_SERVICES_STARTED" || grep -qx compose:postgres "$MAILSVC_SERVICES_STARTED" ||
  used+="PostgreSQL (${MAILSVC_DATABASE_URL#*@}); "
grep -qx rabbitmq "$MAILSVC_SERVICES_STARTED" || grep -qx compose:rabbitmq "$MAILSVC_SERVICES_STARTED" ||
  used+="RabbitMQ (${MAILSVC_AMQP_URL#*@}); "
grep -qx mailpit "$MAILSVC_SERVICES_STARTED" || used+="the SMTP server on 127.0.0.1:1025; "
used=${used%; }

say "mailsvc migrate (database ${MAILSVC_DATABASE_URL#*@})"
"$bin" migrate
# The shop's object store for the demo's invoice: bin/demofiles serves .run/demo-files/files over
# HTTPS on 127.0.0.1:8443 with a certificate it makes, which mailsvc trusts for attachments only.
# 127.0.0.1 is a private address: attachments.allow_private is for this demo, not production.
say "starting the demo's file server (an object store holding the invoice PDF): https://127.0.0.1:8443/"
mkdir -p .run/demo-files/files
rm -f .run/demo-files/ca.pem
bin/demofiles -dir .run/demo-files/files -addr 127.0.0.1:8443 -ca .run/demo-files/ca.pem >.run/demofiles.log 2>&1 &
files_pid=$!
for _ in $(seq 1 50); do [ -s .run/demo-files/ca.pem ] && break; sleep 0.1; done
[ -s .run/demo-files/ca.pem ] || { echo "the demo's file server did not start; see .run/demofiles.log"; exit 1; }
export MAILSVC_ATTACHMENTS_ALLOWED_HOSTS=127.0.0.1 MAILSVC_ATTACHMENTS_ALLOW_PRIVATE=true
export MAILSVC_ATTACHMENTS_TLS_CA_FILE="$PWD/.run/demo-files/ca.pem"

say "starting mailsvc serve (logs: .run/mailsvc.log), waiting for /readyz"
"$bin" serve >.run/mailsvc.log 2>&1 &
serve_pid=$!
for _ in $(seq 1 150); do
  curl -fs http://127.0.0.1:8080/readyz >/dev/null 2>&1 && break
  kill -0 "$serve_pid" 2>/dev/null || { echo "mailsvc serve exited; see .run/mailsvc.log:"; tail -20 .run/mailsvc.log; exit 1; }
  sleep 0.2
done

status_of() { "$bin" mail show "order-confirmed:$1" 2>/dev/null | sed -n 's/^status: *//p'; }
wait_status() { # order-id status seconds
  local i
  for ((i = 0; i < $3 * 5; i++)); do [ "$(status_of "$1")" = "$2" ] && return 0; sleep 0.2; done
  echo "order $1 did not reach status $2 within $3 s (now: $(status_of "$1")); see .run/mailsvc.log" >&2
  return 1
}

# Order ids unique to this run, so a second `make run` sends new mails.
base=$(( $(date +%s) % 1000000 * 10 ))
vi=$((base + 1)) en=$((base + 2)) dup=$((base + 3)) early=$((base + 4)) late=$((base + 5)) inv=$((base + 6))
# The invoice of order $inv: a small PDF the order service would have rendered and uploaded.
invoice=".run/demo-files/files/invoice-$inv.pdf"
printf '%%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj\n3 0 obj << /Type /Page /Parent 2 0 R /MediaBox [0 0 300 144] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >> endobj\n4 0 obj << /Length 52 >> stream\nBT /F1 18 Tf 20 70 Td (Invoice %s: 1,400,000 VND) Tj ET\nendstream endobj\n5 0 obj << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> endobj\ntrailer << /Root 1 0 R >>\n%%%%EOF\n' "$inv" >"$invoice"
say "publishing demo orders through RabbitMQ (order ids $vi..$inv)"
"$bin" emit order-confirmed --order-id "$vi" --locale vi --email "nguyen.van.b@example.com"
"$bin" emit order-confirmed --order-id "$inv" --locale vi --email "le.thi.d@example.com" \
  --attach-url "https://127.0.0.1:8443/invoice-$inv.pdf" --attach-file "$invoice" --attach-name "Hóa đơn $inv.pdf"
"$bin" emit order-confirmed --order-id "$en" --locale en --email "jane.doe@example.com"
"$bin" emit order-confirmed --order-id "$dup" --locale vi --email "tran.thi.c@example.com" --duplicate
"$bin" emit order-cancelled --order-id "$early"
"$bin" emit order-confirmed --order-id "$early" --locale en --email "early.cancel@example.com"
"$bin" emit order-confirmed --order-id "$late" --locale vi --email "late.cancel@example.com"
say "waiting until the mails are sent, then cancelling order $late (too late: it was sent)"
for o in "$vi" "$en" "$dup" "$late" "$inv"; do wait_status "$o" sent 30; done
"$bin" emit order-cancelled --order-id "$late"
say "waiting for the cancellation notice that the late cancel of order $late sends"
for _ in $(seq 1 150); do
  "$bin" mail show "order-cancelled:$late" 2>/dev/null | grep -q '^status: *sent' && break
  sleep 0.2
done

# The database gauges (mailsvc_mails{status} ...) come from one query every 5 s: wait for the
# first refresh after the demo, so /metrics shows it.
say "waiting for the database gauges' next refresh (every 5 s) so /metrics shows the demo"
t0=$(date +%s)
for _ in $(seq 1 50); do
  last=$(curl -fs http://127.0.0.1:8080/metrics | awk '/^mailsvc_stats_last_refresh_timestamp_seconds /{printf "%d", $2}')
  [ "${last:-0}" -gt "$t0" ] && break
  sleep 0.2
done

purge=rabbitmqctl
[[ $MAILSVC_AMQP_URL == *:5672/* ]] || purge="scripts/services.sh rabbitmqctl"
cli="MAILSVC_CONFIG=$MAILSVC_CONFIG $bin" # configs/dev.yaml names the default ports
[[ $MAILSVC_DATABASE_URL == *:5432/* && $MAILSVC_AMQP_URL == *:5672/* ]] || cli=". .run/dev.env; $cli"
owner=$(cat .run/mailpit.owner 2>/dev/null || echo unknown)
cat <<TXT

== mailsvc is running (logs: .run/mailsvc.log). Where to look:
  Mailpit (the mails):  http://127.0.0.1:8025   SMTP 127.0.0.1:1025: $owner
  Metrics:              http://127.0.0.1:8080/metrics   readiness: http://127.0.0.1:8080/readyz
  Support console:      http://127.0.0.1:8082/orders/$vi   demo logins: operator / operator-demo,
                        viewer / viewer-demo; API: curl -H 'Authorization: Bearer helpdesk-demo-token' \
                        http://127.0.0.1:8082/api/v1/orders/$vi/mails   (docs/console.md)
  One mail's story:     $cli mail show order-confirmed:$vi
  An order's mails:     $cli mail show --order $late
Expected: 6 mails in Mailpit ($vi vi, $en en, $dup once despite the duplicate event, $late sent
before its cancel arrived -> EmailCancelTooLate, then $late's cancellation notice "Đơn hàng
#$late đã bị hủy", $inv with its invoice "Hóa đơn $inv.pdf" attached, fetched by reference from
the demo's file server); none for $early (cancelled before its confirm).
  The invoice's story:  $cli mail show order-confirmed:$inv
The database gauges (mailsvc_mails{status}, ...) refresh every 5 s; this banner waited for one.
In mailsvc_events_consumed_total this run adds 2 to outcome="duplicate": the second copy of
$dup's event, and $early's confirmation, whose key the cancel's tombstone already held.
The feedback events (8 per run: EmailSent x6 with the notice's, EmailCancelled for $early,
EmailCancelTooLate for $late) go to amqp.events_exchange and pile up in queue mail.events.dev, which keeps them for
you to read (nothing consumes it); empty it with: $purge purge_queue mail.events.dev

TXT
"$bin" mail show "order-confirmed:$late" || true
echo
ours=$(paste -sd' ' "$MAILSVC_SERVICES_STARTED")
echo "Press Ctrl-C to stop mailsvc${ours:+ and what this run started ($ours)}.${used:+ Left running: $used.}"
wait "$serve_pid"
