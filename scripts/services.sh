#!/usr/bin/env bash
# Makes PostgreSQL and RabbitMQ available for tests and `make run`:
#   1. use the ones already listening on the default ports;
#   2. else, where a Docker engine runs, `docker compose -f deploy/compose.yaml up -d` them;
#   3. else, on Debian/Ubuntu as root, install the Debian packages and start them;
#   4. else print what to install and exit 1.
# With --mailpit it also starts Mailpit (built into bin/ from the tools module) if port 1025
# is free, and prints its PID file path. Idempotent: safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432}
AMQP_HOST=${AMQP_HOST:-127.0.0.1} AMQP_PORT=${AMQP_PORT:-5672}

listening() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
log() { printf 'services: %s\n' "$*" >&2; }

wait_for() { # name host port seconds
  local i
  for ((i = 0; i < $4 * 2; i++)); do listening "$2" "$3" && return 0; sleep 0.5; done
  log "$1 did not start listening on $2:$3 within $4s"; return 1
}

docker_up() {
  command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 || return 1
  log "starting $* with docker compose"
  docker compose -f deploy/compose.yaml up -d "$@"
}

debian_root() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  [ -n "${APT_UPDATED:-}" ] || { apt-get update -qq; APT_UPDATED=1; }
  apt-get install -y -qq "$@" >/dev/null
}

start_postgres() {
  listening "$PGHOST" "$PGPORT" && return 0
  docker_up postgres && { wait_for PostgreSQL "$PGHOST" "$PGPORT" 60; return; }
  if debian_root; then
    log "installing and starting PostgreSQL from Debian packages"
    command -v pg_ctlcluster >/dev/null 2>&1 || apt_install postgresql
    local ver; ver=$(ls /etc/postgresql | sort -n | tail -1)
    # Our own fresh cluster: trust loopback connections, as the defaults expect.
    sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "/etc/postgresql/$ver/main/pg_hba.conf"
    pg_ctlcluster "$ver" main start || pg_ctlcluster "$ver" main reload
    wait_for PostgreSQL "$PGHOST" "$PGPORT" 60
    return
  fi
  log "PostgreSQL is not listening on $PGHOST:$PGPORT. Install PostgreSQL 15+ (trust auth for"
  log "127.0.0.1, role postgres) or Docker, then run this script again."
  return 1
}

start_rabbitmq() {
  listening "$AMQP_HOST" "$AMQP_PORT" && return 0
  docker_up rabbitmq && { wait_for RabbitMQ "$AMQP_HOST" "$AMQP_PORT" 90; return; }
  if debian_root; then
    log "installing and starting RabbitMQ from Debian packages"
    command -v rabbitmq-server >/dev/null 2>&1 || apt_install rabbitmq-server
    (service rabbitmq-server start || rabbitmq-server -detached) >/dev/null 2>&1 || true
    wait_for RabbitMQ "$AMQP_HOST" "$AMQP_PORT" 120
    return
  fi
  log "RabbitMQ is not listening on $AMQP_HOST:$AMQP_PORT. Install RabbitMQ 3.10+ (guest/guest"
  log "on localhost) or Docker, then run this script again."
  return 1
}

ensure_databases() { # the test database and the one configs/dev.yaml names
  command -v psql >/dev/null 2>&1 || { debian_root && apt_install postgresql-client; } || return 0
  for db in test mailsvc; do
    psql -h "$PGHOST" -p "$PGPORT" -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'" 2>/dev/null | grep -q 1 ||
      psql -h "$PGHOST" -p "$PGPORT" -U postgres -d postgres -qc "CREATE DATABASE $db" >/dev/null
  done
}

start_mailpit() {
  if listening 127.0.0.1 1025; then
    rm -f .run/mailpit.pid # not ours: nobody should stop it on our behalf
    log "Mailpit (or another SMTP server) already on 127.0.0.1:1025"
    return 0
  fi
  [ -x bin/mailpit ] || { log "building Mailpit into bin/"; (cd tools && go build -o ../bin/mailpit github.com/axllent/mailpit); }
  mkdir -p .run
  bin/mailpit --smtp 127.0.0.1:1025 --listen 127.0.0.1:8025 --max 0 --smtp-auth-accept-any --smtp-auth-allow-insecure \
    --disable-version-check >.run/mailpit.log 2>&1 &
  echo $! >.run/mailpit.pid
  wait_for Mailpit 127.0.0.1 1025 30
}

start_postgres
start_rabbitmq
ensure_databases
if [ "${1:-}" = "--mailpit" ]; then start_mailpit; fi
log "PostgreSQL on $PGHOST:$PGPORT and RabbitMQ on $AMQP_HOST:$AMQP_PORT are available"
