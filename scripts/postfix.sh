#!/usr/bin/env bash
# Makes sure Debian's postfix is installed, for the end-to-end test in which a real MTA
# bounces a mail back to mailsvc's bounce listener (e2e/postfix_test.go). The test runs its
# own Postfix instance: its own configuration and queue directories under a temporary
# directory, listening on a loopback port only, never the system's /etc/postfix. When postfix
# is missing and we are root on Debian, this installs the package with Debian's
# "No configuration" answer and without starting its service, and disables the service at
# boot.
set -euo pipefail
cd "$(dirname "$0")/.."

LOG_TAG=postfix
. scripts/lib.sh

if [ -x /usr/sbin/postfix ]; then
  exit 0
fi
debian_root || die "postfix is missing: install Debian's 'postfix' package (the end-to-end bounce test runs a private instance of it)"
echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections
apt_install "postfix, for the end-to-end bounce test's private MTA" postfix
disable_at_boot postfix
log "Debian's postfix service was not configured, not started, and is disabled at boot (the tests run their own instance)"
