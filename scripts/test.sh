#!/usr/bin/env bash
# Runs every test bucketd has. Installs what the tests need and cannot install themselves:
#   - promtool and prometheus (Debian package `prometheus`): promtool checks the /metrics
#     output, and a real Prometheus remote-writes to bucketd (tests/it/ingest/prometheus.rs);
#   - influxd (Debian package `influxdb`, InfluxDB 1.6), the reference the InfluxQL oracle
#     test (tests/it/query/influxql_oracle.rs) compares bucketd's /query answers with;
#   - python3 with venv, for the MongoDB stand-in (the tests build the venv themselves under
#     target/mongo-standin-venv from tests/mongo_standin/requirements.txt);
#   - headless Chromium (Debian package `chromium`), which the web console's browser tests
#     (tests/it/edge/console_browser.rs) drive, and a font for its screenshots.
#   - mosquitto (Debian package `mosquitto`), the broker of the MQTT tests
#     (tests/it/ingest/mqtt.rs);
#   - curl and openssl, the real clients of the TLS tests (tests/it/edge/tls.rs), which also
#     build a venv with InfluxDB's Python client; the OTLP test (tests/it/ingest/otlp.rs)
#     builds one with the OpenTelemetry SDK.
# Set BUCKETD_TEST_MONGODB_URI=mongodb://... to run the MongoDB tests against a real server
# instead of the stand-in (e.g. after `docker compose up mongo`).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "scripts/test.sh: need root (or sudo) to run: $*" >&2; return 1; fi
}

apt_updated=
apt_install() {
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  echo "scripts/test.sh: installing promtool and prometheus (Debian package prometheus)"
  apt_install prometheus
fi
if ! command -v influxd >/dev/null; then
  echo "scripts/test.sh: installing influxd (Debian package influxdb) for the InfluxQL oracle test"
  apt_install influxdb
fi
if ! command -v python3 >/dev/null; then
  echo "scripts/test.sh: installing python3 for the MongoDB stand-in"
  apt_install python3 python3-venv
fi
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  echo "scripts/test.sh: installing python3-venv for the MongoDB stand-in"
  apt_install python3-venv
fi
if ! [ -x /usr/sbin/mosquitto ] && ! command -v mosquitto >/dev/null; then
  echo "scripts/test.sh: installing mosquitto for the MQTT tests"
  apt_install mosquitto
fi
for tool in curl openssl; do
  if ! command -v "$tool" >/dev/null; then
    echo "scripts/test.sh: installing $tool for the TLS tests"
    apt_install "$tool"
  fi
done
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  echo "scripts/test.sh: installing chromium for the web console's browser tests"
  apt_install chromium
fi
if ! { command -v fc-list >/dev/null && [ -n "$(fc-list 2>/dev/null)" ]; }; then
  echo "scripts/test.sh: installing a font (fonts-dejavu-core) for the browser tests' screenshots"
  apt_install fontconfig fonts-dejavu-core
fi

cargo test --workspace --all-targets "$@"
# Doc tests are not covered by --all-targets.
cargo test --workspace --doc "$@"
# The deployment files: docker-compose.yml (bucketd, MongoDB, Grafana) must stay valid.
bash scripts/check-compose.sh
