#!/usr/bin/env bash
# The whole performance record in one run (issue 17, item 7): the bench
# (every operation, the batch renewal and the capabilities, each beside its
# floor: p50 and p99 ratios, the contended claims won per second on each
# side, the round trips of each side counted on the wire, and on SQLite a
# second floor on a connection per worker; issue 24, item 7) on SQLite,
# PostgreSQL, PostgreSQL via PgBouncer and MariaDB, then
# the scale runs (PostgreSQL 100,000 leases, pool 4; MariaDB and SQLite
# 10,000; 60 s each), written as markdown to one file.
#
#   lease-bench/record.sh [OUT.md]          (default: lease-bench-record.md)
#
# Run it from the workspace root on a quiet machine: it takes about
# (5 ops x 3 concurrencies + capabilities) x SECONDS per backend, plus the
# scale runs (claims, a 60 s window and the releases each). Settings, from
# the environment (defaults in brackets):
#   SECONDS_PER_CELL [2]   CONCURRENCY [1,8,32]   BATCH [1000]
#   SCHEDULER_JOBS [200]   LEADER_CRASH [1] (the leader's failover after a
#   crash: one lease, 15 s, per backend; 0 to skip)
#   SCALE_SECONDS [60]     SCALE_LEASES_PG [100000]   SCALE_LEASES [10000]
#   SCALE_POOL [4]         SCALE [1] (0: no scale runs)
#   SQLITE_FILE [/tmp/lease-bench.db]   SCALE_SQLITE_FILE [/tmp/lease-scale.db]
#   PG_URL [postgres://postgres@127.0.0.1:5432/test]
#   PGBOUNCER_URL [postgres://postgres@127.0.0.1:6432/test?statement_mode=unnamed]
#   MYSQL_URL [mysql://root@127.0.0.1:3306/test]
# PgBouncer is started (lease-bench/pgbouncer.sh, as .ci/run does) when
# 127.0.0.1:6432 does not answer. The exit status is non-zero when the
# bench failed or a scale run lost a lease or renewed one late (the record
# is written all the same, and says so).
set -uo pipefail

out=${1:-lease-bench-record.md}
seconds=${SECONDS_PER_CELL:-2}
concurrency=${CONCURRENCY:-1,8,32}
batch=${BATCH:-1000}
jobs=${SCHEDULER_JOBS:-200}
crash=${LEADER_CRASH:-1}
scale=${SCALE:-1}
scale_seconds=${SCALE_SECONDS:-60}
scale_pg=${SCALE_LEASES_PG:-100000}
scale_n=${SCALE_LEASES:-10000}
scale_pool=${SCALE_POOL:-4}
sqlite_file=${SQLITE_FILE:-/tmp/lease-bench.db}
scale_sqlite=${SCALE_SQLITE_FILE:-/tmp/lease-scale.db}
pg=${PG_URL:-postgres://postgres@127.0.0.1:5432/test}
pgb=${PGBOUNCER_URL:-postgres://postgres@127.0.0.1:6432/test?statement_mode=unnamed}
my=${MYSQL_URL:-mysql://root@127.0.0.1:3306/test}

here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.." || exit 2
cargo build --release -p lease-bench --bin bench --bin scale || exit 2
"$here/pgbouncer.sh" >/dev/null || exit 2

tmp=$(mktemp -d /tmp/lease-bench-record.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
status=0

crash_flag=()
if [ "$crash" = 1 ]; then crash_flag=(--leader-crash); fi
bench=(target/release/bench --seconds "$seconds" --concurrency "$concurrency" --batch "$batch"
  --scheduler-jobs "$jobs" "${crash_flag[@]}"
  --label SQLite "sqlite://$sqlite_file"
  --label PostgreSQL "$pg"
  --label "PostgreSQL via PgBouncer (transaction pooling)" "$pgb"
  --label MariaDB "$my")

{
  echo "# lease-bench record"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'),"
  echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start."
  echo "Made by \`lease-bench/record.sh\` with SECONDS_PER_CELL=$seconds CONCURRENCY=$concurrency"
  echo "BATCH=$batch SCHEDULER_JOBS=$jobs LEADER_CRASH=$crash SCALE=$scale SCALE_SECONDS=$scale_seconds"
  echo "SCALE_LEASES_PG=$scale_pg SCALE_LEASES=$scale_n SCALE_POOL=$scale_pool."
  echo
  echo "## Operations beside their floors"
  echo
  echo "Each row: the operation through lease-core (lease) and its statements by hand (hand SQL)"
  echo "on the same pool, with \`SELECT 1\`; the p50 and p99 ratios (lease ÷ hand); for the contended"
  echo "claim, the claims won per second on each side; on the servers, the round trips of one"
  echo "operation of each side counted on the wire (a proxy parsing what the client sends). SQLite's"
  echo "rows marked ⁵ are beside its second floor, a connection per worker."
  echo
  echo '```sh'
  printf '%q ' "${bench[@]}" | sed 's/ $//'
  echo
  echo '```'
  echo
} >"$out"

echo "record: bench (progress on stderr)" >&2
if ! "${bench[@]}" >>"$out"; then
  echo "record: the bench failed" >&2
  printf '\n**The bench failed; the tables above are what it printed.**\n' >>"$out"
  status=1
fi

# One scale run: backend's column file, command line.
scale_run() { # figures-file url leases [extra flags...]
  local figures=$1 url=$2 leases=$3
  shift 3
  local cmd=(target/release/scale --leases "$leases" --seconds "$scale_seconds" "$@" "$url")
  printf '%q ' "${cmd[@]}" | sed 's/ $//' >>"$tmp/commands"
  echo >>"$tmp/commands"
  cmd=(target/release/scale --figures "$figures" "${cmd[@]:1}")
  echo "record: ${cmd[*]}" >&2
  if ! "${cmd[@]}" >"$figures.log"; then
    echo "record: the scale run failed or was late: $figures.log" >&2
    status=1
    if [ ! -s "$figures" ]; then printf 'backend\t%s\n' "$url" >"$figures"; fi
    printf 'run\t**failed or late** (exit status non-zero)\n' >>"$figures"
  fi
}

if [ "$scale" = 1 ]; then
  scale_run "$tmp/1-postgres" "$pg" "$scale_pg" --pool "$scale_pool"
  scale_run "$tmp/2-mariadb" "$my" "$scale_n" --pool "$scale_pool"
  scale_run "$tmp/3-sqlite" "sqlite://$scale_sqlite" "$scale_n"
  {
    echo
    echo "## Scale: many leases held by one process"
    echo
    echo "Each lease held (\`Handle::hold\`, default timings: renewals every 2 s, lease 15 s) through"
    echo "\`Leases::with_renewal_batching(true)\`, measured over the window."
    echo
    echo '```sh'
    cat "$tmp/commands"
    echo '```'
    echo
    # The files side by side: a row per measure (in the order first seen),
    # a column per run; the first line of each file names its backend.
    awk -F '\t' '
      FNR == 1 { runs++; head[runs] = $2; next }
      { if (!($1 in seen)) { seen[$1] = ++n; measure[n] = $1 } value[runs, $1] = $2 }
      END {
        line = "| |"; rule = "|---|"
        for (r = 1; r <= runs; r++) { line = line " " head[r] " |"; rule = rule "---|" }
        print line; print rule
        for (i = 1; i <= n; i++) {
          line = "| " measure[i] " |"
          for (r = 1; r <= runs; r++) {
            v = ((r, measure[i]) in value) ? value[r, measure[i]] : "—"
            line = line " " v " |"
          }
          print line
        }
      }' "$tmp"/1-postgres "$tmp"/2-mariadb "$tmp"/3-sqlite
  } >>"$out"
fi

printf '\nLoad average at the end: %s.\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out"
echo "record: written to $out" >&2
exit "$status"
