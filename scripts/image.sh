#!/usr/bin/env bash
# The container image, with whichever engine is installed (podman first, then docker).
#
#   scripts/image.sh build IMAGE   the Dockerfile, as released: needs the base images'
#                                  registries (docker.io, gcr.io). podman builds with
#                                  --format docker, which keeps the HEALTHCHECK.
#   scripts/image.sh local IMAGE   no registry at all: the Dockerfile's two binaries (same
#                                  flags) with the host's CA bundle, time zones and a passwd
#                                  naming 65532 on an empty (scratch) base: what the
#                                  distroless base gives, for machines without a registry.
#   scripts/image.sh check         podman: build `local`, then run it against the test servers
#                                  (MAILSVC_TEST_DATABASE_URL, MAILSVC_TEST_AMQP_URL; make
#                                  image-check sets them): `version`, `migrate` on a database
#                                  of its own, `serve` (read-only root, no capabilities, user
#                                  65532, host network) until /readyz answers 200 and the
#                                  image's health check passes, then a stop that must exit 0.
# When podman is missing and we are root on Debian, `check` installs it (apt-get install podman).
set -euo pipefail
cd "$(dirname "$0")/.."

LOG_TAG=image
. scripts/lib.sh

VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}

engine() {
  if command -v podman >/dev/null 2>&1; then echo podman
  elif command -v docker >/dev/null 2>&1; then echo docker
  else die "no container engine: install podman (apt-get install podman) or Docker"
  fi
}

build() {
  local image=$1 e
  e=$(engine)
  local fmt=()
  [ "$e" = podman ] && fmt=(--format docker)
  log "$e build ${fmt[*]} -t $image (VERSION=$VERSION COMMIT=$COMMIT)"
  "$e" build "${fmt[@]}" -t "$image" --build-arg VERSION="$VERSION" --build-arg COMMIT="$COMMIT" .
}

build_local() {
  local image=$1 e ctx
  e=$(engine)
  ctx=$(mktemp -d)
  mkdir -p "$ctx/root/usr/local/bin" "$ctx/root/etc/ssl/certs" "$ctx/root/usr/share" "$ctx/root/tmp"
  chmod 1777 "$ctx/root/tmp"
  log "go build cmd/mailsvc and deploy/healthprobe (the Dockerfile's flags)"
  CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/mailsvc/mailsvc/internal/buildinfo.Version=$VERSION -X github.com/mailsvc/mailsvc/internal/buildinfo.Commit=$COMMIT" \
    -o "$ctx/root/usr/local/bin/mailsvc" ./cmd/mailsvc
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$ctx/root/usr/local/bin/healthprobe" ./deploy/healthprobe
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/root/etc/ssl/certs/" ||
    die "no CA bundle at /etc/ssl/certs/ca-certificates.crt (apt-get install ca-certificates)"
  cp -r /usr/share/zoneinfo "$ctx/root/usr/share/" || die "no /usr/share/zoneinfo (apt-get install tzdata)"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ctx/root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/root/etc/group"
  cat >"$ctx/Containerfile" <<EOC
FROM scratch
COPY root/ /
ENV PATH=/usr/local/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
LABEL org.opencontainers.image.title="mailsvc" org.opencontainers.image.version="$VERSION" org.opencontainers.image.revision="$COMMIT"
USER 65532:65532
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 CMD ["/usr/local/bin/healthprobe", "/healthz"]
ENTRYPOINT ["mailsvc"]
CMD ["serve"]
EOC
  local fmt=()
  [ "$e" = podman ] && fmt=(--format docker)
  log "$e build ${fmt[*]} -t $image (scratch base, no registry)"
  "$e" build "${fmt[@]}" -t "$image" "$ctx"
  rm -rf "$ctx"
}

# pman runs podman as this kind of machine allows: with runc where it is installed (Debian
# 12's crun refuses a hybrid cgroup hierarchy: "cgroups in hybrid mode not supported"), and
# with limits on open files and processes below the machine's (podman's default nofile of
# 1048576 fails with "setrlimit RLIMIT_NOFILE: Operation not permitted" in a sandbox whose
# hard limits are lower).
pman() {
  local rt=()
  command -v runc >/dev/null 2>&1 && rt=(--runtime runc)
  podman "${rt[@]}" "$@"
}
LIMITS=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)   # under this machine's hard limits

check() {
  if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
    debian_root || die "podman is missing: apt-get install podman runc"
    apt_install "podman and runc, to build and run the image" podman runc
  fi
  : "${MAILSVC_TEST_DATABASE_URL:?set by make image-check (scripts/services.sh)}"
  : "${MAILSVC_TEST_AMQP_URL:?set by make image-check (scripts/services.sh)}"
  local image=localhost/mailsvc:image-check name=mailsvc-image-check port=18480
  local db=mailsvc_image_check prefix=mailsvc-image-check
  build_local "$image"

  local out
  out=$(pman run --rm "${LIMITS[@]}" --health-interval disable "$image" version)
  log "podman run $image version: $out"
  [[ $out == "mailsvc $VERSION (commit $COMMIT,"* ]] || die "version: got '$out'"

  # A database of its own on the test server (the same server, another name).
  local admin=$MAILSVC_TEST_DATABASE_URL dburl
  psql "$admin" -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
  dburl=$(printf '%s' "$admin" | sed -E "s#/[^/?]+(\?|$)#/$db\1#")
  local env=(
    -e MAILSVC_DATABASE_URL="$dburl" -e MAILSVC_AMQP_URL="$MAILSVC_TEST_AMQP_URL"
    -e MAILSVC_MAIL_FROM="Shop <orders@shop.example>" -e MAILSVC_SMTP_HOST=127.0.0.1 -e MAILSVC_SMTP_PORT=1
    -e MAILSVC_SMTP_TLS=none -e MAILSVC_HTTP_ADDR="127.0.0.1:$port"
    # Names of its own on the shared broker.
    -e MAILSVC_AMQP_INPUT_EXCHANGE=$prefix.order.events -e MAILSVC_AMQP_QUEUE=$prefix.order-events
    -e MAILSVC_AMQP_DEAD_LETTER_EXCHANGE=$prefix.dlx -e MAILSVC_AMQP_DEAD_LETTER_QUEUE=$prefix.order-events.dlq
    -e MAILSVC_AMQP_EVENTS_EXCHANGE=$prefix.mail.events
  )
  local run=("${LIMITS[@]}" --health-interval disable --network host --read-only --cap-drop ALL --security-opt no-new-privileges --user 65532:65532)
  log "podman run $image migrate (database $db)"
  pman run --rm "${run[@]}" "${env[@]}" "$image" migrate

  podman rm -f "$name" >/dev/null 2>&1 || true
  log "podman run -d $image serve (http 127.0.0.1:$port)"
  pman run -d --name "$name" "${run[@]}" "${env[@]}" "$image" serve >/dev/null
  local i code=
  for i in $(seq 1 60); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" || true)
    [ "$code" = 200 ] && break
    [ "$(podman inspect -f '{{.State.Running}}' "$name")" = true ] || break
    sleep 1
  done
  if [ "$code" != 200 ]; then
    podman logs "$name" >&2 || true
    podman rm -f "$name" >/dev/null || true
    die "serve: /readyz answered '$code' after ${i}s"
  fi
  log "serve ready after ${i}s: /readyz 200"
  pman healthcheck run "$name" || die "the image's HEALTHCHECK failed (MAILSVC_HTTP_ADDR's port)"
  log "podman healthcheck run: healthy"
  curl -sf "http://127.0.0.1:$port/metrics" | grep -q '^mailsvc_relay_leader ' || die "/metrics has no mailsvc_relay_leader"
  pman stop -t 45 "$name" >/dev/null
  local rc
  rc=$(podman inspect -f '{{.State.ExitCode}}' "$name")
  podman logs "$name" 2>&1 | tail -n 3 >&2
  podman rm "$name" >/dev/null
  psql "$admin" -qc "DROP DATABASE IF EXISTS $db" >/dev/null
  [ "$rc" = 0 ] || die "serve exited $rc after SIGTERM"
  local rt_name=crun
  command -v runc >/dev/null 2>&1 && rt_name=runc
  log "OK: built $image with podman $(podman version -f '{{.Client.Version}}'), and runtime ${rt_name:-crun}: ran version, migrate, serve (ready, healthy, stopped with exit 0)"
}

case "${1:-}" in
  build) build "${2:-localhost/mailsvc:$VERSION}" ;;
  local) build_local "${2:-localhost/mailsvc:$VERSION}" ;;
  check) check ;;
  *) die "usage: scripts/image.sh build|local [IMAGE] | check" ;;
esac
