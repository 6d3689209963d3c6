#!/usr/bin/env bash
# `make ui-check`, with `make run` going: looks at Mailpit's inbox the way a person does. A
# headless Chromium loads http://127.0.0.1:8025, runs its JavaScript, and this checks that the
# subjects of the newest mails (the demo's, read from Mailpit's API) are on the rendered page,
# then saves a screenshot in .run/mailpit-inbox.png. On Debian as root it installs Debian's
# chromium package when no Chromium is found.
set -euo pipefail
cd "$(dirname "$0")/.."
LOG_TAG=ui-check
. scripts/lib.sh
ui=${MAILPIT_UI:-http://127.0.0.1:8025}
n=${UI_CHECK_MAILS:-6} # the demo of make run delivers 6 mails (5 confirmations, one with its invoice, 1 cancellation notice)

browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  debian_root || die "no Chromium found: install it (Debian: apt-get install chromium) and run this again"
  apt_install "headless browser for the UI check" chromium fonts-dejavu-core
  browser=$(command -v chromium)
fi

curl -fsS --max-time 5 "$ui/api/v1/info" >/dev/null || die "no Mailpit answers at $ui: start make run first"
for a in app.js app.css; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "$ui/dist/$a")
  [ "$code" = 200 ] || die "$ui/dist/$a answers $code: this Mailpit has no web UI (bin/mailpit is built by scripts/build-mailpit.sh)"
done
# The newest n subjects, from the API's JSON (Go's encoder writes UTF-8 as is; undo its \u escapes of <, >, &).
mapfile -t subjects < <(curl -fsS "$ui/api/v1/messages?limit=$n" | grep -o '"Subject":"[^"]*"' |
  sed -e 's/^"Subject":"//' -e 's/"$//' -e 's/\\u003c/</g' -e 's/\\u003e/>/g' -e 's/\\u0026/\&/g')
[ ${#subjects[@]} -ge "$n" ] || die "Mailpit holds ${#subjects[@]} mails, expected at least $n: did make run's demo finish?"

mkdir -p .run
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,800 --virtual-time-budget=15000)
log "rendering $ui in $browser"
"$browser" "${flags[@]}" --dump-dom "$ui/" >.run/mailpit-inbox.html 2>.run/chromium.log ||
  { tail -5 .run/chromium.log >&2; die "chromium failed (log: .run/chromium.log)"; }
"$browser" "${flags[@]}" --screenshot="$PWD/.run/mailpit-inbox.png" "$ui/" >>.run/chromium.log 2>&1 ||
  { tail -5 .run/chromium.log >&2; die "chromium screenshot failed (log: .run/chromium.log)"; }
# The DOM is HTML: compare with the subjects escaped as the serializer escapes text.
missing=0
for s in "${subjects[@]}"; do
  esc=$(printf '%s' "$s" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g')
  if grep -qF -- "$esc" .run/mailpit-inbox.html; then log "on the page: $s"
  else log "NOT on the page: $s"; missing=$((missing + 1)); fi
done
[ "$missing" = 0 ] || die "$missing of ${#subjects[@]} subjects are not on the rendered inbox (DOM: .run/mailpit-inbox.html)"
log "ok: the inbox shows the ${#subjects[@]} newest mails; screenshot: .run/mailpit-inbox.png"
