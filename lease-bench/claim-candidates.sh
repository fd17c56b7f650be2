#!/usr/bin/env bash
# PostgreSQL's claim, candidate statements side by side (issue 24, items 1,
# 2 and 5): each candidate's claim + release, and its contended claim (every
# client on one name, released when won), run with pgbench, interleaved:
# round after round, each concurrency, each candidate in turn for SECONDS.
# Prints one line per measurement and, at the end, the medians over the
# rounds of each candidate's ratio to the plain UPDATE (hand) measured in the
# same round; then the wait events of the contended claim at the highest
# concurrency, sampled from pg_stat_activity.
#
#   lease-bench/claim-candidates.sh [URL]
#     (default postgres://postgres@127.0.0.1:5432/test)
#
# Settings from the environment: SECONDS_EACH [3] ROUNDS [3] CONCURRENCY
# ["1 8 32"] MODES ["prepared extended"] (extended: unnamed statements,
# parsed and planned on every call, as behind PgBouncer in transaction
# pooling) CANDIDATES ["hand store lock key fn"] COMMIT ["on"] (the
# sessions' synchronous_commit: "off" takes the WAL flush out of each
# commit, which on a machine whose disk is busy with other work dominates
# every candidate alike and hides what the statements themselves cost).
#
# The candidates (the claim's text mirrors lease-sql's, on tables of this
# script's own, lease_cand_*, dropped at the end):
#   hand   the plain UPDATE of the floor in lease-bench: FOR NO KEY UPDATE,
#          which a guarded transaction's FOR KEY SHARE does not stop: not a
#          candidate, the floor.
#   store  the store's claim: FOR UPDATE of a claimable row, the update, an
#          insert ON CONFLICT DO NOTHING for a name without a row.
#   lock   the store's claim without the insert part (its FOR UPDATE and
#          update only): what the insert part costs.
#   key    a plain UPDATE on a table with a unique index on (name, term):
#          PostgreSQL takes FOR UPDATE for an update that changes a column
#          of a unique index, and so the update itself waits for FOR KEY
#          SHARE; a NULL row says the name has no row (the insert then goes
#          in a second statement, for a name's first claim only).
#   fn     a PL/pgSQL function doing the store's claim in two statements
#          (FOR UPDATE, then the update or the insert), its plans cached
#          per session.
set -uo pipefail

url=${1:-postgres://postgres@127.0.0.1:5432/test}
secs=${SECONDS_EACH:-3}
rounds=${ROUNDS:-3}
conc=${CONCURRENCY:-1 8 32}
modes=${MODES:-prepared extended}
cands=${CANDIDATES:-hand store lock key fn}
export PGOPTIONS="${PGOPTIONS:-} -c synchronous_commit=${COMMIT:-on} -c client_min_messages=warning"

dir=$(mktemp -d /tmp/lease-claim-candidates.XXXXXX)
cleanup() {
  psql -q "$url" -c "DROP TABLE IF EXISTS lease_cand, lease_cand_key; DROP FUNCTION IF EXISTS lease_cand_claim(text, text, text, bigint)" >/dev/null 2>&1
  rm -rf "$dir"
}
trap cleanup EXIT

now="floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
psql -q -v ON_ERROR_STOP=1 "$url" >/dev/null <<EOF || exit 2
DROP TABLE IF EXISTS lease_cand, lease_cand_key;
CREATE TABLE lease_cand (name text COLLATE "C" NOT NULL PRIMARY KEY, holder text NOT NULL,
  instance text NOT NULL, term bigint NOT NULL, expires_at_ms bigint NOT NULL,
  slot_ms bigint NOT NULL DEFAULT 0, unfinished_slot_ms bigint NOT NULL DEFAULT 0,
  rerun_slot_ms bigint NOT NULL DEFAULT 0);
CREATE TABLE lease_cand_key (LIKE lease_cand INCLUDING ALL);
CREATE UNIQUE INDEX lease_cand_key_name_term ON lease_cand_key (name, term);
INSERT INTO lease_cand SELECT 'c' || i, 'x', 'i', 1, 0 FROM generate_series(0, 63) i;
INSERT INTO lease_cand VALUES ('contended', 'x', 'i', 1, 0);
INSERT INTO lease_cand_key SELECT * FROM lease_cand;
CREATE OR REPLACE FUNCTION lease_cand_claim(p_name text, p_token text, p_instance text, p_lease bigint)
RETURNS bigint LANGUAGE plpgsql AS \$\$
DECLARE now_ms bigint := $now; t bigint;
BEGIN
  SELECT l.term INTO t FROM lease_cand AS l
   WHERE l.name = p_name AND l.expires_at_ms <= now_ms FOR UPDATE;
  IF FOUND THEN
    UPDATE lease_cand AS l SET holder = p_token, instance = p_instance, term = l.term + 1,
           expires_at_ms = now_ms + p_lease
     WHERE l.name = p_name AND l.term = t RETURNING l.term INTO t;
    RETURN t;
  END IF;
  INSERT INTO lease_cand (name, holder, instance, term, expires_at_ms)
  SELECT p_name, p_token, p_instance, 1, now_ms + p_lease
   WHERE NOT EXISTS (SELECT 1 FROM lease_cand WHERE name = p_name)
  ON CONFLICT (name) DO NOTHING RETURNING term INTO t;
  RETURN t;
END \$\$;
EOF

# The claim of each candidate, on the name N, answering `won` (0 or 1).
claim() { # candidate name-expression
  local n=$2
  case $1 in
  hand)
    echo "WITH u AS (UPDATE lease_cand SET holder = 'h' || :client_id, instance = 'i', term = term + 1, expires_at_ms = $now + 15000 WHERE name = $n AND expires_at_ms <= $now RETURNING 1) SELECT count(*) AS won FROM u" ;;
  store)
    echo "WITH now AS MATERIALIZED (SELECT $now AS ms), locked AS MATERIALIZED (SELECT l.term FROM lease_cand AS l, now WHERE l.name = $n AND l.expires_at_ms <= now.ms FOR UPDATE OF l), taken AS (UPDATE lease_cand AS l SET holder = 'h' || :client_id, instance = 'i', term = l.term + 1, expires_at_ms = now.ms + 15000 FROM now, locked WHERE l.name = $n AND l.term = locked.term AND l.expires_at_ms <= now.ms RETURNING l.term), inserted AS (INSERT INTO lease_cand (name, holder, instance, term, expires_at_ms, slot_ms, unfinished_slot_ms, rerun_slot_ms) SELECT $n, 'h' || :client_id, 'i', 1, now.ms + 15000, 0, 0, 0 FROM now WHERE NOT EXISTS (SELECT 1 FROM lease_cand WHERE name = $n) ON CONFLICT (name) DO NOTHING RETURNING term) SELECT count(*) AS won FROM (SELECT term FROM taken UNION ALL SELECT term FROM inserted) AS claimed" ;;
  lock)
    echo "WITH now AS MATERIALIZED (SELECT $now AS ms), locked AS MATERIALIZED (SELECT l.term FROM lease_cand AS l, now WHERE l.name = $n AND l.expires_at_ms <= now.ms FOR UPDATE OF l), taken AS (UPDATE lease_cand AS l SET holder = 'h' || :client_id, instance = 'i', term = l.term + 1, expires_at_ms = now.ms + 15000 FROM now, locked WHERE l.name = $n AND l.term = locked.term AND l.expires_at_ms <= now.ms RETURNING l.term) SELECT count(*) AS won FROM taken" ;;
  key)
    echo "WITH now AS MATERIALIZED (SELECT $now AS ms), taken AS (UPDATE lease_cand_key AS l SET holder = 'h' || :client_id, instance = 'i', term = l.term + 1, expires_at_ms = now.ms + 15000 FROM now WHERE l.name = $n AND l.expires_at_ms <= now.ms RETURNING l.term) SELECT count(term) AS won FROM (SELECT term FROM taken UNION ALL SELECT NULL WHERE NOT EXISTS (SELECT 1 FROM lease_cand_key WHERE name = $n)) AS claimed" ;;
  fn)
    echo "SELECT count(t) AS won FROM lease_cand_claim($n, 'h' || :client_id, 'i', 15000) AS t" ;;
  esac
}
table_of() { if [ "$1" = key ]; then echo lease_cand_key; else echo lease_cand; fi; }

for c in $cands; do
  t=$(table_of "$c")
  {
    echo "$(claim "$c" "'c' || :client_id") \\gset"
    echo "UPDATE $t SET expires_at_ms = 0 WHERE name = 'c' || :client_id AND holder = 'h' || :client_id;"
  } >"$dir/$c.sql"
  {
    echo "$(claim "$c" "'contended'") \\gset"
    echo "\\if :won"
    echo "UPDATE $t SET expires_at_ms = 0 WHERE name = 'contended' AND holder = 'h' || :client_id;"
    echo "\\endif"
  } >"$dir/k_$c.sql"
done

terms() { psql -At "$url" -c "SELECT (SELECT term FROM lease_cand WHERE name = 'contended') + (SELECT term FROM lease_cand_key WHERE name = 'contended')"; }
run() { # mode concurrency script -> transactions/s
  local j=1
  [ "$2" -gt 1 ] && j=2
  pgbench -n -M "$1" -c "$2" -j "$j" -T "$secs" -f "$3" "$url" 2>/dev/null | awk '/^tps/ { print $3 }'
}

echo "# claim candidates: $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg), synchronous_commit=${COMMIT:-on}"
echo "# round mode concurrency candidate claim+release/s contended-calls/s contended-wins/s"
for r in $(seq "$rounds"); do
  for m in $modes; do
    for n in $conc; do
      for c in $cands; do
        cr=$(run "$m" "$n" "$dir/$c.sql")
        a=$(terms)
        kc=$(run "$m" "$n" "$dir/k_$c.sql")
        b=$(terms)
        wins=$(awk -v a="$a" -v b="$b" -v s="$secs" 'BEGIN { printf "%.1f", (b - a) / s }')
        echo "$r $m $n $c $cr $kc $wins" | tee -a "$dir/all"
      done
    done
  done
done

echo
echo "Medians over $rounds round(s) of each candidate's ratio to hand in the same round"
echo "(claim + release: hand's rate ÷ the candidate's, so above 1 is slower; wins: the"
echo "candidate's ÷ hand's, so below 1 hands the name over less often):"
echo
echo "| mode | c | candidate | claim + release, × hand | contended wins/s, × hand |"
echo "|---|---|---|---|---|"
awk '
  { key = $2 " " $3 " " $1; rate[key, $4] = $5; wins[key, $4] = $7; seen[$2 " " $3 " " $4] = 1
    if (!($4 in order)) { order[$4] = ++nc; name[nc] = $4 } modes[$2] = 1; concs[$3] = 1; rounds[$1] = 1 }
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    for (m in modes) for (c in concs) for (i = 1; i <= nc; i++) {
      cand = name[i]; if (!((m " " c " " cand) in seen)) continue
      n1 = 0; n2 = 0; delete r1; delete r2
      for (r in rounds) {
        k = m " " c " " r
        if (rate[k, cand] > 0 && rate[k, "hand"] > 0) r1[++n1] = rate[k, "hand"] / rate[k, cand]
        if (wins[k, "hand"] > 0) r2[++n2] = wins[k, cand] / wins[k, "hand"]
      }
      printf "| %s | %s | %s | %s | %s |\n", m, c, cand,
        n1 ? sprintf("%.2f", median(r1, n1)) : "—", n2 ? sprintf("%.2f", median(r2, n2)) : "—"
    }
  }' "$dir/all" | sort -t'|' -k2,2 -k3,3n

# Where the contended claim waits: pg_stat_activity of pgbench's sessions,
# sampled every 0.1 s while each candidate runs at the highest concurrency.
top=$(echo "$conc" | tr ' ' '\n' | sort -n | tail -1)
echo
echo "Wait events of the contended claim at c = $top (samples of pgbench's sessions, mode prepared):"
for c in $cands; do
  pgbench -n -M prepared -c "$top" -j 2 -T "$secs" -f "$dir/k_$c.sql" "$url" >/dev/null 2>&1 &
  pid=$!
  sleep 0.5
  while kill -0 "$pid" 2>/dev/null; do
    psql -At "$url" -c "SELECT coalesce(wait_event_type, 'CPU') || ':' || coalesce(wait_event, '-') || ' (' || state || ')' FROM pg_stat_activity WHERE application_name = 'pgbench' AND pid <> pg_backend_pid()" 2>/dev/null
    sleep 0.1
  done | sort | uniq -c | sort -rn | awk -v c="$c" '{ n = $1; $1 = ""; printf "  %-6s %5d %s\n", c, n, $0 }'
  wait "$pid"
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
