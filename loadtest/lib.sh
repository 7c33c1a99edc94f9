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
