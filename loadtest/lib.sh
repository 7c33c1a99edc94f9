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
# BUCKETD and LOADTEST to them.
build_release() {
  echo "building release binaries..." >&2
  cargo build --release --quiet --workspace --bins
  BUCKETD=$PWD/target/release/bucketd
  LOADTEST=$PWD/target/release/loadtest
}

# stop_pids: kills every process in the array PIDS, then waits for each (for exit traps).
stop_pids() {
  local pid
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && wait "$pid" 2>/dev/null || true; done
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
  curl -sf -XPOST http://127.0.0.1:18086/query --data-urlencode "q=CREATE DATABASE $db" >/dev/null
}
