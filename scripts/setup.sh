#!/usr/bin/env bash
# Install aitune_dispatch and its test tools into the current Python (set PYTHON to choose one).
#
# torch: one that is already there is kept as it is (never replaced, never downgraded: the package
# install below is constrained to it). Where none is present, torch==$AITUNE_DISPATCH_TORCH_VERSION
# (2.13.0 unless set) is installed from the index scripts/torch_choice.py picks: without a GPU the
# PyTorch CPU wheel index where it answers within a few seconds, else pip's default index, whose Linux
# torch is a CUDA build; AITUNE_DISPATCH_TORCH_INDEX names another index, or "default". Before
# installing, it says which wheel that is, CPU or CUDA build, and how large (pip's dry-run report).
#
# The package: ".[test]", plus the extra of the CUDA major of a CUDA build of torch (".[test,cu13]");
# nothing CUDA for a CPU build. Then the native tracer is built in place against this torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_VERSION=${AITUNE_DISPATCH_TORCH_VERSION:-2.13.0}
BUILD_LOG=${AITUNE_DISPATCH_BUILD_LOG:-/tmp/aitune_dispatch_tracer.log}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "setup: keeping the torch already installed ($("$PY" -W ignore -c \
    "import torch; c = torch.version.cuda; print(torch.__version__, f'CUDA {c} build' if c else 'CPU build', sep=', ')"))"
else
  index=$("$PY" scripts/torch_choice.py index)  # says why on stderr
  from=()
  if [ -n "$index" ]; then from=(--index-url "$index"); fi
  echo "setup: no torch found; resolving torch==$TORCH_VERSION${index:+ from $index}"
  if "$PY" -m pip install --dry-run --quiet --report "$work/torch.json" ${from[@]+"${from[@]}"} "torch==$TORCH_VERSION" \
    && [ -s "$work/torch.json" ]; then
    "$PY" scripts/torch_choice.py describe "$work/torch.json"
  else
    echo "setup: pip could not say in advance what torch==$TORCH_VERSION is here (its --report needs pip >= 22.2)"
  fi
  echo "setup: installing torch==$TORCH_VERSION"
  "$PY" -m pip install -q ${from[@]+"${from[@]}"} "torch==$TORCH_VERSION"
fi

# the torch present now stays: pip may not replace it while installing the package (the public
# version: a constraint with a local label such as +cu132, which no index serves, makes pip give up)
"$PY" -W ignore scripts/torch_choice.py pin >"$work/keep-torch.txt"
extras=$("$PY" scripts/torch_choice.py extras)
echo "setup: installing aitune_dispatch with the extras [$extras]"
# (where pyproject.toml has no such extra yet, pip warns "does not provide the extra" and goes on)
# editable installs of several Pythons share the source tree (scripts/matrix.sh runs them side by side)
mkdir -p build
exec 9>build/.setup.lock
if command -v flock >/dev/null; then flock 9; fi
"$PY" -m pip install -q -c "$work/keep-torch.txt" -e ".[$extras]"
# the native tracer compiles against this environment's torch headers, which an isolated
# build cannot see: build it in place (optional, like the decoder: the pure-Python backend stays)
"$PY" -m pip install -q -c "$work/keep-torch.txt" "setuptools>=68"  # setup.py runs outside pip here (Python 3.12 venvs lack it)
AITUNE_DISPATCH_NATIVE=off "$PY" setup.py -q build_ext --inplace >"$BUILD_LOG" 2>&1 \
  || echo "setup: native tracer not built (see $BUILD_LOG); using the pure-Python backend"
exec 9>&-
"$PY" -c "import torch, aitune_dispatch; from aitune_dispatch.tracing import native; print(f'setup: aitune_dispatch {aitune_dispatch.__version__}, torch {torch.__version__}, tracer {\"native\" if native.available() else \"python\"}')"
