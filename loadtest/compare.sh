#!/usr/bin/env bash
# Side-by-side ingest comparison: bucketd (embedded store) vs VictoriaMetrics vs InfluxDB 1.x,
# one after the other in this one run, each server pinned to core 0 and the load generator to
# core 1. Every server gets the same line-protocol bodies on /write (10,000 sensors, 5,000 lines
# per request), then one sensor's day at 1 Hz (86,400 readings) is loaded and its range query
# timed. Prints a Markdown table (with each data directory's size per reading accepted, measured
# after the load and, for bucketd, once everything is stored and the store's file compacted);
# the raw loadtest summaries stay
# in $OUT.
#
# Usage: loadtest/compare.sh            (from the repository root)
#   DURATION=20s CONNECTIONS=4 SENSORS=10000 BATCH=5000 QUERY_RUNS=5 OUT=/tmp/x loadtest/compare.sh
#   A sensor fleet, paced:       SENSORS=200000 RATE=1 DURATION=60s loadtest/compare.sh
#   Both cores for everything:   SERVER_CPU=0,1 LOAD_CPU=0,1 loadtest/compare.sh
#   A sustained run, per slice:  DURATION=60s SLICE=10s loadtest/compare.sh
#   Another build of bucketd:    BUCKETD_BIN=/tmp/old/bucketd SERVERS=bucketd loadtest/compare.sh
# Needs: victoria-metrics, influxd (Debian packages), curl, jq, taskset. Everything listens on
# 127.0.0.1 only, stores under a temp dir, and is killed (and the temp dir removed) on exit.
set -euo pipefail

DURATION=${DURATION:-20s}
CONNECTIONS=${CONNECTIONS:-4}
SENSORS=${SENSORS:-10000}
BATCH=${BATCH:-5000}
# Readings per second per sensor; 0 = as fast as the server answers.
RATE=${RATE:-0}
SLICE=${SLICE:-10s}
QUERY_RUNS=${QUERY_RUNS:-5}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
# Comma-separated subset of: bucketd,victoria-metrics,influxdb
SERVERS=${SERVERS:-bucketd,victoria-metrics,influxdb}
# Extra flags for bucketd, e.g. BUCKETD_ARGS="--ack buffered".
BUCKETD_ARGS=${BUCKETD_ARGS:-}

cd "$(dirname "$0")/.."
# shellcheck source=loadtest/lib.sh
. loadtest/lib.sh
WORK=$(mktemp -d -t bucketd-compare.XXXXXX)
OUT=${OUT:-$WORK/out}
mkdir -p "$OUT"
PIDS=()

cleanup() {
  stop_pids
  case "$OUT" in "$WORK"/*) ;; *) echo "summaries kept in $OUT" >&2 ;; esac
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

require_tools victoria-metrics influxd curl jq taskset

build_release

# The day-long series: the UTC day two days ago, one sensor, 1 Hz.
NOW_MS=$(($(date +%s) * 1000))
DAY_START=$(( (NOW_MS / 86400000 - 2) * 86400000 ))
DAY_END=$(( DAY_START + 86400000 ))


load() { # name base_url path [extra loadtest args...]
  local name=$1 url=$2 path=$3
  shift 3
  taskset -c "$LOAD_CPU" "$LOADTEST" --url "$url" --path "$path" --protocol lp-http \
    --sensors "$SENSORS" --batch "$BATCH" --connections "$CONNECTIONS" --duration "$DURATION" \
    --rate "$RATE" --slice "$SLICE" --summary-json "$OUT/$name.json" "$@" 2>&1 \
    | sed -u "s/^/[$name] /" >&2
}

load_day() { # name base_url path
  taskset -c "$LOAD_CPU" "$LOADTEST" --url "$2" --path "$3" --protocol lp-http --sensors 1 \
    --count 86400 --batch "$BATCH" --connections 1 --duration 5m --measurement day \
    --sensor-prefix d --start-ms "$DAY_START" >"$OUT/$1-day.log" 2>&1 ||
    { echo "compare.sh: loading the day into $1 failed; see $OUT/$1-day.log" >&2; return 1; }
}

median_time() { # url [expect-substring-count-check cmd]; prints median seconds of QUERY_RUNS
  local url=$1 i times=()
  for ((i = 0; i < QUERY_RUNS; i++)); do
    times+=("$(curl -s -o "$OUT/query.body" -w '%{time_total}' "$url")")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

declare -A ACCEPTED LANDED SLICES P50 P99 RSS QUERY NOTE DISK

stop() { # pid
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

record() { # name pid
  local name=$1 pid=$2
  ACCEPTED[$name]=$(jq -r '.accepted_per_s | floor' "$OUT/$name.json")
  LANDED[$name]=$(jq -r '.landed_per_s // empty | floor' "$OUT/$name.json")
  SLICES[$name]=$(jq -r '[.slices[] | (.accepted_per_s | floor | tostring)
    + (if .failed_requests > 0 then " (" + (.failed_requests | tostring) + " failed)" else "" end)]
    | join(", ")' "$OUT/$name.json")
  P50[$name]=$(jq -r '.latency_ms.p50' "$OUT/$name.json")
  P99[$name]=$(jq -r '.latency_ms.p99' "$OUT/$name.json")
  RSS[$name]=$(( $(peak_rss_kib "$pid") / 1024 ))
}

# Settled: the embedded store compacts its file once the buffers have been empty for
# --compact-after-quiet (10 s) after writes; wait for that, at most 120 s.
wait_compacted() { # base_url
  for ((i = 0; i < 1200; i++)); do
    curl -s "$1/metrics" | grep -q '^bucketd_store_compactions_total{result="done"}' && return 0
    sleep 0.1
  done
  return 1
}

disk_per_reading() { # name dir: every file under the server's data directory, per reading accepted
  local bytes accepted
  bytes=$(du -sb "$2" | awk '{print $1}')
  accepted=$(jq -r '.accepted' "$OUT/$1.json")
  DISK[$1]=$(awk -v b="$bytes" -v n="$accepted" 'BEGIN { if (n > 0) printf "%.1f", b / n }')
}

# ------------------------------------------------------------------------------------------
if [[ $SERVERS == *bucketd* ]]; then
  echo "== bucketd" >&2
  # Room for the day's series beside the load's, only where the default series (cardinality)
  # bound of 1,000,000 is too small for both, so that BUCKETD_ARGS may still set it.
  series_args=()
  if ((SENSORS + 1 > 1000000)); then series_args=(--max-series "$((SENSORS + 1))"); fi
  # shellcheck disable=SC2086 # BUCKETD_ARGS is a list of flags
  taskset -c "$SERVER_CPU" "$BUCKETD" --http-addr 127.0.0.1:18080 --data-dir "$WORK/bucketd" \
    "${series_args[@]}" ${BUCKETD_ARGS:-} >"$WORK/bucketd.log" 2>&1 &
  pid=$!; PIDS+=("$pid")
  wait_http http://127.0.0.1:18080/health 30
  verify_rc=0
  load bucketd http://127.0.0.1:18080 /write --verify || verify_rc=$?
  record bucketd "$pid"
  NOTE[bucketd]="verify: $(jq -c '.verify | {lost, duplicated, drained_after_ms}' "$OUT/bucketd.json" 2>/dev/null || echo failed) rc=$verify_rc"
  wait_compacted http://127.0.0.1:18080 || NOTE[bucketd]+=" (not compacted within 120 s)"
  disk_per_reading bucketd "$WORK/bucketd"
  load_day bucketd http://127.0.0.1:18080 /write
  wait_http http://127.0.0.1:18080/health 5
  # Time the query from the store: wait until the flusher has taken the day (its buffers are
  # empty; idle buffers are written within about a second), at most 30 s.
  for ((i = 0; i < 300; i++)); do
    buffered=$(curl -s http://127.0.0.1:18080/metrics | awk '$1 == "bucketd_readings_buffered" {print $2}')
    [[ $buffered == 0 ]] && break
    sleep 0.1
  done
  [[ $buffered == 0 ]] || NOTE[bucketd]+=" (queried with $buffered readings still buffered)"
  url="http://127.0.0.1:18080/api/v1/readings?sensor=day%2Csensor%3Dd0&from=$DAY_START&to=$DAY_END&limit=100000&format=json"
  QUERY[bucketd]=$(median_time "$url")
  n=$(grep -o '"t":' "$OUT/query.body" | wc -l)
  NOTE[bucketd]+=" query rows=$n"
  stop "$pid"
fi

if [[ $SERVERS == *victoria* ]]; then
  echo "== victoria-metrics" >&2
  taskset -c "$SERVER_CPU" victoria-metrics -httpListenAddr 127.0.0.1:18428 \
    -storageDataPath "$WORK/vm" -retentionPeriod 100y -loggerLevel ERROR \
    >"$WORK/vm.log" 2>&1 &
  pid=$!; PIDS+=("$pid")
  wait_http http://127.0.0.1:18428/health 30
  load victoria-metrics http://127.0.0.1:18428 /write
  record victoria-metrics "$pid"
  curl -sf http://127.0.0.1:18428/internal/force_flush >/dev/null
  disk_per_reading victoria-metrics "$WORK/vm"
  load_day victoria-metrics http://127.0.0.1:18428 /write
  curl -sf http://127.0.0.1:18428/internal/force_flush >/dev/null
  sleep 2
  url="http://127.0.0.1:18428/api/v1/export?match%5B%5D=%7Bsensor%3D%22d0%22%7D&start=$((DAY_START / 1000))&end=$((DAY_END / 1000 - 1))"
  QUERY[victoria-metrics]=$(median_time "$url")
  n=$(jq -s 'map(.values | length) | add' "$OUT/query.body")
  NOTE[victoria-metrics]="query samples=$n (2 series)"
  stop "$pid"
fi

if [[ $SERVERS == *influx* ]]; then
  echo "== influxdb" >&2
  start_influxd "$WORK/influx" "$SERVER_CPU" loadtest
  pid=$INFLUXD_PID; PIDS+=("$pid")
  load influxdb http://127.0.0.1:18086 '/write?db=loadtest'
  record influxdb "$pid"
  load_day influxdb http://127.0.0.1:18086 '/write?db=loadtest'
  q=$(jq -rn --arg q "SELECT * FROM day WHERE sensor='d0'" '$q | @uri')
  url="http://127.0.0.1:18086/query?db=loadtest&epoch=ms&q=$q"
  QUERY[influxdb]=$(median_time "$url")
  n=$(jq '[.results[0].series[]?.values | length] | add' "$OUT/query.body")
  NOTE[influxdb]="query rows=$n"
  stop "$pid"
fi

# ------------------------------------------------------------------------------------------
echo
pace=$([ "$RATE" = 0 ] && echo "flat out" || echo "$RATE readings/s per sensor")
echo "Load: $SENSORS sensors, $pace, $BATCH lines/request, $CONNECTIONS connections, $DURATION; server on CPU $SERVER_CPU, load on CPU $LOAD_CPU"
echo
echo "| server | accepted readings/s | landed readings/s | accepted per $SLICE slice | p50 ms | p99 ms | peak RSS MiB | data dir B/reading | 86,400-reading range query s (median of $QUERY_RUNS) | notes |"
echo "|---|---:|---:|---|---:|---:|---:|---:|---:|---|"
for name in bucketd victoria-metrics influxdb; do
  [ -n "${ACCEPTED[$name]:-}" ] || continue
  echo "| $name | ${ACCEPTED[$name]} | ${LANDED[$name]:-} | ${SLICES[$name]:-} | ${P50[$name]} | ${P99[$name]} | ${RSS[$name]} | ${DISK[$name]:-} | ${QUERY[$name]:-} | ${NOTE[$name]:-} |"
done
if [ -n "${LANDED[bucketd]:-}" ] && [ -n "${ACCEPTED[victoria-metrics]:-}" ]; then
  echo
  # Landed: acknowledged readings over the load time plus the time until all were stored.
  awk -v b="${LANDED[bucketd]}" -v v="${ACCEPTED[victoria-metrics]}" \
    'BEGIN { printf "bucketd landed / VictoriaMetrics accepted readings/s: %.2fx (target >= 1.5x)\n", b / v }'
fi
