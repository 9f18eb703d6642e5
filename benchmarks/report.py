"""RESULTS.md from the harness's results: machine and versions, tables of ratios, the targets of issue 4.

Pure functions over the results dict that :mod:`benchmarks.harness` writes as ``results.json``
(``meta``, ``config``, ``workers``: one entry per model x method with its ``runs``, ``compare_md``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

Run = Mapping[str, Any]
OURS_PREFERENCE = ("ours-native", "ours", "ours-python")
ROWS_FOR_SPEED_TARGET = 4000


def _fmt(value: Any, spec: str = ".3g") -> str:
    return "–" if value is None else format(value, spec)


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def runs_index(results: Mapping[str, Any]) -> dict[tuple[str, str], dict[int, Run]]:
    """``(model, method) -> {repeat: run}`` over the workers that ran."""
    index: dict[tuple[str, str], dict[int, Run]] = {}
    for worker in results.get("workers", []):
        index[(worker["model"], worker["method"])] = {run["repeat"]: run for run in worker.get("runs", [])}
    return index


def models(results: Mapping[str, Any]) -> list[str]:
    """Models in the order the harness ran them."""
    return list(dict.fromkeys(w["model"] for w in results.get("workers", [])))


def ours_method(index: Mapping[tuple[str, str], Mapping[int, Run]], model: str) -> str | None:
    """Our headline method for ``model``: native decoder, else the default, else cupti-python."""
    return next((m for m in OURS_PREFERENCE if index.get((model, m))), None)


def _get(index: Mapping, model: str, method: str | None, repeat: int, key: str) -> Any:
    run = index.get((model, method), {}).get(repeat) if method else None
    return None if run is None else run.get(key)


def _repeats(index: Mapping, model: str) -> list[int]:
    return sorted({r for (m, _), runs in index.items() if m == model for r in runs})


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _per_config(
    results: Mapping[str, Any], row: Callable[[Mapping, str, str | None, int], list[str]]
) -> list[list[str]]:
    index = runs_index(results)
    rows = []
    for model in models(results):
        ours = ours_method(index, model)
        for repeat in _repeats(index, model):
            rows.append([model, f"×{repeat}", *row(index, model, ours, repeat)])
    return rows


# -- tables ---------------------------------------------------------------------------------------------
def wall_table(results: Mapping[str, Any]) -> str:
    """profile() wall time per method and the speedup over the baseline."""

    def row(ix: Mapping, model: str, ours: str | None, r: int) -> list[str]:
        base, mine = _get(ix, model, "baseline", r, "profile_s"), _get(ix, model, ours, r, "profile_s")
        return [
            _fmt(_get(ix, model, ours, r, "kernels"), "d"),
            _fmt(_get(ix, model, ours, r, "rows"), "d"),
            _fmt(_get(ix, model, "baseline", r, "rows"), "d"),
            _fmt(mine, ".3f"),
            _fmt(_get(ix, model, "ours-python", r, "profile_s"), ".3f"),
            _fmt(_get(ix, model, "ours-pytracer", r, "profile_s"), ".3f"),
            _fmt(base, ".3f"),
            _fmt(_div(base, mine), ".1f"),
            _fmt(_get(ix, model, ours, r, "profile_ms_per_row"), ".3f"),
            _fmt(_get(ix, model, "baseline", r, "profile_ms_per_row"), ".3f"),
        ]

    header = [
        "model",
        "samples",
        "kernels",
        "rows ours",
        "rows baseline",
        "ours s",
        "ours (cupti-python) s",
        "ours (Python dispatch mode) s",
        "baseline s",
        "baseline / ours",
        "ours ms/row",
        "baseline ms/row",
    ]
    return _table(header, _per_config(results, row))


def pass_table(results: Mapping[str, Any]) -> str:
    """Recorded pass over bare pass, per method."""

    def row(ix: Mapping, model: str, ours: str | None, r: int) -> list[str]:
        return [
            _fmt(_get(ix, model, ours, r, "bare_pass_s"), ".4f"),
            _fmt(_get(ix, model, ours, r, "pass_ratio"), ".2f"),
            _fmt(_get(ix, model, "ours-python", r, "pass_ratio"), ".2f"),
            _fmt(_get(ix, model, "ours-pytracer", r, "pass_ratio"), ".2f"),
            _fmt(_get(ix, model, "baseline", r, "pass_ratio"), ".2f"),
        ]

    header = [
        "model",
        "samples",
        "bare pass s",
        "ours pass / bare",
        "ours (cupti-python) pass / bare",
        "ours (Python dispatch mode) pass / bare",
        "baseline pass / bare",
    ]
    return _table(header, _per_config(results, row))


def post_table(results: Mapping[str, Any]) -> str:
    """Post-processing (flush to DataFrame) and record decoding per kernel."""

    def row(ix: Mapping, model: str, ours: str | None, r: int) -> list[str]:
        native = _get(ix, model, ours, r, "flush_decode_s")
        python = _get(ix, model, "ours-python", r, "flush_decode_s")
        return [
            _fmt(_get(ix, model, ours, r, "post_us_per_kernel"), ".2f"),
            _fmt(_get(ix, model, "ours-python", r, "post_us_per_kernel"), ".2f"),
            _fmt(_get(ix, model, "baseline", r, "post_us_per_kernel"), ".1f"),
            _fmt(_get(ix, model, ours, r, "flush_decode_us_per_kernel"), ".2f"),
            _fmt(_get(ix, model, "ours-python", r, "flush_decode_us_per_kernel"), ".2f"),
            _fmt(_div(python, native) if ours != "ours-python" else None, ".1f"),
        ]

    header = [
        "model",
        "samples",
        "ours post µs/kernel",
        "ours (cupti-python) post µs/kernel",
        "baseline post µs/kernel",
        "flush+decode µs/kernel",
        "flush+decode (cupti-python) µs/kernel",
        "cupti-python / native decode",
    ]
    return _table(header, _per_config(results, row))


def memory_table(results: Mapping[str, Any]) -> str:
    """Peak host RSS growth of one profile() call per method."""

    def row(ix: Mapping, model: str, ours: str | None, r: int) -> list[str]:
        mine, base = _get(ix, model, ours, r, "rss_mb"), _get(ix, model, "baseline", r, "rss_mb")
        return [
            _fmt(mine, ".1f"),
            _fmt(_get(ix, model, "ours-python", r, "rss_mb"), ".1f"),
            _fmt(base, ".1f"),
            _fmt(_div(mine, base), ".2f"),
        ]

    header = ["model", "samples", "ours MB", "ours (cupti-python) MB", "baseline MB", "ours / baseline"]
    return _table(header, _per_config(results, row))


def phases_table(results: Mapping[str, Any]) -> str:
    """Where each method's time goes at the largest measured size of each model."""
    rows = []
    for worker in results.get("workers", []):
        if not worker.get("runs"):
            continue
        run = worker["runs"][-1]
        keys = ["warmup_s", "start_s", "pass_s", "stop_s", "decode_s", "parse_s", "match_s", "join_s", "df_s"]
        rows.append([worker["model"], worker["method"], f"×{run['repeat']}", *(_fmt(run.get(k), ".4f") for k in keys)])
    header = [
        "model",
        "method",
        "samples",
        "warmup",
        "start",
        "pass",
        "stop/flush",
        "decode",
        "parse",
        "match",
        "join",
        "DataFrame",
    ]
    return _table(header, rows)


# -- targets --------------------------------------------------------------------------------------------
def targets(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Issue 4's targets, each with what was measured and whether it is met (None: not measured)."""
    index = runs_index(results)
    return [
        _speed_target(index, results),
        _scaling_target(index, results),
        _post_target(index, results),
        _decode_target(index, results),
        _memory_target(index, results),
        _vit_pass_target(index),
        _pass_vs_baseline_target(index, results),
    ]


def _pairs(index: Mapping, results: Mapping, key: str) -> list[tuple[str, int, Any, Any]]:
    """``(model, repeat, ours value, baseline value)`` where both ran."""
    out = []
    for model in models(results):
        ours = ours_method(index, model)
        for repeat in _repeats(index, model):
            mine, base = _get(index, model, ours, repeat, key), _get(index, model, "baseline", repeat, key)
            if mine is not None and base is not None:
                out.append((model, repeat, mine, base))
    return out


def _speed_target(index: Mapping, results: Mapping) -> dict[str, Any]:
    big = [
        (m, r, b / o)
        for m, r, o, b in _pairs(index, results, "profile_s")
        if (_get(index, m, "baseline", r, "rows") or 0) >= ROWS_FOR_SPEED_TARGET
    ]
    measured = ", ".join(f"{m} ×{r}: {s:.1f}×" for m, r, s in big) or "no config reached 4,000 baseline rows"
    return {
        "target": "profile() ≥10× faster than the baseline at 4,000+ rows",
        "measured": measured,
        "met": all(s >= 10 for _, _, s in big) if big else None,
    }


def added_us_per_kernel(run: Run, warmup: int) -> float:
    """What profiling added per kernel: profile() wall minus (warmup + 1) bare passes, over kernels."""
    return (run["profile_s"] - (warmup + 1) * run["bare_pass_s"]) / max(run["kernels"], 1) * 1e6


def _scaling_target(index: Mapping, results: Mapping) -> dict[str, Any]:
    warmup = results.get("config", {}).get("warmup", 1)
    parts, met = [], []
    for model in models(results):
        runs = index.get((model, ours_method(index, model)), {})
        costs = {r: added_us_per_kernel(run, warmup) for r, run in sorted(runs.items()) if r >= 4}
        gaps = [b / o for m, r, o, b in _pairs(index, results, "profile_s") if m == model]
        if len(costs) >= 2:
            flat = costs[max(costs)] <= 1.25 * min(costs.values())
            widening = len(gaps) < 2 or gaps[-1] >= 0.9 * max(gaps)
            met.append(flat and widening)
            cost_text = "/".join(f"{c:.1f}" for c in costs.values())
            parts.append(f"{model}: {cost_text} µs/kernel, gap {'→'.join(f'{g:.1f}×' for g in gaps)}")
    return {
        "target": "our added cost per kernel flat (×4 and up), the gap to the baseline widening with size",
        "measured": "; ".join(parts) or "needs two sizes ≥ ×4",
        "met": all(met) if met else None,
    }


def _post_target(index: Mapping, results: Mapping) -> dict[str, Any]:
    values = []
    for model in models(results):
        ours = ours_method(index, model)
        runs = index.get((model, ours), {})
        if runs:
            last = runs[max(runs)]
            values.append((model, last["repeat"], last["post_us_per_kernel"]))
    measured = ", ".join(f"{m} ×{r}: {v:.2f} µs" for m, r, v in values) or "not measured"
    return {
        "target": "post-processing ≤2 µs per kernel record (largest size)",
        "measured": measured,
        "met": all(v <= 2.0 for *_, v in values) if values else None,
    }


def _decode_target(index: Mapping, results: Mapping) -> dict[str, Any]:
    values = []
    for model in models(results):
        native, python = index.get((model, "ours-native"), {}), index.get((model, "ours-python"), {})
        common = sorted(set(native) & set(python))
        if common:
            r = common[-1]
            values.append((model, r, _div(python[r]["flush_decode_s"], native[r]["flush_decode_s"])))
    measured = ", ".join(f"{m} ×{r}: {v:.0f}×" for m, r, v in values if v) or "needs both decoders"
    return {
        "target": "record decoding ≥50× faster than cupti-python",
        "measured": measured,
        "met": all(v and v >= 50 for *_, v in values) if values else None,
    }


def _memory_target(index: Mapping, results: Mapping) -> dict[str, Any]:
    pairs = [(m, r, _div(o, b)) for m, r, o, b in _pairs(index, results, "rss_mb")]
    largest = {m: (r, v) for m, r, v in pairs}  # the last (largest) repeat of each model wins
    measured = ", ".join(f"{m} ×{r}: {_fmt(v, '.2f')}" for m, (r, v) in largest.items()) or "not measured"
    return {
        "target": "host RSS growth ≤ ¼ of the baseline's (largest size)",
        "measured": measured,
        "met": all(v is not None and v <= 0.25 for _, v in largest.values()) if largest else None,
    }


def _vit_pass_target(index: Mapping) -> dict[str, Any]:
    ours = ours_method(index, "vit_b_16")
    runs = index.get(("vit_b_16", ours), {}) if ours else {}
    ratios = {r: run["pass_ratio"] for r, run in runs.items()}
    measured = ", ".join(f"×{r}: {v:.2f}" for r, v in sorted(ratios.items())) or "vit_b_16 not measured"
    return {
        "target": "profiled pass ≤1.5× bare on vit_b_16 (batch 8)",
        "measured": measured,
        "met": max(ratios.values()) <= 1.5 if ratios else None,
    }


def _pass_vs_baseline_target(index: Mapping, results: Mapping) -> dict[str, Any]:
    worse = [(m, r, o, b) for m, r, o, b in _pairs(index, results, "pass_ratio") if o > b]
    pairs = _pairs(index, results, "pass_ratio")
    measured = "; ".join(f"{m} ×{r}: {o:.2f} vs {b:.2f}" for m, r, o, b in worse) or f"{len(pairs)} configs, none worse"
    return {
        "target": "profiled pass / bare ≤ the baseline's on every model",
        "measured": measured,
        "met": not worse if pairs else None,
    }


def targets_table(results: Mapping[str, Any]) -> str:
    """The targets as a markdown table."""
    mark = {True: "met", False: "**missed**", None: "not measured"}
    return _table(
        ["target", "measured", "status"], ([t["target"], t["measured"], mark[t["met"]]] for t in targets(results))
    )


# -- the document ---------------------------------------------------------------------------------------
def header(results: Mapping[str, Any]) -> str:
    """Machine, versions, date and the exact command."""
    meta, config = results.get("meta", {}), results.get("config", {})
    versions = ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items())
    return (
        f"# Benchmark results\n\n"
        f"- date: {meta.get('date')}\n- machine: {meta.get('machine')}\n- CPU: {meta.get('cpu')}\n"
        f"- versions: {versions}\n- commit: {meta.get('commit')}\n- command: `{meta.get('command')}`\n"
        f"- config: device {config.get('device')}, size {config.get('size')}, warmup_iterations "
        f"{config.get('warmup')}, repeats {config.get('repeats')}, isolation {config.get('isolate')}, "
        f"wall {_fmt(meta.get('wall_s'), '.0f')} s\n\n"
        f"Each worker runs one model × method ({_isolation(config)}): its first `profile()` is the "
        "start-up call, every number below is a later call: per configuration the median of up to three "
        "`profile()` calls (one where three would pass 6 s), each beside its own bare pass; the pass ratio is "
        "median pass over median bare pass. `profile()` wall time includes the warmup passes "
        "(same count for every method; with warmup_iterations 0, none). Rows: `profiling_df` rows; "
        "kernels: every kernel/memcpy/memset recorded. The baseline re-implements AITune 0.6.0's algorithm "
        "(benchmarks/reference_baseline.py).\n"
    )


def _isolation(config: Mapping[str, Any]) -> str:
    if config.get("isolate") == "worker":
        return "a fresh process each, so start-up and host memory never leak between methods"
    return "all in one process: host-memory numbers are only indicative"


def _notes(results: Mapping[str, Any]) -> str:
    lines = []
    for worker in results.get("workers", []):
        if worker.get("status") != "ok":
            lines.append(f"- {worker['model']} / {worker['method']}: {worker.get('status')}: {worker.get('reason')}")
        lines += [
            f"- {worker['model']} / {worker['method']} ×{s['repeat']}: skipped, {s['reason']}"
            for s in worker.get("skipped", [])
        ]
    return "\n".join(lines) + "\n" if lines else "none\n"


def _cprofiles(results: Mapping[str, Any]) -> str:
    blocks = []
    for worker in results.get("workers", []):
        text = results.get("cprofile_text", {}).get(worker.get("cprofile", ""))
        if text:
            excerpt = "\n".join(line for line in text.strip().splitlines() if line.strip())
            blocks.append(f"### {worker['model']} / {worker['method']} ({worker['cprofile']})\n\n```\n{excerpt}\n```\n")
    return "\n".join(blocks) if blocks else "not collected (run with `--cprofile-top N`)\n"


def render(results: Mapping[str, Any]) -> str:
    """The whole RESULTS.md."""
    sections = [
        header(results),
        "## Targets (issue 4)\n\n" + targets_table(results),
        "## profile() wall time\n\n" + wall_table(results),
        "## Recorded pass over bare pass, by sample count (harness)\n\n" + pass_table(results),
        "## Post-processing and record decoding\n\n" + post_table(results),
        "## Host memory\n\nPeak RSS growth during one `profile()` call (high-water mark reset before it).\n\n"
        + memory_table(results),
        "## Where the time goes (largest size per worker, seconds)\n\n" + phases_table(results),
        "## Agreement with the reference method (issue 3)\n\n" + (results.get("compare_md") or "not run\n"),
        "## Python-side profile (cProfile, cumulative then own time)\n\n" + _cprofiles(results),
        "## Skipped or failed\n\n" + _notes(results),
    ]
    return "\n".join(sections)
