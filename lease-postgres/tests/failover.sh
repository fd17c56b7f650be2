#!/usr/bin/env bash
# Failover trials (issue 15, item 3): a private PostgreSQL primary and a
# streaming standby under a temporary directory, on ports of their own
# (5461 and 5462, or the next free pair, unless LEASE_FAILOVER_PRIMARY_PORT /
# _STANDBY_PORT say otherwise): the shared server on 5432 is never touched. For each
# replication mode and scenario, a fresh pair is built, the ignored test
# `a_second_holder_after_failover` (lease-postgres/tests/failover.rs) holds a
# lease on it, cuts the primary (pg_ctl stop -m immediate), promotes the
# standby, and reports whether a second holder appeared. The result lines
# are printed at the end (and kept in $LEASE_FAILOVER_LOG if set).
#
#   lease-postgres/tests/failover.sh                # every mode
#   lease-postgres/tests/failover.sh async sync-on  # some of them
#
# Modes: async (no synchronous standby), sync-on (synchronous_commit = on,
# the standby named in synchronous_standby_names), sync-remote-apply
# (synchronous_commit = remote_apply). Scenarios, each on a fresh pair:
# lagging (the standby stops receiving WAL right after the claim reached
# it, and the primary goes on alone for longer than a lease before it is
# cut: the renewals are not replicated), claim (the standby stops receiving
# WAL before the claim, and the primary is cut right after it: the claim is
# not replicated) and clean (the primary is cut with replication healthy).
#
# Run as root (the servers then run as the postgres user) or as any user
# who may run initdb. Needs the PostgreSQL server binaries
# (/usr/lib/postgresql/<version>/bin, or PGBIN) and cargo.
set -euo pipefail
cd "$(dirname "$0")/../.."

PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)}
[ -x "$PGBIN/initdb" ] || { echo "failover.sh: no PostgreSQL server binaries (set PGBIN)" >&2; exit 2; }
PRIMARY_PORT=${LEASE_FAILOVER_PRIMARY_PORT:-5461}
STANDBY_PORT=${LEASE_FAILOVER_STANDBY_PORT:-5462}
MODES=("$@")
[ ${#MODES[@]} -gt 0 ] || MODES=(async sync-on sync-remote-apply)

if [ "$(id -u)" = 0 ]; then
  as_pg() { runuser -u postgres -- "$@"; }
  RUN_AS=(runuser -u postgres --)
else
  as_pg() { "$@"; }
  RUN_AS=()
fi

listening() { "$PGBIN/pg_isready" -h 127.0.0.1 -p "$1" >/dev/null 2>&1 \
  || (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if [ -z "${LEASE_FAILOVER_PRIMARY_PORT:-}${LEASE_FAILOVER_STANDBY_PORT:-}" ]; then
  # A shared machine: the first free pair from 5461 up.
  while listening "$PRIMARY_PORT" || listening "$STANDBY_PORT"; do
    PRIMARY_PORT=$((PRIMARY_PORT + 2)); STANDBY_PORT=$((STANDBY_PORT + 2))
    [ "$PRIMARY_PORT" -lt 5560 ] || { echo "failover.sh: no free pair of ports" >&2; exit 2; }
  done
fi
for port in "$PRIMARY_PORT" "$STANDBY_PORT"; do
  if listening "$port"; then
    echo "failover.sh: something already listens on port $port" >&2
    exit 2
  fi
done
echo "failover.sh: primary on $PRIMARY_PORT, standby on $STANDBY_PORT"

# The test binary, built once.
cargo test -p lease-postgres --test failover --no-run --quiet

dir=""
stop_pair() {
  [ -n "$dir" ] || return 0
  for node in primary standby; do
    if [ -f "$dir/$node/postmaster.pid" ]; then
      as_pg "$PGBIN/pg_ctl" -D "$dir/$node" stop -m immediate >/dev/null 2>&1 || true
    fi
  done
  rm -rf "$dir"
  dir=""
}
trap stop_pair EXIT

# start_pair MODE: a fresh primary and standby, streaming.
start_pair() {
  local mode=$1 names="" commit="on"
  case "$mode" in
    async) names=""; commit="on" ;;
    sync-on) names="standby"; commit="on" ;;
    sync-remote-apply) names="standby"; commit="remote_apply" ;;
    *) echo "failover.sh: unknown mode $mode" >&2; exit 2 ;;
  esac
  dir=$(mktemp -d /tmp/lease-failover.XXXXXX)
  [ "$(id -u)" != 0 ] || chown postgres "$dir"
  as_pg "$PGBIN/initdb" -D "$dir/primary" -U postgres --auth=trust -N >"$dir/initdb.log" 2>&1
  cat >>"$dir/primary/postgresql.conf" <<CONF
port = $PRIMARY_PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
cluster_name = 'primary'
wal_level = replica
max_wal_senders = 4
hot_standby = on
shared_buffers = 16MB
synchronous_standby_names = '$names'
synchronous_commit = $commit
CONF
  as_pg "$PGBIN/pg_ctl" -D "$dir/primary" -l "$dir/primary.log" -w start >/dev/null
  as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres \
    -D "$dir/standby" -R -X stream -c fast
  # pg_basebackup -R wrote primary_conninfo; the walreceiver's
  # application_name is then the cluster_name, which
  # synchronous_standby_names names.
  cat >>"$dir/standby/postgresql.conf" <<CONF
port = $STANDBY_PORT
cluster_name = 'standby'
CONF
  as_pg "$PGBIN/pg_ctl" -D "$dir/standby" -l "$dir/standby.log" -w start >/dev/null
  local want=async
  [ -z "$names" ] || want=sync
  for _ in $(seq 100); do
    state=$("$PGBIN/psql" -h 127.0.0.1 -p "$PRIMARY_PORT" -U postgres -d postgres -Atc \
      "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby' AND state = 'streaming'" 2>/dev/null || true)
    [ "$state" = "$want" ] && return 0
    sleep 0.1
  done
  echo "failover.sh: the standby is not streaming ($want)" >&2
  cat "$dir/standby.log" >&2
  exit 1
}

results=()
status=0
for mode in "${MODES[@]}"; do
  for scenario in lagging claim clean; do
    expect=safe
    [ "$mode" != async ] || [ "$scenario" = clean ] || expect=unsafe
    echo "=== failover trial: $mode, $scenario (expected: $expect)"
    start_pair "$mode"
    out="$dir/test.out"
    if LEASE_FAILOVER_URL="postgres://postgres@127.0.0.1:$PRIMARY_PORT,127.0.0.1:$STANDBY_PORT/postgres?target_session_attrs=read-write&connect_timeout=2" \
      LEASE_FAILOVER_PRIMARY="host=127.0.0.1 port=$PRIMARY_PORT user=postgres dbname=postgres" \
      LEASE_FAILOVER_STANDBY="host=127.0.0.1 port=$STANDBY_PORT user=postgres dbname=postgres" \
      LEASE_FAILOVER_STOP_PRIMARY="${RUN_AS[*]} $PGBIN/pg_ctl -D $dir/primary stop -m immediate" \
      LEASE_FAILOVER_SCENARIO="$scenario" LEASE_FAILOVER_EXPECT="$expect" \
      cargo test -p lease-postgres --test failover --quiet -- --ignored --nocapture \
        --test-threads 1 >"$out" 2>&1; then
      verdict=ok
    else
      verdict=FAILED
      status=1
      cat "$out"
    fi
    grep -v '^RESULT' "$out" | grep -E '^(replication|before)' || true
    line=$(grep '^RESULT' "$out" || echo "RESULT (none)")
    results+=("[$verdict, expected $expect] $mode: ${line#RESULT }")
    stop_pair
  done
done

echo
echo "=== failover results"
for r in "${results[@]}"; do echo "$r"; done
if [ -n "${LEASE_FAILOVER_LOG:-}" ]; then
  printf '%s\n' "${results[@]}" >"$LEASE_FAILOVER_LOG"
fi
exit $status
