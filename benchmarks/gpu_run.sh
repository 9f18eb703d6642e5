#!/usr/bin/env bash
# The whole GPU procedure, in one command, on the lent H200 (or any CUDA 13 machine without a
# package index). From the repo root, after fetching the wheels it lacks on this side:
#     python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#       -d .whl cupti-python==13.0.1 diffusers==0.42.1 importlib_metadata==10.2.0 lazy-importer   # into .whl/
# then on the GPU machine (the device tool carries .whl):
#     OUT=/some/dir bash benchmarks/gpu_run.sh [tests] [compare] [bench] [breakdown] [ratio] [million] [replay] [compiled] [compiled_report] [first_call] [fixed_cost] [step_cost] [train_attribution] [graph_observer] [capture_breakdown] [recorded_pass] [hta] [roofline] [all_tests] [quick]
# Parts default to "tests compare bench" (all_tests is tests and compiled in one pytest run).
# One run longer than a call of the device tool (600 s at most): start it with --detach, which runs
# it from a copy of the tree in a process session of its own (setsid: it outlives the call while the
# machine is held), then call again at once, without a pause, with --follow, as often as needed:
#     OUT=$OUT bash benchmarks/gpu_run.sh --detach all_tests first_call fixed_cost   # returns after FOLLOW_S
#     OUT=$OUT bash benchmarks/gpu_run.sh --follow                                   # exit 3: still running
# Each returns when the run ends or after FOLLOW_S seconds (default 560) and copies the run's summaries
# to $OUT; the run itself lives in $GPU_RUN_DIR (default /tmp/gpu_run): log, tree/, out/, status.
# Everything is written under $OUT/work and packed into $OUT/gpu_run_<parts>.tgz; the short
# summaries (env, test log, compare.md, RESULTS.md) are also copied to $OUT itself.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${OUT:-out}")
DETACHED=$(realpath -m "${GPU_RUN_DIR:-/tmp/gpu_run}")

# --follow: wait for the detached run (at most FOLLOW_S), copy what it has written to $OUT, exit with its
# status, or 3 while it still runs
follow() {
  local deadline=$((SECONDS + ${FOLLOW_S:-560}))
  [ -d "$DETACHED" ] || { echo "gpu_run: no detached run in $DETACHED (start one with --detach)"; exit 2; }
  while [ ! -f "$DETACHED/status" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 5; done
  mkdir -p "$OUT"
  cp "$DETACHED"/out/* "$OUT"/ 2>/dev/null
  cp "$DETACHED/log" "$OUT/gpu_run_detached.log"
  tail -c 6000 "$DETACHED/log"
  if [ -f "$DETACHED/status" ]; then
    echo "gpu_run: the detached run [$(cat "$DETACHED/parts")] ended with status $(cat "$DETACHED/status")"
    exit "$(cat "$DETACHED/status")"
  fi
  echo "gpu_run: the detached run [$(cat "$DETACHED/parts")] is still running: call again with --follow"
  exit 3
}

case "${1:-}" in
  --follow)
    follow
    ;;
  --detach)
    shift
    [ -f "$DETACHED/pid" ] && kill -0 "$(cat "$DETACHED/pid")" 2>/dev/null \
      && { echo "gpu_run: a detached run is still going ($DETACHED); --follow it"; exit 2; }
    rm -rf "$DETACHED" && mkdir -p "$DETACHED/tree" "$DETACHED/out"
    # a copy: the device tool re-sends the working tree at every call, under the running parts' feet
    tar cf - . | tar xf - -C "$DETACHED/tree"
    echo "${*:-tests compare bench}" >"$DETACHED/parts"
    cd "$DETACHED/tree"
    OUT="$DETACHED/out" setsid bash -c 'bash benchmarks/gpu_run.sh "$@"; echo $? >"$0/status.tmp"; mv "$0/status.tmp" "$0/status"' \
      "$DETACHED" "$@" >"$DETACHED/log" 2>&1 </dev/null &
    echo $! >"$DETACHED/pid"
    follow
    ;;
esac
PARTS=${*:-tests compare bench}
TAG=$(echo "$PARTS" | tr ' ' '_')
mkdir -p "$OUT/work"
RUN_OUT=$OUT
OUT=$OUT/work
export PYTHONUNBUFFERED=1

echo "== install cupti-python from .whl (no index there)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "gpu_run: put cupti-python's py3.12 wheel in .whl/ (the pip download at the top of this file)"; exit 2; }
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}

echo "== build the native decoder and tracer in place (no build isolation: headers from nvidia-cuda-cupti and torch)"
if [ -f setup.py ]; then
  python3 setup.py build_ext --inplace >"$OUT/native_build.log" 2>&1 && echo "native build: ok" \
    || { echo "native build: FAILED (tail follows)"; tail -20 "$OUT/native_build.log"; }
fi

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  g++ --version | head -1
  python3 - <<'PY'
import platform, torch
from importlib.metadata import version
print("python", platform.python_version(), "| torch", torch.__version__, "| cupti-python", version("cupti-python"),
      "| nvidia-cuda-cupti", version("nvidia-cuda-cupti"))
try:
    import aitune_dispatch.collection._cupti_native  # noqa: F401
    print("native decoder: importable")
except Exception as error:  # noqa: BLE001
    print("native decoder: unavailable:", error)
try:
    from aitune_dispatch.tracing import native
    native.load()
    print("native tracer: importable")
except Exception as error:  # noqa: BLE001
    print("native tracer: unavailable:", error)
PY
} 2>&1 | tee "$OUT/env.txt"

# the function-object hooks' CPU tests on this machine's CPython and torch (CI's 3.11 takes the mode path)
hooks_tests() {
  echo "== the function-object hooks on this CPython and torch (tests/test_function_hooks.py, CPU)"
  timeout 240 python3 -m pytest -v -rs tests/test_function_hooks.py -p no:cacheprovider 2>&1 | tee "$OUT/hooks_tests.log" | grep -E "FAILED|ERROR|SKIPPED|passed|failed" | tail -20
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}

# the short summaries, copied to $RUN_OUT itself after every part (a call cut short keeps them)
summaries() {
  for f in env.txt gpu_tests.log hooks_tests.log compiled_tests.log compare/compare.md bench/RESULTS.md breakdown/breakdown.md ratio/pass_ratio.md million/pass_ratio.md replay/replay_ratios.md replay_cold/replay_ratios.md compiled/compiled_attribution.md first_call/first_call.md fixed_cost/fixed_cost.md step_cost/step_cost.md train_attribution/train_attribution.md graph_observer/graph_observer.md capture_breakdown/capture_breakdown.md recorded_pass/recorded_pass.md hta/hta_rounding.md roofline/zoo_roofline.md; do
    [ -f "$OUT/$f" ] && cp "$OUT/$f" "$RUN_OUT/$(echo "$f" | tr / _)"
  done
}

status=0
for part in $PARTS; do
  case "$part" in
    all_tests)
      echo "== every GPU test, the compiled ones included, in one pytest run (pytest -m 'gpu or gpu_compile')"
      timeout "${ALL_TESTS_TIMEOUT_S:-540}" python3 -m pytest -m "gpu or gpu_compile" -v -rs tests -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed" | tail -60
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      hooks_tests
      ;;
    tests)
      echo "== GPU tests (pytest -m 'gpu and not gpu_compile'; the compiled ones are the part 'compiled')"
      timeout 420 python3 -m pytest -m "gpu and not gpu_compile" -v -rs tests -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed" | tail -60
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      hooks_tests
      ;;
    compare)
      echo "== agreement with the record_function reference, op links, fidelity"
      if [ -f benchmarks/compare_reference.py ]; then
        timeout 500 python3 -m benchmarks.compare_reference --device cuda --out "$OUT/compare" --strict 2>&1 | tee "$OUT/compare.log" | tail -40
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      fi
      ;;
    bench)
      echo "== benchmark harness"
      if [ -f benchmarks/harness.py ]; then
        timeout 560 python3 -m benchmarks.harness --out "$OUT/bench" --no-compare --budget-s "${BENCH_BUDGET_S:-420}" --warmup "${BENCH_WARMUP:-0}" \
          --cprofile-top 25 2>&1 | tee "$OUT/harness.log" | tail -60
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      fi
      ;;
    breakdown)
      echo "== where the recorded pass's time goes (CUPTI only, tracing only, both)"
      timeout 300 python3 -m benchmarks.pass_breakdown --out "$OUT/breakdown" 2>&1 | tee "$OUT/breakdown.log" | tail -12
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    ratio)
      echo "== recorded pass over bare pass, per mechanism and profiler (issue 10's table)"
      timeout 540 python3 -m benchmarks.pass_ratio --out "$OUT/ratio" --passes "${RATIO_PASSES:-3}" ${RATIO_MODELS:+--models $RATIO_MODELS} 2>&1 | tee "$OUT/ratio.log" | tail -20
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    million)
      echo "== 10^6 kernels: llama_generate, 40 generate() calls in one profile()"
      timeout 400 python3 -m benchmarks.pass_ratio --out "$OUT/million" --models --million 2>&1 | tee "$OUT/million.log" | tail -12
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    replay)
      echo "== replayed vs recorded per-call kernel time of the zoo's samples (aitune_dispatch.benchmark)"
      timeout 300 python3 -m benchmarks.replay_ratios --device cuda --out "$OUT/replay" 2>&1 | tee "$OUT/replay.log" | tail -40
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      echo "== the same with a cold L2 before each timed call (benchmark(cache='cold'))"
      timeout 300 python3 -m benchmarks.replay_ratios --device cuda --cache cold --out "$OUT/replay_cold" 2>&1 | tee "$OUT/replay_cold.log" | tail -40
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    compiled)
      echo "== torch.compile'd models and CUDA graph replays: the GPU tests (pytest -m gpu_compile)"
      timeout 420 python3 -m pytest -m gpu_compile -v -rs tests -p no:cacheprovider 2>&1 | tee "$OUT/compiled_tests.log" | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed" | tail -30
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    compiled_report)
      echo "== torch.compile'd models and CUDA graph replays: what is attributed (benchmarks/compiled_attribution.py)"
      timeout 420 python3 -m benchmarks.compiled_attribution --out "$OUT/compiled" 2>&1 | tee "$OUT/compiled.log" | tail -150
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    first_call)
      echo "== the import and first profile() in a fresh process per zoo model, ours and the baseline's"
      timeout "${FIRST_CALL_TIMEOUT_S:-540}" python3 -m benchmarks.first_call --out "$OUT/first_call" ${FIRST_CALL_MODELS:+--models $FIRST_CALL_MODELS} 2>&1 | tee "$OUT/first_call.log" | tail -40
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    fixed_cost)
      echo "== the fixed cost per recorded pass: pass - bare = a + b*R over R = 1, 2, 8"
      timeout "${FIXED_COST_TIMEOUT_S:-540}" python3 -m benchmarks.fixed_cost --out "$OUT/fixed_cost" ${FIXED_COST_MODELS:+--models $FIXED_COST_MODELS} ${FIXED_COST_CONFIGS:+--configs $FIXED_COST_CONFIGS} 2>&1 | tee "$OUT/fixed_cost.log" | tail -30
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    step_cost)
      echo "== what a recorded step costs beyond its work: recording() with rec.step() per iteration against one step"
      timeout "${STEP_COST_TIMEOUT_S:-300}" python3 -m benchmarks.step_cost --out "$OUT/step_cost" ${STEP_COST_MODELS:+--models $STEP_COST_MODELS} 2>&1 | tee "$OUT/step_cost.log" | tail -12
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    train_attribution)
      echo "== the share of a recorded training step's kernel time with a module, a functional call or the optimizer"
      timeout "${TRAIN_ATTRIBUTION_TIMEOUT_S:-240}" python3 -m benchmarks.train_attribution --out "$OUT/train_attribution" 2>&1 | tee "$OUT/train_attribution.log" | tail -10
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    graph_observer)
      echo "== CUDA graphs captured before profile(): a capture under observe_graph_captures against a bare one, and a recorded replay pass against a bare one"
      timeout "${GRAPH_OBSERVER_TIMEOUT_S:-300}" python3 -m benchmarks.graph_observer --out "$OUT/graph_observer" ${GRAPH_OBSERVER_MODELS:+--models $GRAPH_OBSERVER_MODELS} 2>&1 | tee "$OUT/graph_observer.log" | tail -30
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    capture_breakdown)
      echo "== where a capture under observe_graph_captures goes: bare, observed, CUPTI subscription only, tracing only"
      timeout "${CAPTURE_BREAKDOWN_TIMEOUT_S:-200}" python3 -m benchmarks.capture_breakdown --out "$OUT/capture_breakdown" ${GRAPH_OBSERVER_MODELS:+--models $GRAPH_OBSERVER_MODELS} 2>&1 | tee "$OUT/capture_breakdown.log" | tail -16
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    recorded_pass)
      echo "== the recorded pass over the bare pass at R = 1 and 8: ours (function-object hooks and the mode; launch callback and pushed ids) against torch.profiler"
      timeout "${RECORDED_PASS_TIMEOUT_S:-540}" python3 -m benchmarks.recorded_pass --out "$OUT/recorded_pass" --passes "${RECORDED_PASS_PASSES:-5}" ${RECORDED_PASS_MODELS:+--models $RECORDED_PASS_MODELS} 2>&1 | tee "$OUT/recorded_pass.log" | tail -30
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    roofline)
      echo "== the zoo's roofline: each model's report and its calls ranked by what the GPU's limits say could be saved"
      timeout 400 python3 -m benchmarks.zoo_roofline --device cuda --out "$OUT/roofline" ${ROOFLINE_MODELS:+--models $ROOFLINE_MODELS} 2>&1 | tee "$OUT/roofline.log" | tail -60
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    hta)
      echo "== what HTA's default ns rounding takes from our trace and from Kineto's, one run of the demo"
      timeout 300 python3 -m benchmarks.hta_rounding --device cuda --out "$OUT/hta" 2>&1 | tee "$OUT/hta.log" | tail -16
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
      ;;
    quick)
      echo "== demo (its saved result is loaded and rendered on a machine without a GPU by tests)"
      python3 -m aitune_dispatch demo --out "$OUT/demo" 2>&1 | tee "$OUT/demo.log"
      ;;
  esac
  summaries
done
tar czf "$RUN_OUT/gpu_run_$TAG.tgz" -C "$OUT" . && rm -rf "$OUT"
echo "gpu_run: parts [$PARTS] finished with status $status"
exit $status
