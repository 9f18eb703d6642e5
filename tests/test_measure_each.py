"""``benchmarks.zoo.measure_each``: the per-model loop the GPU benchmarks share."""

from __future__ import annotations

import json

import pytest

from benchmarks import zoo


def test_every_model_is_measured_a_missing_one_kept_as_skipped_and_the_files_written_after_each(tmp_path, capsys):
    written: list[list[str]] = []

    def measure(name: str) -> dict:
        if name == "unet_sd15":
            raise zoo.ModelUnavailable("diffusers is not installed")
        # the files hold every model measured before this one: a run cut short keeps them
        if (tmp_path / "bench.json").exists():
            written.append([r["model"] for r in json.loads((tmp_path / "bench.json").read_text())])
        return {"model": name, "value": len(name)}

    def render(results: list[dict]) -> str:
        return "\n".join(f"| {r['model']} | {r.get('value', r.get('status'))} |" for r in results)

    results = zoo.measure_each(
        ["mlp", "unet_sd15", "gpt2"], measure, render, tmp_path, "bench", progress=lambda r: f"{r[-1]['model']} done"
    )
    assert results == [
        {"model": "mlp", "value": 3},
        {"model": "unet_sd15", "status": "skipped", "reason": "diffusers is not installed"},
        {"model": "gpt2", "value": 4},
    ]
    assert written == [["mlp", "unet_sd15"]]
    assert json.loads((tmp_path / "bench.json").read_text()) == results
    assert (tmp_path / "bench.md").read_text() == render(results)
    printed = capsys.readouterr().out.splitlines()
    assert printed[:3] == ["mlp done", "unet_sd15 done", "gpt2 done"] and printed[3:] == render(results).splitlines()


def test_an_error_other_than_a_missing_package_stops_the_run(tmp_path):
    def measure(name: str) -> dict:
        raise ValueError("the model failed")

    with pytest.raises(ValueError, match="the model failed"):
        zoo.measure_each(["mlp"], measure, str, tmp_path, "bench")
