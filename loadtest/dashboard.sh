#!/usr/bin/env bash
# Dashboard panels on bucketd, VictoriaMetrics and InfluxDB 1.x, on the same data:
# SENSORS sensors at one reading per STEP_MS for DAYS days (measurement `m`, tag `sensor`,
# fields `temperature`, `humidity`), loaded into each server in turn.
#
# A panel is what Grafana sends for a range and a window: the range ends at a "now" that is
# not on a whole hour, and is written as Grafana writes it (`time >= …ms and time <= …ms`,
# `fill(null)`). Ranges and windows: 24 h at 1m and 5m, 7 d at 10m and 1h, 30 d at 7m, 30m
# and 2h; for one sensor, each sensor (GROUP BY "sensor") and all sensors together; with
# mean, max, count, last and median. VictoriaMetrics answers the same panel as a
# `query_range` with `nocache=1` (`avg_over_time(m_temperature[W])` at step W, aggregated
# across series for the all-sensors panel).
#
# Each server runs alone, pinned to SERVER_CPU, with the load and curl on LOAD_CPU. A time is
# the median of QUERY_RUNS (INFLUX_RUNS for InfluxDB, which is slow on the wide panels), after
# WARMUP_RUNS untimed ones.
# bucketd's answers are compared with InfluxDB's, value by value.
#
# Usage: loadtest/dashboard.sh                (from the repository root; about 20 minutes)
#   DAYS=7 SENSORS=20 loadtest/dashboard.sh   (smaller)
#   PANELS='one_30d' SERVERS=bucketd,victoria-metrics loadtest/dashboard.sh
#   DATA=/tmp/dash loadtest/dashboard.sh      (keeps each server's loaded data there, and a
#                                             later run with the same data loads nothing)
#   JITTER=20 loadtest/dashboard.sh           (values jump by up to 20 steps at random, where
#                                             they otherwise move by one fixed step)
#   DATA=/tmp/dash END_DAY=2026-11-30 loadtest/dashboard.sh   (the data ends at that day's
#                                             start, not at the last whole day before today)
# Needs: victoria-metrics, influxd (Debian packages), curl, jq, taskset. Everything listens on
# 127.0.0.1 only, stores under a temp dir, and is killed (and the temp dir removed) on exit.
set -euo pipefail

DAYS=${DAYS:-30}
SENSORS=${SENSORS:-100}
STEP_MS=${STEP_MS:-10000}
QUERY_RUNS=${QUERY_RUNS:-5}
INFLUX_RUNS=${INFLUX_RUNS:-3}
# Untimed requests before a panel's timed ones, so that every server is timed on a warm page
# cache: a host that reclaims idle memory (proactive reclaim in a VM) drops the file pages a
# panel reads when nothing has read them for a minute or so, and the first panel to read a
# range again then waits for the disk.
WARMUP_RUNS=${WARMUP_RUNS:-1}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
# Comma-separated subset of: bucketd,victoria-metrics,influxdb
SERVERS=${SERVERS:-bucketd,victoria-metrics,influxdb}
# A regular expression the panels' names must match, e.g. 'one_|_7m_'.
PANELS=${PANELS:-.}
# Where each server's data is kept between runs; empty: a temp dir, removed on exit.
DATA=${DATA:-}
[ -z "$DATA" ] || mkdir -p "$DATA"

cd "$(dirname "$0")/.."
# shellcheck source=loadtest/lib.sh
. loadtest/lib.sh
start_work dashboard

require_tools victoria-metrics influxd curl jq taskset
build_release

# The data ends at the last whole day before today; "now" is 7 minutes before that, so no
# range starts or ends on a whole hour.
past_days
TO_MS=$(( END_MS - 7 * 60000 ))
# data_dir SERVER: where SERVER's data lives; kept under DATA, named by what was loaded and,
# for bucketd, by the embedded file's schema (a bucketd of a newer schema upgrades a file in
# place, which an older one then refuses).
SCHEMA=$(sed -n 's/.*FILE_SCHEMA_VERSION: u64 = \([0-9]*\);/\1/p' src/store/embedded/mod.rs)
data_dir() {
  local what="$1-${SENSORS}x${STEP_MS}ms-${START_MS}-${END_MS}"
  [ "${JITTER:-0}" = 0 ] || what="$what-jitter$JITTER"
  [ "$1" != bucketd ] || what="$what-schema$SCHEMA"
  if [ -n "$DATA" ]; then echo "$DATA/$what"; else echo "$WORK/$1"; fi
}
# loaded SERVER: whether SERVER's data under DATA was loaded (and settled) by an earlier run.
loaded() { [ -n "$DATA" ] && [ -e "$(data_dir "$1")/.loaded" ]; }
# clear_unloaded SERVER: removes what a run stopped during its load left under DATA, so that
# the load starts from nothing (readings loaded twice would be counted twice by a server that
# keeps both).
clear_unloaded() { loaded "$1" || [ -z "$DATA" ] || rm -rf "$(data_dir "$1")"; }
LAST=$(( SENSORS - 1 ))
ONE=$(printf "s%0${#LAST}d" 7)
[ "$SENSORS" -gt 7 ] || ONE=$(printf "s%0${#LAST}d" 0)

declare -A WINDOW_MS=([1m]=60000 [5m]=300000 [7m]=420000 [10m]=600000 [30m]=1800000 [1h]=3600000 [2h]=7200000)
declare -A RANGE_MS=([24h]=86400000 [7d]=604800000 [30d]=2592000000)
# range:window pairs, as Grafana picks windows for a panel about 1,000 pixels wide.
SHAPES=(24h:1m 24h:5m 7d:10m 7d:1h 30d:7m 30d:30m 30d:2h)
FUNCS=(mean max count last median)
SCOPES=(one each all)

declare -A INFLUXQL PROMQL START STEP
ORDER=()
for shape in "${SHAPES[@]}"; do
  range=${shape%%:*} window=${shape#*:}
  [ "${RANGE_MS[$range]}" -le $(( DAYS * 86400000 )) ] || continue
  from=$(( TO_MS - ${RANGE_MS[$range]} ))
  for scope in "${SCOPES[@]}"; do
    for f in "${FUNCS[@]}"; do
      name="${scope}_${range}_${window}_${f}"
      [[ $name =~ $PANELS ]] || continue
      where="time >= ${from}ms and time <= ${TO_MS}ms"
      by=""
      selector='m_temperature'
      case $scope in
        one) where="\"sensor\" = '$ONE' and $where"; selector="m_temperature{sensor=\"$ONE\"}" ;;
        each) by=', "sensor"' ;;
      esac
      INFLUXQL[$name]="SELECT $f(\"temperature\") FROM \"m\" WHERE $where GROUP BY time($window)$by fill(null)"
      case $f in
        mean) inner="avg_over_time($selector[$window])" across=avg ;;
        max) inner="max_over_time($selector[$window])" across=max ;;
        count) inner="count_over_time($selector[$window])" across=sum ;;
        last) inner="last_over_time($selector[$window])" across=max ;;
        median) inner="median_over_time($selector[$window])" across=median ;;
      esac
      if [ "$scope" = all ]; then PROMQL[$name]="$across($inner)"; else PROMQL[$name]=$inner; fi
      START[$name]=$(( from / 1000 ))
      STEP[$name]=$(( ${WINDOW_MS[$window]} / 1000 ))
      ORDER+=("$name")
    done
  done
done
[ "${#ORDER[@]}" -gt 0 ] || { echo "dashboard.sh: no panel matches PANELS=$PANELS" >&2; exit 1; }


declare -A TIME ROWS ERROR
median_of() { sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)] * 1000}'; }

# time_panels SERVER RUNS URL-FOR-PANEL-FUNCTION
time_panels() {
  local server=$1 runs=$2 urlfn=$3 name url i times
  for name in "${ORDER[@]}"; do
    url=$($urlfn "$name")
    times=()
    for ((i = 0; i < WARMUP_RUNS; i++)); do
      taskset -c "$LOAD_CPU" curl -s --max-time 300 -o /dev/null "$url"
    done
    for ((i = 0; i < runs; i++)); do
      times+=("$(taskset -c "$LOAD_CPU" curl -s --max-time 300 -o "$WORK/body" -w '%{time_total}' "$url")")
    done
    TIME[$server.$name]=$(printf '%s\n' "${times[@]}" | median_of)
    cp "$WORK/body" "$WORK/$server.$name.json"
    if [ "$server" = victoria-metrics ]; then
      ROWS[$server.$name]=$(jq '[.data.result[]?.values | length] | add // 0' "$WORK/body")
      ERROR[$server.$name]=$(jq -r '.error // empty' "$WORK/body")
    else
      ROWS[$server.$name]=$(jq '[.results[0].series[]?.values | length] | add // 0' "$WORK/body")
      ERROR[$server.$name]=$(jq -r '.error // .results[0].error // empty' "$WORK/body")
    fi
    echo "  $server $name ${TIME[$server.$name]} ms, ${ROWS[$server.$name]} rows ${ERROR[$server.$name]}" >&2
  done
}
uri() { jq -rn --arg q "$1" '$q | @uri'; }
bucketd_url() { echo "http://127.0.0.1:18080/query?db=bucketd&epoch=ms&q=$(uri "${INFLUXQL[$1]}")"; }
influx_url() { echo "http://127.0.0.1:18086/query?db=bench&epoch=ms&q=$(uri "${INFLUXQL[$1]}")"; }
vm_url() {
  echo "http://127.0.0.1:18428/api/v1/query_range?nocache=1&start=${START[$1]}&end=$((TO_MS / 1000))&step=${STEP[$1]}s&query=$(uri "${PROMQL[$1]}")"
}

# load_once SERVER LOAD-FUNCTION: loads SERVER's data with LOAD-FUNCTION, unless an earlier run
# left it loaded under DATA.
load_once() {
  if loaded "$1"; then
    echo "  data loaded by an earlier run: $(data_dir "$1")" >&2
  else
    "$2"
    [ -z "$DATA" ] || touch "$(data_dir "$1")/.loaded"
  fi
}

# read_files SERVER: reads SERVER's data files once, so that its first panels do not wait for
# the disk (see WARMUP_RUNS); a file the running server removes meanwhile is no failure.
read_files() { find "$(data_dir "$1")" -type f -exec cat {} + >/dev/null 2>&1 || true; }

# load_bucketd: loads the data into bucketd and waits until all of it is in the store, sealed
# and compacted.
load_bucketd() {
  local i m
  load_days http://127.0.0.1:18080 /write
  # Time the store, not the buffers: everything flushed, the log settled, and every hour
  # sealed (as VictoriaMetrics' merges are waited for below).
  for ((i = 0; i < 6000; i++)); do
    m=$(curl -s http://127.0.0.1:18080/metrics)
    if grep -q '^bucketd_readings_buffered 0$' <<<"$m" && grep -q '^bucketd_wal_unsettled_readings 0$' <<<"$m"; then break; fi
    sleep 0.1
  done
  for ((i = 0; i < 6000; i++)); do
    grep -q '^bucketd_store_chunks_unsealed 0$' <<<"$(curl -s http://127.0.0.1:18080/metrics)" && break
    sleep 0.1
  done
  # The compaction that follows a load once writes have been quiet (--compact-after-quiet)
  # holds the store while it runs: panels timed during it wait for it.
  local compacted="no compaction within 120 s; timing anyway"
  for ((i = 0; i < 1200; i++)); do
    if grep -q '^bucketd_store_compactions_total{result="done"}' <<<"$(curl -s http://127.0.0.1:18080/metrics)"; then
      compacted="store compacted"
      break
    fi
    sleep 0.1
  done
  echo "  $compacted" >&2
}

# load_vm: loads the data into VictoriaMetrics and waits for its merges.
load_vm() {
  local i busy
  load_days http://127.0.0.1:18428 /write
  curl -sf http://127.0.0.1:18428/internal/force_flush >/dev/null
  # Background merges after the load would be timed with the first panels.
  for ((i = 0; i < 600; i++)); do
    busy=$(curl -s http://127.0.0.1:18428/metrics | awk '/^vm_active_merges/ {s += $2} END {print s + 0}')
    [ "$busy" = 0 ] && break
    sleep 0.5
  done
}

if [[ $SERVERS == *bucketd* ]]; then
  echo "== bucketd" >&2
  clear_unloaded bucketd
  taskset -c "$SERVER_CPU" "$BUCKETD" --http-addr 127.0.0.1:18080 --data-dir "$(data_dir bucketd)" \
    >"$WORK/bucketd.log" 2>&1 &
  pid=$!; PIDS+=("$pid")
  wait_http http://127.0.0.1:18080/health 30
  load_once bucketd load_bucketd
  read_files bucketd
  time_panels bucketd "$QUERY_RUNS" bucketd_url
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
fi

if [[ $SERVERS == *victoria* ]]; then
  echo "== victoria-metrics" >&2
  clear_unloaded vm
  taskset -c "$SERVER_CPU" victoria-metrics -httpListenAddr 127.0.0.1:18428 \
    -storageDataPath "$(data_dir vm)" -retentionPeriod 100y -loggerLevel ERROR \
    >"$WORK/vm.log" 2>&1 &
  pid=$!; PIDS+=("$pid")
  wait_http http://127.0.0.1:18428/health 30
  load_once vm load_vm
  read_files vm
  time_panels victoria-metrics "$QUERY_RUNS" vm_url
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
fi

if [[ $SERVERS == *influx* ]]; then
  echo "== influxdb" >&2
  # A 4 GiB cache: the default 1 GiB refuses writes at this load rate before compaction catches up.
  INFLUXD_DATA_EXTRA='cache-max-memory-size = "4g"' start_influxd "$WORK/influx" "$SERVER_CPU" bench
  pid=$INFLUXD_PID; PIDS+=("$pid")
  load_days http://127.0.0.1:18086 '/write?db=bench'
  time_panels influxdb "$INFLUX_RUNS" influx_url
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
fi

# Whether bucketd's answer is InfluxDB's: the same series, times and values (floats within
# a relative 1e-9: the two sum in different orders).
same_answer() {
  jq -n --slurpfile a "$WORK/bucketd.$1.json" --slurpfile b "$WORK/influxdb.$1.json" '
    def rows(r): [r.results[0].series[]? | {tags, values}];
    def close(x; y): (x == y) or ((x | type) == "number" and (y | type) == "number"
      and ((x - y) | fabs) <= 1e-9 * ((y | fabs) + 1));
    rows($a[0]) as $x | rows($b[0]) as $y
    | ($x | length) == ($y | length) and all(range(0; $x | length); . as $i
      | $x[$i].tags == $y[$i].tags and ($x[$i].values | length) == ($y[$i].values | length)
      and all(range(0; $x[$i].values | length); . as $j
        | $x[$i].values[$j][0] == $y[$i].values[$j][0] and close($x[$i].values[$j][1]; $y[$i].values[$j][1])))'
}

echo
echo "Data: $SENSORS sensors, one reading per $((STEP_MS / 1000)) s for $DAYS days ($COUNT readings); bucketd on the embedded store; each server alone on CPU $SERVER_CPU; median of $QUERY_RUNS (InfluxDB: $INFLUX_RUNS); times in ms"
echo
echo "| panel | rows | bucketd | VictoriaMetrics | InfluxDB 1.x | VictoriaMetrics / bucketd | same as InfluxDB |"
echo "|---|---:|---:|---:|---:|---:|---|"
slower=0 failed=0
for name in "${ORDER[@]}"; do
  b=${TIME[bucketd.$name]:-} v=${TIME[victoria-metrics.$name]:-} i=${TIME[influxdb.$name]:-}
  # An answer that is an error is no answer, however fast.
  [ -z "${ERROR[bucketd.$name]:-}" ] || b=error
  [ -z "${ERROR[victoria-metrics.$name]:-}" ] || v=error
  [ -z "${ERROR[influxdb.$name]:-}" ] || i=error
  ratio=""
  if [ "$b" = error ]; then
    failed=$((failed + 1))
  elif [ -n "$b" ] && [ -n "$v" ] && [ "$v" != error ]; then
    ratio=$(awk -v v="$v" -v b="$b" 'BEGIN { printf "%.2fx", v / b }')
    awk -v v="$v" -v b="$b" 'BEGIN { exit !(b > v) }' && slower=$((slower + 1))
  fi
  same=""
  if [ -n "$b" ] && [ -n "$i" ] && [ "$b" != error ] && [ "$i" != error ]; then
    if [ "$(same_answer "$name")" = true ]; then same=yes; else same=**no**; fi
  fi
  echo "| $name | ${ROWS[bucketd.$name]:-${ROWS[influxdb.$name]:-}} | $b | $v | $i | $ratio | $same |"
done
echo
echo "panels where bucketd is slower than VictoriaMetrics: $slower of ${#ORDER[@]}; answered with an error: $failed"
