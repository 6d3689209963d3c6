#!/usr/bin/env bash
# PostgreSQL and RabbitMQ for the tests and `make run`, without touching a server of yours.
#
#   scripts/services.sh [--mailpit]   make them available (and Mailpit, with --mailpit)
#   scripts/services.sh stop [NAME..] stop mailsvc's own dev servers (postgres rabbitmq mailpit)
#   scripts/services.sh status        say what runs where
#   scripts/services.sh rabbitmqctl ARGS  rabbitmqctl against mailsvc's own RabbitMQ
#
# For each server, in this order:
#   1. one already listening on the default port (PostgreSQL 127.0.0.1:5432 that lets role
#      `postgres` in without a password, RabbitMQ 127.0.0.1:5672 with guest/guest) is used as is;
#   2. mailsvc's own dev server, if it already runs (PostgreSQL 127.0.0.1:15432, RabbitMQ
#      127.0.0.1:15673), is used;
#   3. where a Docker engine runs, `docker compose -f deploy/compose.yaml up -d` starts it;
#   4. else mailsvc's own server is started from the installed binaries (on Debian as root the
#      packages are installed first, without starting or enabling Debian's own services): its
#      own data directory under $MAILSVC_DEV_STATE, its own ports, listening on 127.0.0.1 only.
#      No existing cluster, pg_hba.conf or RabbitMQ configuration is ever edited.
#   5. else it says what to install and exits 1.
# MAILSVC_SERVICES=own skips 1 and 3: always mailsvc's own servers.
# The URLs go to .run/services.env (the tests' MAILSVC_TEST_*, sourced by make test) and
# .run/dev.env (MAILSVC_DATABASE_URL and MAILSVC_AMQP_URL, sourced by make run). Each server this
# invocation starts is named on a line of $MAILSVC_SERVICES_STARTED (a file) when that is set,
# so that make run can stop exactly those. Idempotent: safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
LOG_TAG=services
. scripts/lib.sh

if [ "$(id -u)" = 0 ]; then STATE=${MAILSVC_DEV_STATE:-/var/lib/mailsvc-dev}
else STATE=${MAILSVC_DEV_STATE:-${XDG_STATE_HOME:-$HOME/.local/state}/mailsvc-dev}; fi
DEV_PG_PORT=${MAILSVC_DEV_PG_PORT:-15432}
DEV_AMQP_PORT=${MAILSVC_DEV_AMQP_PORT:-15673}
DEV_DIST_PORT=$((DEV_AMQP_PORT + 20000)) DEV_EPMD_PORT=$((DEV_AMQP_PORT - 1300)) # 35673, 14373
PG_PORT="" AMQP_PORT="" STARTED=()
OWN_ONLY=""; [ "${MAILSVC_SERVICES:-any}" = own ] && OWN_ONLY=1

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() { # name port seconds
  local i
  for ((i = 0; i < $3 * 2; i++)); do
    listening "$2" && return 0
    ((i % 20 == 19)) && log "still waiting for $1 on 127.0.0.1:$2 ($(((i + 1) / 2)) s)"
    sleep 0.5
  done
  log "$1 did not start listening on 127.0.0.1:$2 within $3 s"
  return 1
}

started() { STARTED+=("$1"); [ -z "${MAILSVC_SERVICES_STARTED:-}" ] || echo "$1" >>"$MAILSVC_SERVICES_STARTED"; }

docker_up() {
  command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 || return 1
  log "starting $1 with docker compose (deploy/compose.yaml; the first time pulls its image)"
  docker compose -f deploy/compose.yaml up -d "$1"
  mkdir -p "$STATE" && echo "$1" >>"$STATE/compose-started"
  started "compose:$1"
}

# ---- PostgreSQL ----------------------------------------------------------------------------

pg_bindir() { # the newest installed PostgreSQL's bin directory, or pg_config's
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n | tail -1)
  [ -n "$d" ] && [ -x "$d/initdb" ] && { echo "$d"; return; }
  command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ] && { pg_config --bindir; return; }
  command -v initdb >/dev/null 2>&1 && { dirname "$(command -v initdb)"; return; }
  return 1
}

as_pg() { # PostgreSQL refuses to run as root: as root, run its tools as the postgres user
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

psql_at() { # port, psql args...
  local port=$1; shift
  local psql; psql=$(command -v psql 2>/dev/null || echo "$(pg_bindir)/psql")
  PGCONNECT_TIMEOUT=5 "$psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -X -q "$@"
}

pg_usable() { # the server on this port lets role postgres in without a password
  command -v psql >/dev/null 2>&1 || pg_bindir >/dev/null 2>&1 || return 0 # cannot tell: try it
  psql_at "$1" -tAc 'SELECT 1' </dev/null 2>/dev/null | grep -qx 1
}

pg_own_start() {
  local bindir data=$STATE/postgres
  if ! bindir=$(pg_bindir); then
    debian_root || die "PostgreSQL is not running and not installed. Install PostgreSQL 15+ (Debian: apt-get install postgresql) or Docker, then run this again."
    apt_install "mailsvc's own PostgreSQL" postgresql
    disable_at_boot postgresql
    log "Debian's own cluster (created by the package) was not started and is disabled at boot"
    bindir=$(pg_bindir)
  fi
  if [ ! -s "$data/PG_VERSION" ]; then
    log "creating mailsvc's own PostgreSQL data directory $data (initdb; trust, loopback only)"
    mkdir -p "$data"
    [ "$(id -u)" = 0 ] && chown postgres: "$data"
    chmod 700 "$data"
    as_pg "$bindir/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C >"$STATE/initdb.log" 2>&1 ||
      { cat "$STATE/initdb.log" >&2; die "initdb failed"; }
  fi
  log "starting mailsvc's own PostgreSQL on 127.0.0.1:$DEV_PG_PORT (data: $data)"
  as_pg "$bindir/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 -s \
    -o "-c listen_addresses=127.0.0.1 -p $DEV_PG_PORT -k $data" start ||
    { tail -20 "$data/server.log" >&2; die "PostgreSQL did not start (log: $data/server.log)"; }
  started postgres
}

pg_stop() {
  local bindir data=$STATE/postgres
  [ -f "$data/postmaster.pid" ] && bindir=$(pg_bindir) || return 0
  log "stopping mailsvc's own PostgreSQL (127.0.0.1:$DEV_PG_PORT; its data stays in $data)"
  as_pg "$bindir/pg_ctl" -D "$data" -m fast -w -s stop || true
}

start_postgres() {
  if [ -z "$OWN_ONLY" ] && listening 5432; then
    if pg_usable 5432; then PG_PORT=5432; return; fi
    log "127.0.0.1:5432 answers but does not let role postgres in without a password: left alone"
  fi
  if listening "$DEV_PG_PORT"; then PG_PORT=$DEV_PG_PORT; return; fi
  if [ -z "$OWN_ONLY" ] && ! listening 5432 && docker_up postgres; then PG_PORT=5432; wait_for PostgreSQL 5432 60; return; fi
  pg_own_start
  PG_PORT=$DEV_PG_PORT
}

ensure_databases() { # the test database and the one configs/dev.yaml names
  local db
  command -v psql >/dev/null 2>&1 || pg_bindir >/dev/null 2>&1 ||
    { log "no psql here: cannot check that databases test and mailsvc exist"; return 0; }
  for db in test mailsvc; do
    psql_at "$PG_PORT" -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1 ||
      { log "creating database $db"; psql_at "$PG_PORT" -c "CREATE DATABASE $db"; }
  done
}

# ---- RabbitMQ ------------------------------------------------------------------------------

rabbit_env() { # everything of the own instance in $STATE/rabbitmq, nothing read from /etc
  local d=$STATE/rabbitmq
  mkdir -p "$d/log"
  [ -f "$d/rabbitmq.conf" ] || printf 'listeners.tcp.1 = 127.0.0.1:%s\n' "$DEV_AMQP_PORT" >"$d/rabbitmq.conf"
  [ -f "$d/enabled_plugins" ] || echo '[].' >"$d/enabled_plugins"
  : >"$d/rabbitmq-env.conf"
  export HOME=$d RABBITMQ_CONF_ENV_FILE=$d/rabbitmq-env.conf RABBITMQ_CONFIG_FILE=$d/rabbitmq.conf \
    RABBITMQ_NODENAME=mailsvc-dev@localhost RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT=$DEV_AMQP_PORT RABBITMQ_DIST_PORT=$DEV_DIST_PORT \
    RABBITMQ_MNESIA_BASE=$d/mnesia RABBITMQ_LOG_BASE=$d/log RABBITMQ_PID_FILE=$d/pid \
    RABBITMQ_ENABLED_PLUGINS_FILE=$d/enabled_plugins \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT=$DEV_EPMD_PORT
}

rabbit_bin() {
  local d
  for d in /usr/lib/rabbitmq/bin /usr/local/lib/rabbitmq/bin; do [ -x "$d/rabbitmq-server" ] && { echo "$d"; return; }; done
  command -v rabbitmq-server >/dev/null 2>&1 && { dirname "$(command -v rabbitmq-server)"; return; }
  return 1
}

rabbit_own_start() {
  local bin
  if ! bin=$(rabbit_bin); then
    debian_root || die "RabbitMQ is not running and not installed. Install RabbitMQ 3.10+ (Debian: apt-get install rabbitmq-server) or Docker, then run this again."
    apt_install "mailsvc's own RabbitMQ" rabbitmq-server
    disable_at_boot rabbitmq-server
    log "Debian's rabbitmq-server service was not started and is disabled at boot"
    bin=$(rabbit_bin)
  fi
  log "starting mailsvc's own RabbitMQ on 127.0.0.1:$DEV_AMQP_PORT (data: $STATE/rabbitmq; 10-30 s)"
  (rabbit_env; cd "$STATE/rabbitmq"; exec setsid "$bin/rabbitmq-server" >"$STATE/rabbitmq/log/console.log" 2>&1 </dev/null) &
  wait_for RabbitMQ "$DEV_AMQP_PORT" 120 ||
    { tail -20 "$STATE/rabbitmq/log/console.log" >&2; die "RabbitMQ did not start (logs: $STATE/rabbitmq/log)"; }
  started rabbitmq
}

rabbit_stop() {
  local bin d=$STATE/rabbitmq
  [ -f "$d/pid" ] && bin=$(rabbit_bin) || return 0
  log "stopping mailsvc's own RabbitMQ (127.0.0.1:$DEV_AMQP_PORT; its data stays in $d)"
  (rabbit_env; "$bin/rabbitmqctl" -q shutdown >/dev/null 2>&1) || kill "$(cat "$d/pid")" 2>/dev/null || true
  rm -f "$d/pid"
  (rabbit_env; epmd -kill >/dev/null 2>&1) || true # the port mapper our node started, on its own port
}

start_rabbitmq() {
  if [ -z "$OWN_ONLY" ] && listening 5672; then AMQP_PORT=5672; return; fi
  if listening "$DEV_AMQP_PORT"; then AMQP_PORT=$DEV_AMQP_PORT; return; fi
  if [ -z "$OWN_ONLY" ] && docker_up rabbitmq; then AMQP_PORT=5672; wait_for RabbitMQ 5672 90; return; fi
  rabbit_own_start
  AMQP_PORT=$DEV_AMQP_PORT
}

# ---- Mailpit -------------------------------------------------------------------------------

port_owner() { # "PID COMMAND" of the process listening on 127.0.0.1:PORT, from /proc
  local hex inode p
  hex=$(printf '%04X' "$1")
  inode=$(awk -v h=":$hex" '$2 ~ h"$" && $4 == "0A" {print $10; exit}' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
  [ -n "$inode" ] || return 1
  for p in /proc/[0-9]*; do
    if ls -l "$p/fd" 2>/dev/null | grep -q "socket:\[$inode\]"; then
      echo "${p#/proc/} $(tr '\0' ' ' <"$p/cmdline" | cut -c1-80)"
      return 0
    fi
  done
  return 1
}

start_mailpit() {
  mkdir -p .run
  if listening 1025; then
    rm -f .run/mailpit.pid # not ours: nobody should stop it on our behalf
    local who version
    who=$(port_owner 1025 || echo "a process of another user")
    version=$(curl -fsS --max-time 2 http://127.0.0.1:8025/api/v1/info 2>/dev/null | sed -n 's/.*"Version":"\([^"]*\)".*/\1/p')
    if [ -n "$version" ]; then
      echo "already running, not started by this run: Mailpit $version (PID/command: $who)" >.run/mailpit.owner
    else
      echo "port 1025 is taken by another SMTP server (PID/command: $who), not a Mailpit with its UI on :8025: the demo mails go there" >.run/mailpit.owner
    fi
    log "SMTP 127.0.0.1:1025: $(cat .run/mailpit.owner)"
    return 0
  fi
  [ -x bin/mailpit ] || scripts/build-mailpit.sh
  log "starting Mailpit (SMTP 127.0.0.1:1025, web UI http://127.0.0.1:8025)"
  bin/mailpit --smtp 127.0.0.1:1025 --listen 127.0.0.1:8025 --max 0 --smtp-auth-accept-any --smtp-auth-allow-insecure \
    --disable-version-check >.run/mailpit.log 2>&1 &
  echo $! >.run/mailpit.pid
  echo "started by this run (bin/mailpit, PID $!)" >.run/mailpit.owner
  wait_for Mailpit 1025 30
  started mailpit
}

mailpit_stop() {
  [ -f .run/mailpit.pid ] || return 0
  log "stopping Mailpit (PID $(cat .run/mailpit.pid)); its mails were in memory"
  kill "$(cat .run/mailpit.pid)" 2>/dev/null || true
  rm -f .run/mailpit.pid .run/mailpit.owner
}

# ---- commands ------------------------------------------------------------------------------

describe() { # port default-port name
  if [ "$1" = "$2" ]; then echo "$3 on 127.0.0.1:$1 (one that was already there, or docker compose's)"
  else echo "$3 on 127.0.0.1:$1 (mailsvc's own, data in $STATE)"; fi
}

cmd_stop() {
  local names=("$@") n
  [ ${#names[@]} -gt 0 ] || names=(mailpit postgres rabbitmq)
  for n in "${names[@]}"; do
    case "$n" in
      postgres) pg_stop ;;
      rabbitmq) rabbit_stop ;;
      mailpit) mailpit_stop ;;
      compose:*)
        log "stopping ${n#compose:} (docker compose stop)"
        docker compose -f deploy/compose.yaml stop "${n#compose:}" >/dev/null 2>&1 || true
        sed -i "/^${n#compose:}\$/d" "$STATE/compose-started" 2>/dev/null || true ;;
      *) die "stop: unknown server $n (postgres, rabbitmq, mailpit)" ;;
    esac
  done
}

cmd_status() {
  local p
  for p in 5432 "$DEV_PG_PORT"; do listening "$p" && log "running: $(describe "$p" 5432 PostgreSQL)"; done
  for p in 5672 "$DEV_AMQP_PORT"; do listening "$p" && log "running: $(describe "$p" 5672 RabbitMQ)"; done
  listening 1025 && log "running: SMTP on 127.0.0.1:1025: $(port_owner 1025 || echo unknown)"
  if listening "$DEV_PG_PORT" || listening "$DEV_AMQP_PORT"; then
    log "mailsvc's own servers stay up for the next make test / make run; stop them with: make stop"
  fi
  return 0
}

cmd_start() {
  start_postgres
  start_rabbitmq
  ensure_databases
  [ "${1:-}" = "--mailpit" ] && start_mailpit
  mkdir -p .run
  # Only the tests' own variables: MAILSVC_DATABASE_URL and the like are config keys, which
  # would override what a test configures for the processes it starts.
  cat >.run/services.env <<ENV
# Written by scripts/services.sh: where the tests find the servers.
: "\${MAILSVC_TEST_DATABASE_URL:=postgres://postgres@127.0.0.1:$PG_PORT/test?sslmode=disable}"
: "\${MAILSVC_TEST_AMQP_URL:=amqp://guest:guest@127.0.0.1:$AMQP_PORT/}"
export MAILSVC_TEST_DATABASE_URL MAILSVC_TEST_AMQP_URL
ENV
  cat >.run/dev.env <<ENV
# Written by scripts/services.sh: where make run's mailsvc (configs/dev.yaml) finds the servers.
: "\${MAILSVC_DATABASE_URL:=postgres://postgres@127.0.0.1:$PG_PORT/mailsvc?sslmode=disable}"
: "\${MAILSVC_AMQP_URL:=amqp://guest:guest@127.0.0.1:$AMQP_PORT/}"
export MAILSVC_DATABASE_URL MAILSVC_AMQP_URL
ENV
  log "using $(describe "$PG_PORT" 5432 PostgreSQL) and $(describe "$AMQP_PORT" 5672 RabbitMQ)"
  if [ ${#STARTED[@]} -gt 0 ] && [ -z "${MAILSVC_SERVICES_STARTED:-}" ]; then
    log "started now and left running for the next run: ${STARTED[*]}; stop them with: scripts/services.sh stop"
  fi
}

case "${1:-}" in
  stop) shift; cmd_stop "$@" ;;
  status) cmd_status ;;
  rabbitmqctl) shift; bin=$(rabbit_bin) || die "RabbitMQ is not installed"; rabbit_env; exec "$bin/rabbitmqctl" "$@" ;;
  "" | --mailpit) cmd_start "${1:-}" ;;
  *) die "usage: $0 [--mailpit] | stop [postgres|rabbitmq|mailpit...] | status | rabbitmqctl ARGS" ;;
esac
