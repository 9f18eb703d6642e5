"""HF Llama-style static-cache decoding, compiled by ``generate()`` with ``mode="reduce-overhead"``.

Run in a process of its own by ``tests/test_graph_capture_observer_gpu.py`` (a crash in the compiler
stack then fails that test, not the whole GPU run): ``python tests/static_cache_decoding.py``. It
profiles ``generate()`` twice, on two copies of one model, and prints one line ``RESULT <json>``:

- ``inside``: a fresh model whose decoding step is compiled and captured in ``profile()``'s warm-ups;
- ``observed``: a fresh model warmed at "start-up" (three ``generate()`` calls: compile, cudagraph
  warm-up, capture) under ``observe_graph_captures(model)``, then profiled as a server would be;
- ``bare``: the kernels the observed model's replays launch under a CUPTI-only capture.
"""

from __future__ import annotations

import collections
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # conftest's bare_kernels
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from conftest import bare_kernels  # noqa: E402

import aitune_dispatch  # noqa: E402
from aitune_dispatch import ModuleFunctionKernelProfiler, schema  # noqa: E402
from aitune_dispatch.provenance.inductor import forget_programs  # noqa: E402

NEW_TOKENS = 6
WARMUP = 3  # generate() calls before the recorded one: compile, cudagraph warm-up, capture


def build() -> tuple[torch.nn.Module, Any]:
    """A seeded 2-layer LlamaForCausalLM (GQA 4/2 heads) with a static cache; ``generate`` for it."""
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        max_position_embeddings=128,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval().cuda()
    # generate() compiles its decoding step itself where the cache is static (the prefill runs eager)
    model.generation_config.cache_implementation = "static"
    model.generation_config.compile_config = transformers.CompileConfig(mode="reduce-overhead")
    ids = torch.randint(3, 512, (1, 8), generator=torch.Generator().manual_seed(1)).cuda()

    def generate() -> torch.Tensor:
        return model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)

    return model, generate


def summary(result: Any) -> dict[str, Any]:
    """What the tests compare: the replayed rows as (module, function, op, kernel) counts, and more."""
    activity = result.to_pandas()
    replayed = activity[activity["graph_id"] != schema.NOT_IN_GRAPH]
    keys = replayed[["module_name", "function_name", "op", "kernel"]].astype(object)
    keys = keys.where(keys.notna(), None)
    rows = collections.Counter(map(tuple, keys.itertuples(index=False)))
    linear = replayed[replayed["function_name"] == "linear"]
    return {
        "rows": [[*key, count] for key, count in sorted(rows.items(), key=repr)],
        "kernels": dict(collections.Counter(replayed["kernel"])),
        "attribution": dict(sorted(collections.Counter(replayed["attribution"]).items())),
        "ops": sorted(set(replayed["op"].dropna())),
        "modules": sorted(set(replayed["module_name"].dropna())),
        "linear_modules": sorted(set(linear["module_name"].dropna())),
        "graph_capture": result.metadata.get(schema.META_GRAPH_CAPTURE),
        "inductor": result.metadata.get(schema.META_INDUCTOR),
        "by_attribution": [  # for reading a failure: where each kind of replayed kernel went
            [*key, count]
            for key, count in sorted(
                collections.Counter(
                    zip(replayed["attribution"], keys["module_name"], replayed["kernel"].str.slice(0, 48))
                ).items(),
                key=repr,
            )
        ],
        "warnings": list(result.warnings),
    }


def profile(generate: Any, model: torch.nn.Module) -> Any:
    profiler = ModuleFunctionKernelProfiler()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using `torch.compile")
        profiler.profile(generate, [((), {})], module=model, warmup_iterations=WARMUP)
    return profiler.last_result


def main() -> int:
    from torch._dynamo.utils import counters

    out: dict[str, Any] = {}
    model, generate = build()
    out["inside"] = summary(profile(generate, model))
    out["inside_tokens"] = generate().tolist()
    out["inside_graphs"] = int(counters["stats"]["unique_graphs"])

    torch._dynamo.reset()
    forget_programs()
    counters.clear()
    model, generate = build()
    with aitune_dispatch.observe_graph_captures(model) as observer, torch.no_grad():
        for _ in range(WARMUP):
            generate()
    out["observer"] = {"captured": observer.captured, "skipped": observer.skipped, "unavailable": observer.unavailable}
    out["startup_graphs"] = int(counters["stats"]["unique_graphs"])
    out["observed"] = summary(profile(generate, model))
    out["graphs_after_profile"] = int(counters["stats"]["unique_graphs"])  # more: profile() recompiled
    out["observed_tokens"] = generate().tolist()
    out["bare"] = dict(bare_kernels(generate, [((), {})], graphed_only=True))
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
