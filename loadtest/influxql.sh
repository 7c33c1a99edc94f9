#!/usr/bin/env bash
# InfluxQL speed against InfluxDB 1.x on the same data: 100 sensors at one reading per 10 s for
# 30 days (25,920,000 readings, measurement `m`, tag `sensor`, fields `temperature`, `humidity`), then
#   SELECT mean("temperature") FROM "m" WHERE <the 30 days> GROUP BY time(1h)            (one series)
#   SELECT mean("temperature") FROM "m" WHERE <the 30 days> GROUP BY time(1h), "sensor"  (100 series)
#   SELECT max("temperature") FROM "m" WHERE <the 30 days> GROUP BY time(10m)            (readings path)
# timed with curl, median of QUERY_RUNS, each server pinned to core 0 and the load to core 1.
# bucketd answers whole hours from bucket statistics; InfluxDB reads its TSM blocks.
#
# Usage: loadtest/influxql.sh                 (from the repository root; about 5 minutes)
#   DAYS=7 SENSORS=100 QUERY_RUNS=5 STORE=embedded loadtest/influxql.sh
#   STORE=mongodb MONGODB_URI=mongodb://127.0.0.1:27017 loadtest/influxql.sh   (a real MongoDB)
# Needs: influxd (Debian package influxdb), curl, jq, taskset. Everything listens on 127.0.0.1
# only, stores under a temp dir, and is killed (and the temp dir removed) on exit.
set -euo pipefail

DAYS=${DAYS:-30}
SENSORS=${SENSORS:-100}
STEP_MS=${STEP_MS:-10000}
QUERY_RUNS=${QUERY_RUNS:-5}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
STORE=${STORE:-embedded}
MONGODB_URI=${MONGODB_URI:-}

cd "$(dirname "$0")/.."
# shellcheck source=loadtest/lib.sh
. loadtest/lib.sh
start_work influxql

require_tools influxd curl jq taskset
if [ "$STORE" = mongodb ] && [ -z "$MONGODB_URI" ]; then
  echo "influxql.sh: STORE=mongodb needs MONGODB_URI" >&2; exit 1
fi

build_release

# The data ends at the last whole day before today, so the whole range is in the past.
past_days
WHERE="time >= ${START_MS}ms AND time < ${END_MS}ms"
declare -A QUERIES=(
  [hour]="SELECT mean(\"temperature\") FROM \"m\" WHERE $WHERE GROUP BY time(1h)"
  [hour_by_sensor]="SELECT mean(\"temperature\") FROM \"m\" WHERE $WHERE GROUP BY time(1h), \"sensor\""
  [ten_minutes_max]="SELECT max(\"temperature\") FROM \"m\" WHERE $WHERE GROUP BY time(10m)"
)
ORDER=(hour hour_by_sensor ten_minutes_max)

declare -A TIME ROWS
time_queries() { # name base_url db
  local name=$1 url=$2 db=$3 key q i times
  for key in "${ORDER[@]}"; do
    q=$(jq -rn --arg q "${QUERIES[$key]}" '$q | @uri')
    times=()
    for ((i = 0; i < QUERY_RUNS; i++)); do
      times+=("$(curl -s -o "$WORK/body" -w '%{time_total}' "$url/query?db=$db&epoch=ms&q=$q")")
    done
    TIME[$name.$key]=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    ROWS[$name.$key]=$(jq '[.results[0].series[]?.values | length] | add // 0' "$WORK/body")
    cp "$WORK/body" "$WORK/$name.$key.json"
  done
}

# ---- bucketd
echo "== bucketd ($STORE)" >&2
store_args=(--data-dir "$WORK/bucketd")
[ "$STORE" = mongodb ] && store_args+=(--mongodb-uri "$MONGODB_URI" --mongodb-database "bucketd_influxql_$$")
taskset -c "$SERVER_CPU" "$BUCKETD" --http-addr 127.0.0.1:18080 "${store_args[@]}" \
  >"$WORK/bucketd.log" 2>&1 &
pid=$!; PIDS+=("$pid")
wait_http http://127.0.0.1:18080/health 30
load_days http://127.0.0.1:18080 /write
# Time the store, not the buffers: wait until everything is flushed and the log settled.
for ((i = 0; i < 6000; i++)); do
  m=$(curl -s http://127.0.0.1:18080/metrics)
  if grep -q '^bucketd_readings_buffered 0$' <<<"$m" && grep -q '^bucketd_wal_unsettled_readings 0$' <<<"$m"; then break; fi
  sleep 0.1
done
time_queries bucketd http://127.0.0.1:18080 bucketd
kill "$pid"; wait "$pid" 2>/dev/null || true

# ---- InfluxDB
echo "== influxdb" >&2
# A 4 GiB cache: the default 1 GiB refuses writes at this load rate before compaction catches up.
INFLUXD_DATA_EXTRA='cache-max-memory-size = "4g"' start_influxd "$WORK/influx" "$SERVER_CPU" bench
pid=$INFLUXD_PID; PIDS+=("$pid")
load_days http://127.0.0.1:18086 '/write?db=bench'
time_queries influxdb http://127.0.0.1:18086 bench
kill "$pid"; wait "$pid" 2>/dev/null || true

# Both must give the same answer for the speed to mean anything.
for key in "${ORDER[@]}"; do
  if ! diff -q <(jq -S . "$WORK/bucketd.$key.json") <(jq -S . "$WORK/influxdb.$key.json") >/dev/null; then
    same=$(jq -n --slurpfile a "$WORK/bucketd.$key.json" --slurpfile b "$WORK/influxdb.$key.json" \
      '[$a[0].results[0].series[].values[][1]] as $x | [$b[0].results[0].series[].values[][1]] as $y
       | ($x | length) == ($y | length) and ([range(0; $x | length) | select((($x[.] // 0) - ($y[.] // 0)) | fabs > 1e-9 * ((($y[.] // 0) | fabs) + 1))] | length == 0)')
    [ "$same" = true ] || echo "influxql.sh: $key: bucketd and InfluxDB answer differently" >&2
  fi
done

echo
echo "Data: $SENSORS sensors, one reading per $((STEP_MS / 1000)) s for $DAYS days ($COUNT readings); bucketd on the $STORE store; server on CPU $SERVER_CPU, load on CPU $LOAD_CPU; median of $QUERY_RUNS"
echo
echo "| query | rows | InfluxDB 1.x s | bucketd s | bucketd faster by |"
echo "|---|---:|---:|---:|---:|"
for key in "${ORDER[@]}"; do
  b=${TIME[bucketd.$key]} i=${TIME[influxdb.$key]}
  ratio=$(awk -v i="$i" -v b="$b" 'BEGIN { printf "%.1fx", i / b }')
  echo "| \`${QUERIES[$key]//$WHERE/<30 days>}\` | ${ROWS[bucketd.$key]} | $i | $b | $ratio |"
done
