#!/usr/bin/env bash
# Fuzzes the HTTP API from its own OpenAPI document (`/api/v1/openapi.json`) with schemathesis,
# against a debug build of bucketd on 127.0.0.1 with the embedded store in a temporary directory.
# Fails on any 5xx, on a response whose status, content type or body the document does not
# describe, and on a panic in the server's log.
#
# Bounded: API_FUZZ_EXAMPLES generated cases per operation when fuzzing (default 1000) with a
# fixed API_FUZZ_SEED (default 13), so a run is reproducible; the whole schemathesis run is
# killed after API_FUZZ_MAX_SECONDS (default 900): a guard against a run that hangs, not a
# bound on its speed, so it stays far above what the run takes on a busy machine (it is
# CPU-bound in schemathesis' one worker). API_FUZZ_CHECKS replaces the list of checks.
# `all` is worth a look by hand but not a gate: its positive_data_acceptance, for one, expects
# any string the document allows as `from` or `sensor` to be accepted, where the server rightly
# refuses what is not a time, or not a sensor. Installs schemathesis (pinned in
# scripts/api-fuzz-requirements.txt) into target/api-fuzz-venv, and python3-venv if missing.
# A failure is printed with a curl command that reproduces it; the server's log, schemathesis'
# output and its replay cache are kept in target/api-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
examples="${API_FUZZ_EXAMPLES:-1000}"
seed="${API_FUZZ_SEED:-13}"
default_checks=not_a_server_error,response_schema_conformance
default_checks+=,status_code_conformance,content_type_conformance
checks="${API_FUZZ_CHECKS:-$default_checks}"
max_seconds="${API_FUZZ_MAX_SECONDS:-900}"
venv="$root/target/api-fuzz-venv"
out="$root/target/api-fuzz"

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "scripts/api-fuzz.sh: need root (or sudo) to run: $*" >&2; return 1; fi
}

if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  echo "scripts/api-fuzz.sh: installing python3-venv for schemathesis"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
fi

# The venv is rebuilt when the pinned requirements change, not on every run.
requirements="$root/scripts/api-fuzz-requirements.txt"
stamp="$venv/.requirements"
if ! cmp -s "$requirements" "$stamp" 2>/dev/null; then
  echo "scripts/api-fuzz.sh: installing schemathesis into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$stamp"
fi

cargo build --bin bucketd
bin="$root/target/debug/bucketd"

mkdir -p "$out"
log="$out/bucketd.log"
data=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    wait "$pid" || true
  fi
  rm -rf "$data"
}
trap cleanup EXIT

# Port 0: the kernel picks a free port, and bucketd logs the one it bound, so no other process
# can take it between choosing and binding.
"$bin" --http-addr 127.0.0.1:0 --data-dir "$data" --log-format json >"$log" 2>&1 &
pid=$!

# Waits for the "bucketd listening" line, then for /ready; both are states, polled briefly, with
# an overall bound so a server that never comes up fails the script instead of hanging it.
addr=
for _ in $(seq 1 600); do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "scripts/api-fuzz.sh: bucketd exited during start-up:" >&2
    cat "$log" >&2
    exit 1
  fi
  addr=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try:
        event = json.loads(line)
    except ValueError:
        continue
    if event.get("fields", {}).get("message") == "bucketd listening":
        print(event["fields"]["http"])
        break
' "$log")
  if [ -n "$addr" ] && curl -fsS -o /dev/null "http://$addr/ready" 2>/dev/null; then break; fi
  addr=
  sleep 0.1
done
if [ -z "$addr" ]; then
  echo "scripts/api-fuzz.sh: bucketd not ready within 60 s:" >&2
  cat "$log" >&2
  exit 1
fi
base="http://$addr"
echo "scripts/api-fuzz.sh: bucketd ready at $base"

# A little data within the default range (the last hour), so that the query operations have
# sensors and readings to return, not only 404. `temp,site=a` is the sensor the document's
# examples name: it also gets the extremes of every field type, and two values whose sum
# overflows f64 one millisecond apart (in one rollup step for any step of whole seconds).
now=$(date +%s)
lines=""
for i in 0 1 2 3 4 5; do
  t=$(((now - 600 + i * 60) * 1000))
  lines+="temp,site=a value=2$i.5 $t"$'\n'
  lines+="env,sensor=s1,site=w3 temp=2$i.5,hum=4${i}i,ok=true,note=\"n$i\" $t"$'\n'
  lines+="power,sensor=p1 watts=1${i}0u $t"$'\n'
done
t=$(((now - 300) * 1000))
lines+="temp,site=a value=1.7e308,i=-9223372036854775808i,u=18446744073709551615u,b=false,s=\"\" $t"$'\n'
lines+="temp,site=a value=1.7e308,i=9223372036854775807i,u=0u,b=true,s=\"\\\"\" $((t + 1))"$'\n'
curl -fsS -X POST --data-binary "$lines" "$base/api/v2/write?precision=ms"
curl -fsS -X POST -H 'Content-Type: application/json' \
  --data "[{\"sensor\":\"room1\",\"ts\":$((now * 1000 - 1000)),\"value\":21.5}]" \
  "$base/api/v1/readings" >/dev/null

# Phases: the document's examples, the coverage phase (boundary and invalid values of every
# parameter) and fuzzing. No stateful phase: the document declares no links between operations.
# One worker: with two, schemathesis' threads parse Python source concurrently and CPython 3.11
# fails with "AST constructor recursion depth mismatch"; one is fast enough for the bounded
# run and keeps the order of requests, so a seed reproduces a run.
# Run from $out: schemathesis keeps what `st replay` needs in .schemathesis/ under the current
# directory, and the source tree is no place for it.
set +e
cd "$out"
# Random bytes for the protobuf bodies (scripts/api_fuzz_hooks.py).
export PYTHONPATH="$root/scripts${PYTHONPATH:+:$PYTHONPATH}" SCHEMATHESIS_HOOKS=api_fuzz_hooks
timeout --signal=INT --kill-after=30 "$max_seconds" \
  "$venv/bin/schemathesis" run "$base/api/v1/openapi.json" \
  --checks "$checks" \
  --phases examples,coverage,fuzzing \
  --max-examples "$examples" \
  --seed "$seed" \
  --workers 1 \
  --request-timeout 20 \
  --generation-database none \
  --continue-on-failure \
  --no-color 2>&1 | tee "$out/schemathesis.txt"
status=${PIPESTATUS[0]}
set -e
cd "$root"
# The totals from schemathesis' summary ("Tested: 12", "8376 generated, ...").
operations=$(sed -n 's/^ *Tested: *\([0-9]*\).*/\1/p' "$out/schemathesis.txt" | tail -1)
cases=$(sed -n 's/^ *\([0-9]*\) generated.*/\1/p' "$out/schemathesis.txt" | tail -1)
summary="${operations:-?} operations, ${cases:-?} test cases, seed $seed, $examples examples"

if ! kill -0 "$pid" 2>/dev/null; then
  echo "scripts/api-fuzz.sh: FAIL: bucketd exited during the run; its log is in $log" >&2
  exit 1
fi
if grep -q 'panicked' "$log"; then
  echo "scripts/api-fuzz.sh: FAIL: bucketd panicked; its log is in $log:" >&2
  grep 'panicked' "$log" | head -5 >&2
  exit 1
fi
if [ "$status" -eq 124 ]; then
  echo "scripts/api-fuzz.sh: FAIL: schemathesis did not finish within ${max_seconds}s" >&2
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "scripts/api-fuzz.sh: FAIL: schemathesis found failures (exit $status; $summary); see above" >&2
  exit 1
fi
echo "scripts/api-fuzz.sh: PASS: $summary"
