#!/usr/bin/env bash
# A/B of two bucketd binaries under the compare.sh load, alternating A, B, A, B, ... so that
# the machine's drift hits both alike. Each run: a fresh data dir, bucketd pinned to CPU 0 on the
# embedded store, `loadtest` on CPU 1 (10,000 sensors, 5,000-line bodies on /write, 4
# connections), then accepted readings/s, the server's CPU seconds (to see it was saturated)
# and its peak RSS.
#
# Usage: loadtest/ab.sh OLD_BUCKETD NEW_BUCKETD [ROUNDS]   (from the repository root)
#   DURATION=10s  RATE=0  BUCKETD_ARGS="--ack buffered"  LOADTEST=target/release/loadtest
# RATE (readings/s per sensor, 0 = flat out): at a fixed rate both servers get the same
# readings, and their CPU seconds (printed per 100,000 readings) are the comparison; it is far
# less noisy here than the flat-out rate, which fsync stalls move by 10-20% from run to run.
# Build the two binaries with the same profile (e.g. check out each commit and copy
# target/release/bucketd aside). Listens on 127.0.0.1:18080 only; every server it starts is
# stopped and its data dir removed.
set -euo pipefail

[ $# -ge 2 ] || { sed -n '2,12p' "$0" >&2; exit 1; }
A=$1
B=$2
ROUNDS=${3:-2}
DURATION=${DURATION:-10s}
RATE=${RATE:-0}
BUCKETD_ARGS=${BUCKETD_ARGS:-}
cd "$(dirname "$0")/.."
# shellcheck source=loadtest/lib.sh
. loadtest/lib.sh
LOADTEST=${LOADTEST:-target/release/loadtest}
[ -x "$LOADTEST" ] || cargo build --release --quiet -p loadtest
TICKS=$(getconf CLK_TCK)

start_work ab

run() { # label binary
  local label=$1 bin=$2 t0 t1 out pid
  rm -rf "$WORK/data"
  # shellcheck disable=SC2086 # BUCKETD_ARGS is a list of flags
  taskset -c 0 "$bin" --http-addr 127.0.0.1:18080 --data-dir "$WORK/data" ${BUCKETD_ARGS} \
    >"$WORK/log" 2>&1 &
  pid=$!
  PIDS=("$pid")
  wait_http http://127.0.0.1:18080/health 10
  t0=$(cpu_ticks "$pid")
  # The summary's line only, not the heading of its per-slice rates below it.
  out=$(taskset -c 1 "$LOADTEST" --url http://127.0.0.1:18080 --path /write --protocol lp-http \
    --sensors 10000 --rate "$RATE" --batch 5000 --connections 4 --duration "$DURATION" 2>&1 |
    awk '/^accepted readings\/s: / {print $3}')
  t1=$(cpu_ticks "$pid")
  printf '%s\t%s readings/s\tserver CPU %s s (%s ms per 100k)\tpeak RSS %d MiB\n' "$label" \
    "$out" "$(awk -v t="$((t1 - t0))" -v hz="$TICKS" 'BEGIN { printf "%.1f", t / hz }')" \
    "$(ms_per_100k "$((t1 - t0))" "$out" "${DURATION%s}")" "$(peak_rss_mib "$pid")"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  PIDS=()
}

for ((i = 1; i <= ROUNDS; i++)); do
  run A "$A"
  run B "$B"
done
