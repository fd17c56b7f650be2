#!/usr/bin/env bash
# Starts PgBouncer in transaction pooling mode on 127.0.0.1:6432 in front of
# the local PostgreSQL (127.0.0.1:5432, database test, user postgres with
# trust), unless something answers there already: for CI (.ci/run) and for
# the benchmark's record (lease-bench/record.sh).
# Installs the distribution's package when pgbouncer is missing (as root).
# Prints the directory of its files (config, log, pid file) when it started it.
set -euo pipefail

probe() { psql "postgres://postgres@127.0.0.1:6432/test" -c 'select 1' >/dev/null 2>&1; }

if probe; then
  exit 0
fi
if ! command -v pgbouncer >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y pgbouncer >/dev/null \
    || { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y pgbouncer >/dev/null; }
fi
dir=$(mktemp -d /tmp/lease-bench-pgbouncer.XXXXXX)
cat >"$dir/pgbouncer.ini" <<INI
[databases]
test = host=127.0.0.1 port=5432 dbname=test

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 6432
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
; the store's statement_timeout rides in the startup options
ignore_startup_parameters = extra_float_digits,options
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
echo '"postgres" ""' >"$dir/userlist.txt"
if [ "$(id -u)" = 0 ]; then
  chown -R postgres "$dir"
  pgbouncer -d -u postgres "$dir/pgbouncer.ini"
else
  pgbouncer -d "$dir/pgbouncer.ini"
fi
for _ in $(seq 30); do
  if probe; then
    echo "$dir"
    exit 0
  fi
  sleep 1
done
echo "PgBouncer did not answer on 127.0.0.1:6432 (see $dir/pgbouncer.log)" >&2
exit 1
