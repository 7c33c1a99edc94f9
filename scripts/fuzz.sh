#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets) for a bounded time: FUZZ_SECONDS each, default 30.
# Installs cargo-fuzz if it is missing. cargo-fuzz passes nightly-only compiler flags; with
# RUSTC_BOOTSTRAP=1 the stable toolchain accepts them, so no nightly toolchain is needed.
#
# Builds are debug builds (`--dev`: overflow checks on, so an arithmetic overflow is a crash)
# without a sanitizer: bucketd's only unsafe code is the allocator call in src/alloc.rs, which
# takes no pointers, and the fuzzed parsers and routes have none; panics are what we look for.
# A crash leaves its input in fuzz/artifacts/<target>/ and fails this script; reproduce with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run --dev --sanitizer none <target> fuzz/artifacts/<target>/<file>
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seconds="${FUZZ_SECONDS:-30}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "scripts/fuzz.sh: installing cargo-fuzz"
  cargo install cargo-fuzz --locked --version 0.13.2
fi

targets=(line_protocol json_reading query_params influxql prometheus_remote_write otlp mqtt_payload)
cargo fuzz build --dev --sanitizer none
for target in "${targets[@]}"; do
  echo "scripts/fuzz.sh: fuzzing $target for ${seconds}s"
  mkdir -p "$root/fuzz/corpus/$target"
  # The first directory receives new inputs; the committed seeds are read only.
  cargo fuzz run --dev --sanitizer none "$target" \
    "$root/fuzz/corpus/$target" "$root/fuzz/seeds/$target" \
    -- -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1
done
