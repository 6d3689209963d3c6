# Shared helpers for the scripts in this directory (sourced, not run). Each script sets
# LOG_TAG before sourcing, so its messages say who speaks.

log() { printf '%s: %s\n' "${LOG_TAG:-mailsvc}" "$*" >&2; }
die() { log "$*"; exit 1; }

# debian_root: true when this process may install Debian packages (root, apt-get present).
debian_root() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

# pkg_installed PKG: true when the Debian package PKG is installed.
pkg_installed() { dpkg-query -W -f '${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# apt_install WHY PKG...: installs the packages without starting any daemon they ship (a
# policy-rc.d that answers 101, the Debian policy interface for "do not start services now"),
# printing what it does first, since a download and unpack can take a minute.
apt_install() {
  local why=$1; shift
  export DEBIAN_FRONTEND=noninteractive
  # Package lists that already know the packages are used as they are; an install that fails
  # on stale lists is retried after apt-get update.
  local fresh=""
  if ! apt-cache show "$@" >/dev/null 2>&1; then
    log "apt-get update (package lists, for: $*)"
    apt-get update -qq
    fresh=1
  fi
  log "installing Debian packages: $* ($why; a minute or two on a first install)"
  local policy=/usr/sbin/policy-rc.d created="" rc=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created=1
  fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null || rc=$?
  if [ "$rc" != 0 ] && [ -z "$fresh" ]; then
    log "install failed; retrying after apt-get update"
    rc=0
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null || rc=$?
  fi
  [ -n "$created" ] && rm -f "$policy"
  return "$rc"
}

# disable_at_boot SERVICE...: a package this setup installed enables its system service at
# boot; mailsvc runs its own instances instead, so turn that off (systemd or sysv-rc).
disable_at_boot() {
  local s
  for s in "$@"; do
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
      systemctl disable --quiet "$s" >/dev/null 2>&1 || true
    elif command -v update-rc.d >/dev/null 2>&1; then
      update-rc.d "$s" disable >/dev/null 2>&1 || true
    fi
  done
}
