#!/usr/bin/env bash
# Quick start 2: set up, lint, and run the test suite (GPU tests skip cleanly without CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}
# CI (root, fresh machine) also installs Debian's chromium for the HTML report's browser tests;
# elsewhere those tests skip when /usr/bin/chromium is missing.
if [ "${CI:-}" = "true" ] && [ "$(id -u)" = 0 ] && ! [ -x /usr/bin/chromium ] && command -v apt-get >/dev/null; then
  echo "test: installing chromium for the browser tests"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "test: chromium could not be installed; browser tests will skip"
fi
"$PY" -m ruff check aitune_dispatch tests benchmarks
exec "$PY" -m pytest -q "$@"
