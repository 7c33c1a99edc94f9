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
