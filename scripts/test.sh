#!/usr/bin/env bash
# Quick start 2: set up, lint, and run the test suite (GPU tests skip cleanly without CUDA).
# Under CI=true (or with AITUNE_DISPATCH_MATRIX=1) it then runs the CPU version matrix,
# scripts/matrix.sh on the entries of AITUNE_DISPATCH_MATRIX_ENTRIES (default 3.10:2.8.0 3.13:2.15.0; AITUNE_DISPATCH_MATRIX=0
# leaves it out); it fails when the suite or any entry fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}
# the decoder's layout tests build their buffers from cupti-python's record dtypes: with a CPU build of
# torch setup.sh installs nothing CUDA, so the test run adds the CUDA 13 bindings (a test tool here)
if "$PY" -W ignore -c "import sys, torch; sys.exit(torch.version.cuda is not None)" 2>/dev/null \
  && ! "$PY" -c "import cupti.cupti" >/dev/null 2>&1; then
  echo "test: CPU torch: installing cupti-python 13.0.x (the [cu13] extra) for the decoder's layout tests"
  "$PY" -W ignore scripts/torch_choice.py pin >build/keep-torch.txt
  "$PY" -m pip install -q -c build/keep-torch.txt -e ".[test,cu13]"
fi
# CI (root, fresh machine) also installs Debian's chromium for the HTML report's browser tests and
# HolisticTraceAnalysis (HTA, with psutil, which it imports without declaring) for the trace test;
# under CI those tests fail when either is missing, elsewhere they skip.
if [ "${CI:-}" = "true" ] && [ "$(id -u)" = 0 ] && ! [ -x /usr/bin/chromium ] && command -v apt-get >/dev/null; then
  echo "test: installing chromium for the browser tests"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "test: chromium could not be installed; the browser tests will fail"
fi
if [ "${CI:-}" = "true" ] && ! "$PY" -c "import hta.trace_analysis" >/dev/null 2>&1; then
  echo "test: installing HolisticTraceAnalysis for the trace test"
  "$PY" -m pip install -q HolisticTraceAnalysis psutil || echo "test: HTA could not be installed; the trace test will fail"
fi
"$PY" -m ruff check aitune_dispatch tests benchmarks
rc=0
"$PY" -m pytest -q "$@" || rc=$?
if [ "${AITUNE_DISPATCH_MATRIX:-}" = 1 ] || { [ "${CI:-}" = "true" ] && [ "${AITUNE_DISPATCH_MATRIX:-}" != 0 ]; }; then
  # shellcheck disable=SC2086  # the entries are words
  bash scripts/matrix.sh ${AITUNE_DISPATCH_MATRIX_ENTRIES:-3.10:2.8.0 3.13:2.15.0} || rc=1
fi
exit "$rc"
