#!/usr/bin/env bash
# The CPU version matrix: the test suite on the oldest and the newest supported torch, each in a fresh
# venv of its own Python. scripts/test.sh runs it under CI=true (or AITUNE_DISPATCH_MATRIX=1).
#
#   bash scripts/matrix.sh [PYTHON:TORCH[:smoke] ...]    default: 3.10:2.8.0 3.13:2.15.0
#
# Each entry: a venv under a temp dir, scripts/setup.sh into it with torch pinned to TORCH (the CPU
# index where it answers, else pip's default index: setup.sh says which wheel and how large), the
# compiled parts built in place (their .so names carry the Python version, so they do not clash with
# other venvs'), then pytest: the whole suite, or with ":smoke" the files of scripts/matrix_smoke.txt.
# Entries run side by side where there are two or more CPUs (AITUNE_DISPATCH_MATRIX_JOBS sets how
# many at once); on one CPU they run one after the other and every entry after the first runs the
# smoke set, to stay within CI's time. The interpreters are found by `uv python find`, `pyenv prefix`,
# ~/.pyenv/versions/X.Y*/bin and PATH, each tried by running it; a missing one is skipped, and is a
# failure under CI=true. Exit status: non-zero when any entry failed or was missing under CI.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -gt 0 ]; then entries=("$@"); else entries=(3.10:2.8.0 3.13:2.15.0); fi
cpus=$(nproc 2>/dev/null || echo 1)
jobs=${AITUNE_DISPATCH_MATRIX_JOBS:-$((cpus < ${#entries[@]} ? cpus : ${#entries[@]}))}
[ "$jobs" -ge 1 ] || jobs=1
work=$(mktemp -d "${TMPDIR:-/tmp}/aitune_matrix.XXXXXX")
keep=${AITUNE_DISPATCH_MATRIX_KEEP:-}  # set: keep the venvs too
failed=0
# shellcheck disable=SC2329  # run by the trap
cleanup() {
  if [ -n "$keep" ]; then echo "matrix: venvs and logs kept in $work"
  elif [ "$failed" != 0 ]; then rm -rf "$work"/venv-*; echo "matrix: the logs stay in $work"
  else rm -rf "$work"; fi
}
trap cleanup EXIT

# the interpreter of Python X.Y, or nothing: every candidate is run, since pyenv's shims fail unless selected
find_python() {
  local want=$1 cand prefix
  local -a cands=()
  if command -v uv >/dev/null; then cands+=("$(uv python find "$want" 2>/dev/null || true)"); fi
  if command -v pyenv >/dev/null; then
    for prefix in $(pyenv prefix "$want" 2>/dev/null | tr ':' ' '); do cands+=("$prefix/bin/python$want"); done
  fi
  for cand in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want"*/bin/python"$want" /usr/local/bin/python"$want" \
    /usr/bin/python"$want"; do
    cands+=("$cand")
  done
  cands+=("$(command -v "python$want" 2>/dev/null || true)")
  for cand in "${cands[@]}"; do
    [ -n "$cand" ] && [ -x "$cand" ] || continue
    if "$cand" -c "import sys, venv; sys.exit(sys.version_info[:2] != tuple(map(int, '$want'.split('.'))))" \
      >/dev/null 2>&1; then
      echo "$cand"
      return 0
    fi
  done
  return 1
}

# one entry, its output in $work/NAME.log, its outcome in $work/NAME.result
run_entry() {
  local entry=$1 name=$2 smoke=$3 pyver torch py venv start setup_s test_s rc=0 summary
  pyver=${entry%%:*}
  torch=${entry#*:}
  torch=${torch%%:*}
  local log="$work/$name.log" result="$work/$name.result"
  start=$(date +%s)
  if ! py=$(find_python "$pyver"); then
    echo "missing Python $pyver" >"$result"
    return 0
  fi
  venv="$work/venv-$name"
  echo "matrix $name: Python $pyver ($py), torch==$torch, $([ "$smoke" = 1 ] && echo "smoke set" || echo "whole suite")" \
    >"$log"
  # an exact pin asks for this torch: a constraint of pip's configuration (a cap on torch) must not veto
  # it. PIP_CONSTRAINT=/dev/null replaces one (an empty PIP_CONSTRAINT is ignored, -c only adds one).
  "$py" -m venv "$venv" >>"$log" 2>&1 \
    && PIP_CONSTRAINT=/dev/null PYTHON="$venv/bin/python" AITUNE_DISPATCH_TORCH_VERSION="$torch" \
      AITUNE_DISPATCH_BUILD_LOG="$work/$name.build.log" bash scripts/setup.sh >>"$log" 2>&1 || rc=$?
  if [ "$rc" = 0 ] && [ "${CI:-}" = "true" ]; then  # as scripts/test.sh does: the trace test needs HTA under CI
    "$venv/bin/python" -m pip install -q HolisticTraceAnalysis psutil >>"$log" 2>&1 || echo "matrix $name: HTA not installed" >>"$log"
  fi
  setup_s=$(($(date +%s) - start))
  if [ "$rc" != 0 ]; then
    echo "setup failed (exit $rc) after ${setup_s}s" >"$result"
    return 0
  fi
  local -a selection=(tests)
  if [ "$smoke" = 1 ]; then mapfile -t selection < <(grep -v '^\s*\(#\|$\)' scripts/matrix_smoke.txt); fi
  start=$(date +%s)
  # --continue-on-collection-errors: a module that cannot import on this torch fails alone, the rest still runs
  "$venv/bin/python" -m pytest -q -p no:cacheprovider --continue-on-collection-errors "${selection[@]}" \
    >>"$log" 2>&1 || rc=$?
  test_s=$(($(date +%s) - start))
  summary=$(grep -E '^=* ?[0-9]+ (passed|failed|error|errors|skipped)|^=* ?no tests ran' "$log" | tail -n 1 | tr -d '=' \
    | sed 's/^ *//; s/ *$//' || true)
  if [ "$rc" -gt 128 ]; then  # a crash ends pytest before its summary: the progress so far, and faulthandler's test
    summary="crashed (signal $((rc - 128))) in $(grep -A80 'Fatal Python error' "$log" \
      | grep -m1 -oE 'tests/[^"]+", line [0-9]+ in [A-Za-z0-9_]+' | tr -d '"' || echo '(test not named)'); before it: $(
      awk '/Fatal Python error/ { sub(/Fatal Python error.*/, ""); print; exit } { print }' "$log" \
      | grep -E '^[.sFExX]+( +\[ *[0-9]+%\])?$' | sed 's/ *\[.*//' | tr -d '\n' \
      | awk '{ n = split($0, c, ""); for (i = 1; i <= n; i++) k[c[i]]++ }
             END { printf "%d passed, %d failed, %d errors, %d skipped", k["."], k["F"], k["E"], k["s"] }')"
  fi
  echo "exit $rc: ${summary:-no summary}; setup ${setup_s}s, tests ${test_s}s ($(
    [ "$smoke" = 1 ] && echo smoke set || echo whole suite))" >"$result"
}

echo "matrix: ${entries[*]} ($jobs at a time; logs under $work)"
names=()
running=0
for i in "${!entries[@]}"; do
  entry=${entries[$i]}
  name="py${entry%%:*}-torch$(echo "${entry#*:}" | cut -d: -f1)"
  smoke=0
  case "$entry" in *:smoke) smoke=1 ;; esac
  if [ "$jobs" = 1 ] && [ "$i" -gt 0 ]; then smoke=1; fi  # one CPU: only the first entry runs the whole suite
  names+=("$name")
  run_entry "$entry" "$name" "$smoke" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
done
wait || true

for name in "${names[@]}"; do
  echo "---------------------------------------------------------------- matrix $name"
  if [ -f "$work/$name.log" ]; then
    grep -E '^setup: |^(FAILED|ERROR) |^matrix |Fatal Python error|Segmentation fault' "$work/$name.log" || true
  fi
done
echo "================================================================ matrix summary"
for name in "${names[@]}"; do
  result=$(cat "$work/$name.result" 2>/dev/null || echo "no result")
  echo "matrix $name: $result"
  case "$result" in
    "missing Python"*)
      if [ "${CI:-}" = "true" ]; then failed=1; else echo "matrix $name: skipped (no such interpreter here)"; fi ;;
    "exit 0:"*) ;;
    *) failed=1 ;;
  esac
done
exit "$failed"
