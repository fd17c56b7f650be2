#!/usr/bin/env bash
# Starts a private PostgreSQL whose clock a test can step (issue 15, item 2):
# the server runs under libfaketime, which adds the offset written in
# $dir/offset ("+0", "+2", "-5": seconds) to every wall-clock reading of
# every server process, re-read on each reading. The monotonic clock is left
# alone, so the server's own timeouts keep working.
#
#   bash lease-postgres/tests/support/faketime-postgres.sh
#   LEASE_TEST_FAKETIME_PG_URL=postgres://postgres@127.0.0.1:5440/test \
#   LEASE_TEST_FAKETIME_FILE=/tmp/lease-faketime-pg/offset \
#     cargo test -p lease-postgres --test clock_jump -- --nocapture
#
# Needs the Debian packages postgresql (the server binaries) and faketime,
# installed here when missing, and root (the server runs as postgres).
#
# Another server's binaries, on another port and directory: PostgreSQL 18
# from .ci/pg18.sh, say, as .ci/run starts it:
#
#   LEASE_FAKETIME_PG_BIN=/tmp/lease-pg18/bin LEASE_FAKETIME_PORT=5441 \
#   LEASE_FAKETIME_DIR=/tmp/lease-faketime-pg18 \
#     bash lease-postgres/tests/support/faketime-postgres.sh
set -euo pipefail
dir=${LEASE_FAKETIME_DIR:-/tmp/lease-faketime-pg}
port=${LEASE_FAKETIME_PORT:-5440}

if pg_isready -q -h 127.0.0.1 -p "$port" 2>/dev/null; then
  echo "the faketime PostgreSQL is up on $port (offset file $dir/offset)"
  exit 0
fi
lib=$(dpkg -L libfaketime 2>/dev/null | grep '/libfaketime.so.1$' | head -n1 || true)
if [ -z "$lib" ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y faketime >/dev/null \
    || { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y faketime >/dev/null; }
  lib=$(dpkg -L libfaketime | grep '/libfaketime.so.1$' | head -n1)
fi
bin=${LEASE_FAKETIME_PG_BIN:-/usr/lib/postgresql/$(ls /usr/lib/postgresql | sort -V | tail -n1)/bin}

rm -rf "$dir"
mkdir -p "$dir"
echo "+0" >"$dir/offset"
chmod 666 "$dir/offset"
chown postgres "$dir"
runuser -u postgres -- "$bin/initdb" -D "$dir/data" -A trust -U postgres >"$dir/initdb.log"
runuser -u postgres -- env LD_PRELOAD="$lib" FAKETIME_TIMESTAMP_FILE="$dir/offset" \
  FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1 \
  "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
  -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
"$bin/psql" -q -h 127.0.0.1 -p "$port" -U postgres -c 'CREATE DATABASE test' postgres
echo "the faketime PostgreSQL $("$bin/postgres" --version | awk '{print $3}') is up on $port (offset file $dir/offset)"
