# shellcheck shell=bash
# Shared by the loadtest scripts (sourced, not run).

# wait_http URL SECONDS: waits until URL answers 2xx; fails with a message after SECONDS.
wait_http() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    curl -sf -o /dev/null "$1" && return 0
    sleep 0.1
  done
  echo "$(basename "$0"): $1 did not come up" >&2
  return 1
}

# require_tools TOOL...: exits with a message naming the first TOOL not installed.
require_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null ||
      { echo "$(basename "$0"): $tool is not installed" >&2; exit 1; }
  done
}

# build_release: builds the workspace's release binaries (from the repository root) and sets
# BUCKETD and LOADTEST to them; BUCKETD_BIN, when set, is the bucketd to run instead (another
# commit's build, for an A/B under the same script).
build_release() {
  echo "building release binaries..." >&2
  cargo build --release --quiet --workspace --bins
  BUCKETD=${BUCKETD_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/bucketd}
  LOADTEST=${CARGO_TARGET_DIR:-$PWD/target}/release/loadtest
}

# stop_pids: kills every process in the array PIDS, then waits for each (for exit traps).
stop_pids() {
  local pid
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && wait "$pid" 2>/dev/null || true; done
}

# start_work NAME: makes the temporary directory WORK and an empty PIDS; on exit, the processes
# in PIDS are stopped and WORK is removed.
start_work() {
  WORK=$(mktemp -d -t "bucketd-$1.XXXXXX")
  PIDS=()
  trap 'stop_pids; rm -rf "$WORK"' EXIT INT TERM
}

# cpu_ticks PID: the process's user and system CPU time so far, in clock ticks.
cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$1/stat"
}

# ms_per_100k TICKS RATE SECONDS: the CPU milliseconds TICKS clock ticks are, per 100,000
# readings of RATE readings/s over SECONDS; 0 when nothing was accepted.
ms_per_100k() {
  awk -v t="$1" -v hz="$(getconf CLK_TCK)" -v r="$2" -v d="$3" \
    'BEGIN { printf "%.0f", (r > 0 ? t / hz * 1000 / (r * d / 100000) : 0) }'
}

# peak_rss_mib PID: the process's peak resident memory (VmHWM), in MiB.
peak_rss_mib() {
  echo $(($(awk '/^VmHWM:/ {print $2}' "/proc/$1/status") / 1024))
}

# past_days: the data of DAYS days at one reading per STEP_MS for each of SENSORS sensors,
# ending at the last whole UTC day before today, so that all of it is in the past; END_DAY
# (YYYY-MM-DD, a day before today) ends it at that day's start instead, so that data kept
# under DATA by an earlier day's run is read again rather than loaded anew. Sets START_MS,
# END_MS, PER_SENSOR (readings a sensor) and COUNT (readings in all).
past_days() {
  local now_ms=$(($(date +%s) * 1000))
  END_MS=$(( (now_ms / 86400000 - 1) * 86400000 ))
  if [ -n "${END_DAY:-}" ]; then
    local day_s day_ms
    day_s=$(date -u -d "$END_DAY" +%s) || { echo "END_DAY=$END_DAY: not a date" >&2; return 1; }
    day_ms=$(( day_s * 1000 ))
    [ "$day_ms" -le "$END_MS" ] ||
      { echo "END_DAY=$END_DAY: must be before today" >&2; return 1; }
    END_MS=$(( day_ms / 86400000 * 86400000 ))
  fi
  START_MS=$(( END_MS - DAYS * 86400000 ))
  PER_SENSOR=$(( DAYS * 86400000 / STEP_MS ))
  COUNT=$(( SENSORS * PER_SENSOR ))
}

# load_days BASE_URL WRITE_PATH: writes past_days' readings as line protocol (measurement
# `m`, tag `sensor`) with the load generator on LOAD_CPU, within an hour; prints its summary.
# JITTER (default 0) makes the values jump by up to that many steps at random (the load
# generator's --jitter) instead of moving by one fixed step.
load_days() {
  echo "loading $COUNT readings ($SENSORS sensors x $PER_SENSOR) into $1..." >&2
  taskset -c "$LOAD_CPU" "$LOADTEST" --url "$1" --path "$2" --protocol lp-http \
    --sensors "$SENSORS" --count "$COUNT" --step-ms "$STEP_MS" --start-ms "$START_MS" \
    --measurement m --jitter "${JITTER:-0}" --batch 5000 --connections 2 --duration 60m \
    >"$WORK/load.log" 2>&1 ||
    { cat "$WORK/load.log" >&2; echo "$(basename "$0"): loading $1 failed" >&2; return 1; }
  tail -n 1 "$WORK/load.log" >&2
}

# peak_rss_kib PID: the process's peak resident memory (VmHWM), KiB.
peak_rss_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

# start_influxd DIR CPU DATABASE: starts InfluxDB 1.x on 127.0.0.1:18086 (RPC :18088) with
# everything under DIR, pinned to CPU, waits for it and creates DATABASE. Sets INFLUXD_PID (the
# caller adds it to its cleanup list). Extra [data] settings may come in INFLUXD_DATA_EXTRA.
start_influxd() {
  local dir=$1 cpu=$2 db=$3
  mkdir -p "$dir"
  cat >"$dir/influxdb.conf" <<CONF
reporting-disabled = true
bind-address = "127.0.0.1:18088"
[meta]
  dir = "$dir/meta"
[data]
  dir = "$dir/data"
  wal-dir = "$dir/wal"
  query-log-enabled = false
  ${INFLUXD_DATA_EXTRA:-}
[monitor]
  store-enabled = false
[http]
  bind-address = "127.0.0.1:18086"
  log-enabled = false
[logging]
  level = "error"
CONF
  taskset -c "$cpu" influxd -config "$dir/influxdb.conf" >"$dir.log" 2>&1 &
  INFLUXD_PID=$!
  wait_http http://127.0.0.1:18086/ping 30
  # Another InfluxDB on the port would answer the ping and take the load and the queries.
  kill -0 "$INFLUXD_PID" 2>/dev/null ||
    { echo "influxd exited (is 127.0.0.1:18086 taken?): $(tail -n 3 "$dir.log")" >&2; return 1; }
  curl -sf -XPOST http://127.0.0.1:18086/query --data-urlencode "q=CREATE DATABASE $db" >/dev/null
}
