#!/usr/bin/env bash
# Install aitune_dispatch and its test tools into the current Python (set PYTHON to choose one).
# Where no torch is present, the CPU build is installed explicitly first (a bare "torch"
# requirement would pull a multi-GB CUDA build); a torch that is already there is kept as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "setup: no torch found; installing the CPU build torch==2.13.0"
  "$PY" -m pip install -q torch==2.13.0
fi
"$PY" -m pip install -q -e ".[test]"
# the native tracer compiles against this environment's torch headers, which an isolated
# build cannot see: build it in place (optional, like the decoder: the pure-Python backend stays)
"$PY" -m pip install -q "setuptools>=68"  # setup.py runs outside pip here (Python 3.12 venvs lack it)
AITUNE_DISPATCH_NATIVE=off "$PY" setup.py -q build_ext --inplace >/tmp/aitune_dispatch_tracer.log 2>&1 \
  || echo "setup: native tracer not built (see /tmp/aitune_dispatch_tracer.log); using the pure-Python backend"
"$PY" -c "import torch, aitune_dispatch; from aitune_dispatch.tracing import native; print(f'setup: aitune_dispatch {aitune_dispatch.__version__}, torch {torch.__version__}, tracer {\"native\" if native.available() else \"python\"}')"
