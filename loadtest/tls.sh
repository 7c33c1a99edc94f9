#!/usr/bin/env bash
# What TLS costs the write path: one bucketd binary under the ab.sh load, plain HTTP and HTTPS
# alternating (plain, TLS, plain, TLS, ...), so that the machine's drift hits both. Each run:
# a fresh data dir, bucketd pinned to CPU 0 on the embedded store, `loadtest` on CPU 1 (10,000
# sensors, 5,000-line bodies on /write, 4 keep-alive connections); then accepted readings/s,
# request latency p50/p99, the server's CPU milliseconds per 100,000 readings and its peak RSS.
# The certificate is a self-signed one for localhost, made with openssl in a temp dir; it says
# CA:FALSE, as rustls clients (loadtest's) refuse a CA certificate as a server's.
#
# Usage: loadtest/tls.sh [BUCKETD] [ROUNDS]   (from the repository root)
#   DURATION=10s  RATE=0  BUCKETD_ARGS=""  LOADTEST=target/release/loadtest
# RATE (readings/s per sensor, 0 = flat out): at a fixed rate both get the same readings, and
# the CPU per 100,000 readings is the comparison. Listens on 127.0.0.1:18080 only; every
# server it starts is stopped and its data dir removed.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=loadtest/lib.sh
. loadtest/lib.sh
require_tools openssl curl taskset
BUCKETD=${1:-target/release/bucketd}
ROUNDS=${2:-3}
DURATION=${DURATION:-10s}
RATE=${RATE:-0}
BUCKETD_ARGS=${BUCKETD_ARGS:-}
LOADTEST=${LOADTEST:-target/release/loadtest}
[ -x "$LOADTEST" ] || cargo build --release --quiet -p loadtest
[ -x "$BUCKETD" ] || cargo build --release --quiet -p bucketd

start_work tls

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
  -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
  -addext basicConstraints=critical,CA:FALSE -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null

run() { # label scheme [bucketd flags...]
  local label=$1 scheme=$2 t0 t1 out rate latency pid
  shift 2
  rm -rf "$WORK/data"
  # shellcheck disable=SC2086 # BUCKETD_ARGS is a list of flags
  taskset -c 0 "$BUCKETD" --http-addr 127.0.0.1:18080 --data-dir "$WORK/data" "$@" \
    ${BUCKETD_ARGS} >"$WORK/log" 2>&1 &
  pid=$!
  PIDS=("$pid")
  for ((i = 0; i < 100; i++)); do
    curl -sf --cacert "$WORK/cert.pem" -o /dev/null "$scheme://localhost:18080/health" && break
    sleep 0.1
  done
  t0=$(cpu_ticks "$pid")
  out=$(taskset -c 1 "$LOADTEST" --url "$scheme://localhost:18080" --ca-cert "$WORK/cert.pem" \
    --path /write --protocol lp-http --sensors 10000 --rate "$RATE" --batch 5000 \
    --connections 4 --duration "$DURATION" 2>&1)
  t1=$(cpu_ticks "$pid")
  rate=$(awk '/^accepted readings\/s: / {print $3}' <<<"$out")
  latency=$(awk '/^request latency ms/ {print $5 " / " $7}' <<<"$out")
  printf '%s\t%s readings/s\tp50/p99 %s ms\t%s ms CPU per 100k\tpeak RSS %d MiB\n' "$label" \
    "$rate" "$latency" "$(ms_per_100k "$((t1 - t0))" "$rate" "${DURATION%s}")" \
    "$(peak_rss_mib "$pid")"
  # Nothing after the load is measured, and the final flush of a flat-out run takes minutes:
  # the log keeps what was acknowledged, and the data dir goes anyway.
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  PIDS=()
}

for ((i = 1; i <= ROUNDS; i++)); do
  run plain http
  run tls https --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem"
done
