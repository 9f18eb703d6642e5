#!/usr/bin/env bash
# Quick start 2: set up, lint, and run the test suite (GPU tests skip cleanly without CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}
"$PY" -m ruff check aitune_dispatch tests benchmarks
exec "$PY" -m pytest -q "$@"
