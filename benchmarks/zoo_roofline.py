"""The zoo's roofline: each model's report and its sampled calls ranked by what the GPU's limits say
could be saved (issue 24).

    python -m benchmarks.zoo_roofline --out OUT [--models sdpa_blocks gpt2 ...] [--device cuda] [--size small]

Per model: one ``profile()`` (warm-up 1), the HTML report (``OUT/<model>.html``, its "Worth
optimizing" section holding the roofline chart and the ranking), and in ``zoo_roofline.md`` the
limits used, the sampled kernel time, what the ranking says could be saved, and the five calls with
the most to gain (function, signature, bound, fraction of the bound, µs to gain). A model whose
package is missing is listed as skipped.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

MODELS = ("sdpa_blocks", "gpt2", "resnet50", "unet_sd15")
TOP = 5


def model_section(name: str, device: str, out: Path, size: str = "bench") -> str:
    """The markdown of one model: its limits, totals and top calls; its report written beside it."""
    import torch

    from aitune_dispatch import ModuleFunctionKernelProfiler
    from aitune_dispatch.reports import write_report
    from aitune_dispatch.results import views
    from benchmarks import zoo

    try:
        workload = zoo.build(name, device, size=size)
    except zoo.ModelUnavailable as error:
        return f"### {name}\n\nskipped: {error}\n"
    profiler = ModuleFunctionKernelProfiler(device=device)
    with torch.no_grad():
        if workload.function is not None:
            result = profiler.profile_result(workload.function, module=workload.model, warmup_iterations=1)
        else:
            result = profiler.profile_result(workload.model, workload.samples, warmup_iterations=1)
    write_report(result, out / f"{name}.html", title=f"{name}: aitune_dispatch profile")
    samples = result.samples(roofline=True)
    ranked = result.worth_optimizing(top=None)
    limits = views.device_limits(result.metadata)
    placed = int(((samples["intensity"] > 0) & (samples["flop_per_s"] > 0) & samples["peak_flop_per_s"].notna()).sum())
    lines = [
        f"### {name}",
        "",
        f"limits: {limits.name if limits else 'unknown'}; {len(samples)} samples, {placed} on the chart "
        f"(known FLOPs); sampled kernel time {samples['kernel_us'].sum():.1f} µs, worth_us "
        f"{ranked['worth_us'].sum():.1f} µs; report `{name}.html`",
        "",
        "| function | signature | calls | kernel µs | bound | of the bound | worth µs |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in ranked.head(TOP).itertuples():
        signature = str(row.signature)
        signature = signature if len(signature) <= 60 else signature[:57] + "..."
        bound = row.bound if isinstance(row.bound, str) else "(no FLOP formula)"
        lines.append(
            f"| {row.function_name} | `{signature}` | {row.calls} | {row.kernel_us:.1f} | {bound} | "
            f"{100 * row.fraction_of_bound:.1f} % | {row.worth_us:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--device", default=None, help="cuda where available, else cpu")
    parser.add_argument("--size", default="bench", choices=("bench", "small"), help="the zoo's sizes (small: smoke)")
    args = parser.parse_args(argv)
    import platform

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    gpu = f" ({torch.cuda.get_device_name()})" if device == "cuda" else ""
    header = (
        f"# The zoo's roofline\n\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; python "
        f"{platform.python_version()}, torch {torch.__version__}, device {device}{gpu}\n"
    )
    text = header + "\n" + "\n".join(model_section(name, device, args.out, args.size) for name in args.models)
    (args.out / "zoo_roofline.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
