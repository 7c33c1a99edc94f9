#!/usr/bin/env bash
# Validates docker-compose.yml (bucketd, MongoDB, Grafana) with `docker-compose config`, which
# needs no Docker daemon. docker-compose 1.x is a Python package; it is installed into a venv
# under target/ with its dependencies pinned (its own metadata pins an old PyYAML that no longer
# builds, hence --no-deps and the explicit list).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/compose-venv
if [ ! -x "$venv/bin/docker-compose" ]; then
  echo "scripts/check-compose.sh: installing docker-compose 1.29.2 into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --no-deps docker-compose==1.29.2 PyYAML==6.0.4 docker==7.2.0 \
    dockerpty==0.4.1 docopt==0.6.2 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
    referencing==0.37.0 rpds-py==2026.9.1 typing_extensions==4.16.0 attrs==26.1.0 python-dotenv==1.2.4 texttable==1.7.2 \
    websocket-client==1.9.2 requests==2.34.2 urllib3==2.8.0 idna==3.20 certifi==2026.10.19.post1 \
    charset-normalizer==3.5.2 distro==1.9.0 six==1.17.0
fi
"$venv/bin/docker-compose" -f docker-compose.yml config -q
echo "scripts/check-compose.sh: docker-compose.yml is valid"
