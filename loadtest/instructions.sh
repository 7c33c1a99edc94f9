#!/usr/bin/env bash
# Instructions executed by bucketd binaries for the same fixed work, counted by callgrind: the
# comparison to use for changes of a few percent, which this machine's timing noise hides.
#
# Each binary runs under `valgrind --tool=callgrind` on a fresh embedded store, CPU 0, with
# `--flush-interval 10s` (under callgrind bucketd is far slower, so each sensor still gets
# several readings per flush, as at full speed); `loadtest` on
# CPU 1 sends COUNT readings (10,000 sensors, 5,000-line bodies on /write, CONNECTIONS of them);
# then bucketd is stopped (SIGINT: it flushes everything) and the program's total instruction
# count is printed with the instructions per reading, and the hottest functions (self cost).
#
# Usage: loadtest/instructions.sh BUCKETD...   (from the repository root)
#   COUNT=600000  CONNECTIONS=2  TOP=25  OUT=<temp dir, removed unless given>
# One connection sends each sensor's readings in order; more let a sensor's readings reach the
# store out of order, as concurrent clients do.
# Needs valgrind (Debian: apt-get install valgrind). About a minute per binary per 600,000
# readings. Listens on 127.0.0.1:18181 only.
set -euo pipefail

[ $# -ge 1 ] || { sed -n '2,18p' "$0" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
COUNT=${COUNT:-600000}
CONNECTIONS=${CONNECTIONS:-2}
TOP=${TOP:-25}
cd "$(dirname "$0")/.."
# shellcheck source=loadtest/lib.sh
. loadtest/lib.sh
LOADTEST=${LOADTEST:-target/release/loadtest}
[ -x "$LOADTEST" ] || cargo build --release --quiet -p loadtest
KEEP=${OUT:+1}
OUT=${OUT:-$(mktemp -d -t bucketd-instr.XXXXXX)}
mkdir -p "$OUT"
PID=
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$OUT/data"
  [ -n "$KEEP" ] || rm -rf "$OUT"
}
trap cleanup EXIT INT TERM

n=0
for bin in "$@"; do
  n=$((n + 1))
  rm -rf "$OUT/data"
  taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$OUT/$n.callgrind" "$bin" \
    --http-addr 127.0.0.1:18181 --data-dir "$OUT/data" --flush-interval 10s \
    >"$OUT/$n.log" 2>&1 &
  PID=$!
  wait_http http://127.0.0.1:18181/health 120
  taskset -c 1 "$LOADTEST" --url http://127.0.0.1:18181 --path /write --protocol lp-http \
    --sensors 10000 --batch 5000 --connections "$CONNECTIONS" --count "$COUNT" --duration 600s \
    >"$OUT/$n.load" 2>&1
  accepted=$(awk '/^elapsed/ {print $(NF-1)}' "$OUT/$n.load")
  kill -INT "$PID"
  wait "$PID" || true
  PID=
  total=$(callgrind_annotate "$OUT/$n.callgrind" 2>/dev/null |
    awk '/PROGRAM TOTALS/ && !done {gsub(",", "", $1); print $1; done = 1}')
  printf '%s\t%s instructions\t%s readings accepted\t%s per reading\n' "$bin" "$total" \
    "$accepted" "$(awk -v t="$total" -v r="$accepted" 'BEGIN { printf "%.0f", (r > 0 ? t / r : 0) }')"
  callgrind_annotate "$OUT/$n.callgrind" 2>/dev/null |
    awk -v top="$TOP" '/file:function/ {on = 1; getline; next} on && NF && shown < top {print "    " $0; shown++}' |
    cut -c1-150
done
[ -z "$KEEP" ] || echo "callgrind files in $OUT"
