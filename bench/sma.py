"""Wall time of SMA (N = 64 masks, Lime + ridge) on the embedded model for a ~60-token context.

Side by side in one process, on the same query and context:
  dual      — one scored dual-path run (``run_dual_path(..., free_parametric=False)``), the unit of cost
  sma       — ``run_sma`` with N masks, retrieval on and off (2 + 2N greedy answers)
  ablation  — the context-sentence ablation (S + 2 greedy answers)
Every answer is capped at ``--sma-max-new-tokens`` (default 32, the SMA default); the ``--sma-*`` flags are
those of ``python -m core detect``. Prints the context length in
tokens, each wall time, the number of generations, the seconds per generation, the ratios to ``dual``, and
the machine's load average (the timings are only comparable on an otherwise idle machine). The last line is
``sma_seconds=<median>``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from core.cli.commands.detect import add_sma_args, sma_settings_from_args
from core.engine import DualPathSettings, run_dual_path
from core.methods.sma import SMASettings, run_context_ablation, run_sma
from core.model.loading import load_model

QUERY = "What is the capital of Veltria?"
CONTEXT = (
    "The Republic of Veltria is a small island nation in the northern sea. Its capital is Marrowgate, a port "
    "city founded in 1412 by salt traders. Marrowgate hosts the national parliament, the royal archive and "
    "the oldest stone lighthouse of the whole northern sea."
)
"""59 tokens with the embedded model's tokenizer."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=8, help="perturbed prompts generated together")
    add_sma_args(parser)  # the detect command's --sma-* flags, with its defaults (N = 64, Lime, 32 tokens)
    args = parser.parse_args()

    handle = load_model()
    n_context = len(handle.tokenizer(CONTEXT, add_special_tokens=False)["input_ids"])
    settings = sma_settings_from_args(args, batch_size=args.batch_size)
    dual_settings = DualPathSettings(max_new_tokens=settings.max_new_tokens, score_window=settings.max_new_tokens)
    run_dual_path(handle, QUERY, CONTEXT, dual_settings, free_parametric=False)  # warm-up (and embedder load)
    run_sma(handle, QUERY, CONTEXT, SMASettings(n_samples=2, max_new_tokens=2))

    times: dict[str, list[float]] = {"dual": [], "sma": [], "ablation": []}
    generations: dict[str, int] = {"dual": 1}
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        run_dual_path(handle, QUERY, CONTEXT, dual_settings, free_parametric=False)
        times["dual"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        result = run_sma(handle, QUERY, CONTEXT, settings)
        times["sma"].append(time.perf_counter() - t0)
        generations["sma"] = result.on.generations + result.off.generations + 2
        t0 = time.perf_counter()
        ablation = run_context_ablation(handle, QUERY, CONTEXT, settings)
        times["ablation"].append(time.perf_counter() - t0)
        generations["ablation"] = len(ablation.sentences) + 2

    base = statistics.median(times["dual"])
    print(
        f"model: {handle.info.name} on {handle.info.device} ({handle.info.dtype}), torch threads: "
        f"{torch.get_num_threads()}, load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"context: {n_context} tokens; query units: {int(result.query_mask.sum())} ({settings.granularity}); "
        f"N = {settings.n_samples}; method {settings.method}; batch {settings.batch_size}; "
        f"answers ≤ {settings.max_new_tokens} tokens; repeats {args.repeats}"
    )
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"{name:9s} median {median:8.2f} s   generations {generations[name]:4d}   "
            f"{median / generations[name]:6.3f} s/generation   ×{median / base:7.1f} of one dual-path run"
        )
    print(f"sma_seconds={statistics.median(times['sma']):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
