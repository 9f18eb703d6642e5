#!/usr/bin/env bash
# Quick start 1: set up, then profile the built-in demo model (GPU when present, else the CPU source).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${PYTHON:-python3}" -m aitune_dispatch demo --out out/demo "$@"
