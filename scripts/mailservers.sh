#!/usr/bin/env bash
# Makes sure Debian's postfix and dovecot-imapd are installed, for the tests in which a real
# MTA bounces a mail back to mailsvc's bounce listener (e2e/postfix_test.go) and reports land
# in a real IMAP mailbox (internal/bounce/imap_test.go). The tests run their own instances:
# their own configuration, queue and mail directories under a temporary directory, listening
# on loopback ports only, never the system's /etc/postfix or /etc/dovecot. When a package is
# missing and we are root on Debian, this installs it (postfix with Debian's "No
# configuration" answer) without starting its service, and disables the service at boot.
set -euo pipefail
cd "$(dirname "$0")/.."

LOG_TAG=mailservers
. scripts/lib.sh

missing=()
[ -x /usr/sbin/postfix ] || missing+=(postfix)
[ -x /usr/sbin/dovecot ] || missing+=(dovecot-imapd)
[ ${#missing[@]} = 0 ] && exit 0
debian_root || die "missing: ${missing[*]}: install these Debian packages (the bounce tests run private instances of Postfix and Dovecot)"
echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections
apt_install "the bounce tests' private MTA and mailbox" "${missing[@]}"
disable_at_boot postfix dovecot
log "Debian's postfix and dovecot services were not started and are disabled at boot (the tests run their own instances)"
