#!/usr/bin/env bash
# Checks, before anything long starts, that `go test -race` can run: the race detector needs
# cgo, and cgo needs a C compiler (Go turns cgo off by itself when it finds none, and the test
# run then fails only after compiling, with "-race requires cgo"). On Debian/Ubuntu as root it
# installs gcc and the C library headers; elsewhere it says what to install.
set -euo pipefail
cd "$(dirname "$0")/.."
LOG_TAG=toolchain
. scripts/lib.sh

cc=$(go env CC); cc=${cc%% *}
if ! command -v "$cc" >/dev/null 2>&1; then
  if debian_root; then
    apt_install "go test -race needs cgo, which needs a C compiler" gcc libc6-dev
    command -v "$cc" >/dev/null 2>&1 || die "gcc is installed but the C compiler Go uses, '$cc' (go env CC), is not on PATH"
  else
    die "go test -race needs cgo, and cgo needs a C compiler: '$cc' is not on PATH. Install one (Debian/Ubuntu: sudo apt-get install gcc libc6-dev; Fedora: sudo dnf install gcc), then run make test again."
  fi
fi
[ "$(go env CGO_ENABLED)" = 1 ] ||
  die "cgo is disabled (CGO_ENABLED=$(go env CGO_ENABLED)); go test -race needs it: unset CGO_ENABLED or set CGO_ENABLED=1 (go env -u CGO_ENABLED if it was set with go env -w)"
