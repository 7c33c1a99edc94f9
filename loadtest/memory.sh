#!/usr/bin/env bash
# The memory budget's shapes on the release binary at default flags: bucketd pinned to core 0,
# the load generator to core 1, and the process's peak RSS (VmHWM from /proc) after each.
#
#   strings-down  4,000-byte string per reading; MongoDB gone once bucketd is ready
#   wide-down     256 fields per reading; MongoDB gone
#   series-down   1,000,000 sensors (new series); MongoDB gone
#   strings-slow  4,000-byte strings; MongoDB up, every update command delayed 200 ms
#   strings       4,000-byte strings, embedded store (at most COUNT readings), then --verify
#   wide          256 fields, embedded store (at most COUNT readings), then --verify
#   series        1,000,000 sensors, embedded store, then everything stored
#
# With MongoDB gone, the load runs until DURATION is over (the log fills, then every write is
# refused with 503); the script then waits until the flusher has failed twice more (what it
# holds is retried) and checks that the log holds every acknowledged reading. MongoDB is the
# test stand-in (tests/mongo_standin/bridge.py), so "slow" is slower than any real server.
#
# Usage: loadtest/memory.sh          (from the repository root)
#   SHAPES=strings-down,series DURATION=60s COUNT=500000 LIMIT_MIB=1024 loadtest/memory.sh
#   SAMPLES=/tmp/mem loadtest/memory.sh   # also RSS and the budget's gauges every second, per shape
# Prints a Markdown table; exits non-zero if a shape passed LIMIT_MIB or lost a reading.
# Needs: python3 with venv (for the stand-in), curl, jq, taskset. Listens on 127.0.0.1 only,
# stores under a temp dir, and kills what it started (and removes the temp dir) on exit.
set -euo pipefail

SHAPES=${SHAPES:-strings-down,wide-down,series-down,strings-slow,strings,wide,series}
DURATION=${DURATION:-60s}
COUNT=${COUNT:-500000}
LIMIT_MIB=${LIMIT_MIB:-1024}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
SAMPLES=${SAMPLES:-}

cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=loadtest/lib.sh
. loadtest/lib.sh
start_work memory

require_tools python3 curl jq taskset

build_release
BASE=http://127.0.0.1:18080

# The stand-in's interpreter: the tests' venv when it is ready, else one made here.
standin_python() {
  local venv=$ROOT/target/mongo-standin-venv
  if ! cmp -s "$venv/bucketd-ready" tests/mongo_standin/requirements.txt; then
    venv=$WORK/venv
    if [ ! -x "$venv/bin/python" ]; then
      echo "installing the MongoDB stand-in's requirements..." >&2
      python3 -m venv "$venv"
      "$venv/bin/python" -m pip install -q --disable-pip-version-check \
        -r tests/mongo_standin/requirements.txt
    fi
  fi
  echo "$venv/bin/python"
}

# start_standin [bridge args...]: sets STANDIN_PID and STANDIN_URI. The bridge exits when its
# stdin closes; a fifo held open by a bounded sleep keeps it open.
start_standin() {
  local python fifo=$WORK/standin.in port i
  python=$(standin_python)
  rm -f "$fifo" "$WORK/standin.out"
  mkfifo "$fifo"
  sleep 7200 >"$fifo" &
  FIFO_PID=$!
  PIDS+=("$FIFO_PID")
  taskset -c "$SERVER_CPU" "$python" -u tests/mongo_standin/bridge.py "$@" <"$fifo" \
    >"$WORK/standin.out" 2>"$WORK/standin.log" &
  STANDIN_PID=$!
  PIDS+=("$STANDIN_PID")
  for ((i = 0; i < 600; i++)); do
    port=$(awk '/^PORT / {print $2}' "$WORK/standin.out" 2>/dev/null || true)
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "memory.sh: the stand-in did not start" >&2; exit 1; }
  STANDIN_URI="mongodb://127.0.0.1:$port/?directConnection=true&serverSelectionTimeoutMS=500"
}

metric() { # name: the sum of the metric's samples
  curl -s "$BASE/metrics" | awk -v m="$1" '$1 == m || index($1, m "{") == 1 {s += $2} END {print s + 0}'
}

# Waits until the flusher has failed twice more than now (at most 120 s).
wait_two_failures() {
  local before i
  before=$(metric bucketd_store_errors_total)
  for ((i = 0; i < 1200; i++)); do
    (($(metric bucketd_store_errors_total) >= before + 2)) && return 0
    sleep 0.1
  done
  return 1
}

# Waits until nothing is buffered or unsettled (at most $1 s).
wait_settled() {
  local i
  for ((i = 0; i < $1 * 10; i++)); do
    [[ $(metric bucketd_readings_buffered) == 0 && $(metric bucketd_wal_unsettled_readings) == 0 ]] &&
      return 0
    sleep 0.1
  done
  return 1
}

# sample PID FILE: until PID exits, a line a second with its RSS (MiB) and the gauges the
# budget is about.
sample() {
  while kill -0 "$1" 2>/dev/null; do
    echo "$(date +%s) rss_mib=$(($(awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0) / 1024))" \
      "$(curl -s --max-time 2 "$BASE/metrics" | awk '$1 ~ /^bucketd_(readings_buffered|buffered_bytes|wal_bytes|wal_unsettled_readings|store_errors_total)/ {printf "%s=%s ", $1, $2}')"
    sleep 1
  done >"$2"
}

ROWS=()
FAILED=0
run_shape() {
  local shape=$1 store args=() bd_args=() pid accepted refused peak result
  case $shape in
    strings-down) store=down; args=(--string-bytes 4000 --batch 500) ;;
    wide-down) store=down; args=(--extra-fields 254 --batch 500) ;;
    series-down) store=down; args=(--sensors 1000000) ;;
    strings-slow) store=slow; args=(--string-bytes 4000 --batch 500) ;;
    strings) store=embedded; args=(--string-bytes 4000 --batch 500 --count "$COUNT" --verify) ;;&
    wide) store=embedded; args=(--extra-fields 254 --batch 500 --count "$COUNT" --verify) ;;&
    strings | wide) args+=(--drain-timeout 600s) ;;
    series) store=embedded; args=(--sensors 1000000) ;;
    *) echo "memory.sh: unknown shape $shape" >&2; exit 1 ;;
  esac
  echo "== $shape" >&2
  rm -rf "$WORK/data"
  case $store in
    down) start_standin; bd_args=(--mongodb-uri "$STANDIN_URI") ;;
    slow) start_standin --update-delay-ms 200; bd_args=(--mongodb-uri "$STANDIN_URI") ;;
  esac
  taskset -c "$SERVER_CPU" "$BUCKETD" --http-addr 127.0.0.1:18080 --data-dir "$WORK/data" \
    "${bd_args[@]}" >"$WORK/$shape.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  if [ -n "$SAMPLES" ]; then
    mkdir -p "$SAMPLES"
    sample "$pid" "$SAMPLES/$shape.samples" &
    PIDS+=($!)
  fi
  wait_http "$BASE/ready" 60
  if [[ $store == down ]]; then
    kill "$STANDIN_PID"
    wait "$STANDIN_PID" 2>/dev/null || true
  fi
  taskset -c "$LOAD_CPU" "$LOADTEST" --url "$BASE" --duration "$DURATION" \
    --summary-json "$WORK/$shape.json" "${args[@]}" 2>&1 | sed -u "s/^/[$shape] /" >&2 || true
  accepted=$(jq -r '.accepted' "$WORK/$shape.json")
  refused=$(jq -r '[.errors[]] | add // 0' "$WORK/$shape.json")
  case $store in
    down | slow)
      if [[ $store == down ]] && ! wait_two_failures; then
        echo "memory.sh: $shape: the flusher did not retry within 120 s" >&2
      fi
      local unsettled
      unsettled=$(metric bucketd_wal_unsettled_readings)
      if [[ $store == down ]]; then
        [[ $unsettled == "$accepted" ]] && result="the log holds all $unsettled" ||
          { result="**the log holds $unsettled of $accepted**"; FAILED=1; }
      else
        result="$unsettled still in the log, being written"
      fi
      ;;
    embedded)
      if [[ " ${args[*]} " == *" --verify "* ]]; then
        result="verify: $(jq -c '.verify | {lost, duplicated}' "$WORK/$shape.json")"
        [[ $(jq -r '.verify.lost + .verify.duplicated' "$WORK/$shape.json") == 0 ]] || FAILED=1
      elif wait_settled 600; then
        result="all stored"
      else
        result="**not stored within 600 s**"
        FAILED=1
      fi
      ;;
  esac
  peak=$(($(peak_rss_kib "$pid") / 1024))
  ((peak <= LIMIT_MIB)) || FAILED=1
  ROWS+=("| $shape | $accepted | $refused | $result | $peak |")
  echo "${ROWS[-1]}" >&2
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if [[ $store != embedded ]]; then
    kill "$STANDIN_PID" "$FIFO_PID" 2>/dev/null || true
    wait "$STANDIN_PID" "$FIFO_PID" 2>/dev/null || true
  fi
  return 0
}

IFS=, read -ra shapes <<<"$SHAPES"
for shape in "${shapes[@]}"; do run_shape "$shape"; done

echo
echo "| shape | readings acknowledged | requests refused | after | peak RSS (MiB) |"
echo "|---|---:|---:|---|---:|"
printf '%s\n' "${ROWS[@]}"
exit "$FAILED"
