"""``aitune-dispatch bench``: replays a saved result's samples, prints the table, writes CSV."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from aitune_dispatch.cli import main


def test_cli_bench_prints_the_table_and_writes_csv(mixed_result, tmp_path, capsys):
    saved = mixed_result.save(tmp_path / "mixed", with_tensors=True)
    csv = tmp_path / "bench.csv"
    assert main(["bench", str(saved), "--function-names", "relu,gelu", "--repeats", "2", "--csv", str(csv)]) == 0
    out, err = capsys.readouterr()
    assert "weighted per function" in out and "replaying the samples of" in err
    written = pd.read_csv(csv)
    # functions in name order: gelu 0, 1 then relu 0, 1; one implementation each
    assert list(zip(written["function_name"], written["sample"])) == [
        ("gelu", 0),
        ("gelu", 1),
        ("relu", 0),
        ("relu", 1),
    ]
    assert written["kernels_match"].all() and written["ok"].all()
    assert written.columns[-1] == "replay_iqr_us" and (written["replay_iqr_us"] >= 0).all()
    for line in csv.read_text().splitlines()[1:]:  # no float noise (164.15300000000002): ns at most
        recorded, replayed = line.split(",")[4:6]
        spread = line.split(",")[-1]
        assert all(len(value.partition(".")[2]) <= 3 for value in (recorded, replayed, spread)), line
    # the terminal table: one time unit in the titles, no scientific notation, words, the speedup as 1.00x
    lines = out.splitlines()
    header = r"function\s+sample\s+variant\s+calls\s+recorded \((µs|ms|s)\)\s+replayed \(\1\)\s+IQR \(\1\)\s+speedup"
    assert re.match(header, lines[0]), lines[0]
    rows = [line.split() for line in lines[2:6]]
    assert [row[:3] for row in rows] == [[name, sample, "torch"] for name in ("gelu", "relu") for sample in "01"]
    assert all(row[7] == "1.00x" and row[8] == "same" and row[-1] == "yes" for row in rows), rows
    # the IQR column holds the table's replay_iqr_us in the unit of the titles
    scale = {"µs": 1.0, "ms": 1e3, "s": 1e6}[re.match(header, lines[0]).group(1)]
    shown = [float(row[6].replace(",", "")) * scale for row in rows]
    last_digit = 0.05 if scale == 1.0 else 0.005 * scale  # µs show 1 decimal, ms and s 2 (more below 0.1)
    # half a unit of the last digit shown, plus float error: a value the CSV rounds to 0.150 may show as 0.2
    assert shown == pytest.approx(written["replay_iqr_us"].tolist(), rel=0.05, abs=last_digit * (1 + 1e-9))
    assert "e+" not in out and "e-0" not in out
    from text_tables import misaligned

    assert misaligned(out) == []  # the decimal points of every numeric column line up


def test_cli_bench_help_and_early_checks(mixed_result, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "Replay the samples of a saved result, timed. Every distinct sample" in shown  # a description
    assert "--function-names NAMES" in shown and "--repeats N" in shown and "--csv FILE.csv" in shown  # metavars
    assert "(default: 50)" in shown and "(default: 5)" in shown
    saved = mixed_result.save(tmp_path / "mixed")
    with pytest.raises(SystemExit) as info:
        main(["bench", str(saved), "--csv", str(tmp_path / "table.txt")])  # refused before replaying anything
    assert info.value.code == 2 and "the CSV file must end in .csv; got" in capsys.readouterr().err


def test_cli_bench_reports_bad_input_in_one_line(mixed_result, tmp_path, capsys):
    saved = mixed_result.save(tmp_path / "mixed")
    assert main(["bench", str(saved), "--function-names", "conv2d", "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("aitune-dispatch: error: no samples of ['conv2d']")


def test_cli_bench_passes_the_cache_state_on(mixed_result, tmp_path, capsys, monkeypatch):
    from aitune_dispatch.benchmarking import replay

    seen: list[str] = []
    real = replay.benchmark

    def spy(*args, **kwargs):
        seen.append(kwargs["cache"])
        return real(*args, **kwargs)

    monkeypatch.setattr(replay, "cache_bytes", lambda device: 1 << 16)
    monkeypatch.setattr("aitune_dispatch.benchmarking.benchmark", spy)
    saved = mixed_result.save(tmp_path / "mixed", with_tensors=True)
    assert main(["bench", str(saved), "--function-names", "relu", "--repeats", "2", "--cache", "cold", "-q"]) == 0
    assert main(["bench", str(saved), "--function-names", "relu", "--repeats", "2", "-q"]) == 0
    assert seen == ["cold", "warm"]
    with pytest.raises(SystemExit):
        main(["bench", str(saved), "--cache", "hot"])
    assert "invalid choice: 'hot'" in capsys.readouterr().err


def test_cli_bench_warns_once_when_the_timed_calls_spread_widely(mixed_result, tmp_path, capsys, monkeypatch):
    from aitune_dispatch.benchmarking import replay

    real = replay._time

    def spread(plan, implementation, inputs):  # the real replay, its times replaced: 10, 20, 30 µs
        return [10.0, 20.0, 30.0], real(plan, implementation, inputs)[1]

    monkeypatch.setattr(replay, "_time", spread)
    saved = mixed_result.save(tmp_path / "mixed", with_tensors=True)
    assert main(["bench", str(saved), "--function-names", "relu", "--repeats", "3", "-q"]) == 0
    out, err = capsys.readouterr()
    warned = [line for line in err.splitlines() if "spread widely" in line]
    assert len(warned) == 1 and warned[0].startswith("aitune-dispatch: warning: benchmark(): the timed calls of 2 of 2")
    assert "relu sample 0 torch (IQR 50% of 20 µs)" in warned[0]
    rows = [line.split() for line in out.splitlines()[2:4]]
    assert [row[5:7] for row in rows] == [["20.0", "10.0"]] * 2  # replayed (median) and IQR, in µs


def test_cli_bench_old_spellings_still_work_with_a_note(mixed_result, tmp_path, capsys, monkeypatch):
    seen: list[tuple] = []

    def spy(result, functions, **kwargs):
        seen.append((functions, kwargs["warmup"]))
        return pd.DataFrame()

    monkeypatch.setattr("aitune_dispatch.benchmarking.benchmark", spy)
    monkeypatch.setattr("aitune_dispatch.benchmarking.weighted_totals", lambda table: pd.DataFrame())
    monkeypatch.setattr("aitune_dispatch.cli._print_bench", lambda table: None)
    saved = mixed_result.save(tmp_path / "mixed")
    assert main(["bench", str(saved), "--function-names", "relu", "--warmup-calls", "2", "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["bench", str(saved), "--functions", "relu", "--warmup", "2", "-q"]) == 0
    assert seen == [(["relu"], 2), (["relu"], 2)]  # the old spellings mean the same
    assert capsys.readouterr().err.splitlines() == [
        "aitune-dispatch: warning: --functions is deprecated; use --function-names",
        "aitune-dispatch: warning: --warmup is deprecated; use --warmup-calls",
    ]
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    shown = capsys.readouterr().out
    assert "--functions" not in shown and "--warmup " not in shown and "--warmup-calls N" in shown  # hidden


def test_top_k_is_a_hidden_alias_of_top(capsys):
    from aitune_dispatch.cli import build_parser

    parser = build_parser()
    for command in ("demo", "profile", "report", "compare", "ranks"):
        target = ["M:f"] if command == "profile" else ["A", "B"] if command == "compare" else []
        target = target or ([] if command == "demo" else ["R"])
        assert parser.parse_args([command, *target, "--top-k", "3"]).top == 3
        assert parser.parse_args([command, *target, "--top", "4"]).top == 4
        with pytest.raises(SystemExit):
            parser.parse_args([command, "--help"])
        shown = capsys.readouterr().out
        assert "--top N" in shown and "--top-k" not in shown
