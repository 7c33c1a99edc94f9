#!/usr/bin/env bash
# Acknowledged-write latency of bucketd with the write-ahead log (--ack=wal, the default)
# against --ack=buffered, on the embedded store: the server pinned to SERVER_CPU, the load to
# LOAD_CPU. Two loads per mode: paced (2 readings/s per sensor, 100-line bodies) and flat out
# (5,000-line bodies). Prints one line per run; the JSON summaries go to OUT.
#
#   loadtest/latency.sh                    # from a clone; builds release binaries first
#   DURATION=60s OUT=/tmp/lat loadtest/latency.sh
set -euo pipefail

DURATION=${DURATION:-20s}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
PORT=${PORT:-18090}

cd "$(dirname "$0")/.."
ROOT=$(pwd)
# shellcheck source=loadtest/lib.sh
. loadtest/lib.sh
WORK=$(mktemp -d -t bucketd-latency.XXXXXX)
OUT=${OUT:-$WORK/out}
mkdir -p "$OUT"
PID=

cleanup() {
  if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  case "$OUT" in "$WORK"/*) ;; *) echo "summaries kept in $OUT" >&2 ;; esac
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

require_tools curl jq taskset

echo "building release binaries..." >&2
cargo build --release --quiet -p bucketd -p loadtest
BUCKETD=$ROOT/target/release/bucketd
LOADTEST=$ROOT/target/release/loadtest

for load in paced max; do
  for ack in wal buffered; do
    data=$WORK/data-$ack-$load
    taskset -c "$SERVER_CPU" "$BUCKETD" --http-addr "127.0.0.1:$PORT" --data-dir "$data" \
      --ack "$ack" >"$OUT/server-$ack-$load.log" 2>&1 &
    PID=$!
    wait_http "http://127.0.0.1:$PORT/ready" 10
    case $load in
      paced) args=(--sensors 10000 --rate 2 --batch 100 --connections 4) ;;
      max) args=(--sensors 10000 --batch 5000 --connections 4) ;;
    esac
    taskset -c "$LOAD_CPU" "$LOADTEST" --url "http://127.0.0.1:$PORT" "${args[@]}" \
      --duration "$DURATION" --summary-json "$OUT/$ack-$load.json" >"$OUT/$ack-$load.txt" 2>&1
    kill -TERM "$PID"
    wait "$PID" || true
    PID=
    echo "$load --ack=$ack: $(jq -c '{accepted_per_s, latency_ms, errors}' "$OUT/$ack-$load.json")"
  done
done
