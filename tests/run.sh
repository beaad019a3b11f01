#!/usr/bin/env bash
# The README's test command. On a fresh Debian machine (Python 3.11+, root or sudo) it
# installs what the tests need when it is missing, then runs pytest with any arguments
# given (e.g. `bash tests/run.sh -m quick`); `--list-missing` only prints the Debian
# packages it would install:
#   - Debian packages: prometheus (promtool too), chromium, postgresql;
#   - a PostgreSQL that lets user postgres in without a password: 127.0.0.1:5432 when one
#     does, else a private trust-auth cluster (tests/pg_cluster.py), or the server named
#     by $CORTEX_TEST_DATABASE_URL;
#   - the OpenStack Placement and Nova (differential suite) virtualenvs, cached under
#     ~/.cache/cortex-test;
#   - .venv with Cortex and its test and docs extras.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

have_postgres() {
  [ -n "${CORTEX_TEST_DATABASE_URL:-}" ] || (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null \
    || command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

packages=()
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  packages+=(prometheus)
fi
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
have_postgres || packages+=(postgresql)
if [ "${1:-}" = "--list-missing" ]; then  # what a run would install, and nothing else
  echo "${packages[*]}"
  exit 0
fi
if [ ${#packages[@]} -gt 0 ]; then
  echo "tests/run.sh: installing Debian packages: ${packages[*]}" >&2
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${packages[@]}"
fi

# Placement's virtualenv, Prometheus' binaries, a PostgreSQL; exports its URL when needed.
exports="$(python3 tests/real_servers.py prepare)"
eval "$exports"

python3 -m venv .venv
.venv/bin/pip install -q -e '.[test,docs]'
exec .venv/bin/pytest "$@"
