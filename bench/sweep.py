"""Single-layer noise sweep of the embedded model at one ε, timed (CRM appendix J; the Ablations page's sweep).

Runs :func:`core.methods.ablation.layer_sweep` — a clean reference plus one scoring run per decoder layer with
h′ = h + ε·σ(h)·N(0, 1) on that layer only — with a progress bar on stderr, and prints:

* the model, device, threads, answer length, ε and seeds;
* the wall time of the whole sweep and per scoring run, next to the median time of a clean scoring run
  (``sweep_per_run_ratio``; perturbed answers are often longer than the clean one, which ends at EOS, so
  this ratio includes the extra tokens), and the cost of the hooks alone: the same clean run with ε = 0
  noise hooks on every layer (identical answer), ``hook_overhead_ratio`` = hooked / clean median;
* ΔZ per layer (and whether the answer changed), as a table;
* as its last line ``sweep_seconds=<total>``.

``--json PATH`` writes the sweep (``NoiseGrid.to_dict()``) and the timings; ``--png PATH`` draws ΔZ per layer
with matplotlib when it is installed (it is not a dependency of the app).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from _common import CONTEXT, QUERY, set_threads

from core.engine import DualPathSettings, prepare_prompts
from core.io import atomic_write_text
from core.methods.ablation import layer_sweep, noise_injection, score_run, sweep_settings
from core.model.loading import load_model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eps", type=float, default=0.1)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=16, help="answer tokens per scoring run (T = the same)")
    parser.add_argument("--clean-repeats", type=int, default=3, help="clean scoring runs timed for the ratio")
    parser.add_argument("--model", default=None, help="default: the embedded SmolLM2")
    parser.add_argument("--json", default=None, help="write the sweep and timings to this JSON file")
    parser.add_argument("--png", default=None, help="draw ΔZ per layer to this PNG (needs matplotlib)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's own)")
    args = parser.parse_args()
    set_threads(args.threads)

    handle = load_model(args.model)
    settings = sweep_settings(DualPathSettings(), args.tokens)
    prepared = prepare_prompts(handle, QUERY, CONTEXT, settings)
    score_run(handle, prepared, settings)  # warm-up
    clean_times, hooked_times = [], []
    every_layer = list(range(handle.info.n_layers))
    for rep in range(args.clean_repeats):
        for hooked in (False, True) if rep % 2 == 0 else (True, False):
            t0 = time.perf_counter()
            if hooked:
                with noise_injection(handle, every_layer, 0.0, 0):
                    score_run(handle, prepared, settings)
                hooked_times.append(time.perf_counter() - t0)
            else:
                score_run(handle, prepared, settings)
                clean_times.append(time.perf_counter() - t0)

    clean_median = statistics.median(clean_times)
    print(
        f"model={handle.info.name} device={handle.info.device} threads={torch.get_num_threads()} "
        f"layers={handle.info.n_layers} tokens={args.tokens} eps={args.eps:g} seeds={args.seeds} "
        f"prompt_tokens={len(prepared.retrieval.ids)}"
    )
    print(
        f"clean scoring run: median {clean_median * 1000:.0f} ms over {len(clean_times)}; with ε = 0 hooks on all "
        f"{len(every_layer)} layers: median {statistics.median(hooked_times) * 1000:.0f} ms"
    )
    print(f"hook_overhead_ratio={statistics.median(hooked_times) / clean_median:.3f}", flush=True)

    from tqdm import tqdm

    seeds = list(range(args.seeds))
    n_runs = 1 + handle.info.n_layers * len(seeds)
    with tqdm(total=n_runs, desc="single-layer sweep", unit="run", file=sys.stderr) as bar:

        def progress(done: int, total: int, label: str) -> None:
            bar.set_postfix_str(label)
            bar.update(done - bar.n)

        t0 = time.perf_counter()
        grid = layer_sweep(
            handle, QUERY, CONTEXT, settings, args.eps, seeds, max_new_tokens=args.tokens, progress=progress
        )
        total = time.perf_counter() - t0
    n_runs = int(grid.timings["runs"])
    print(f"sweep: {n_runs} runs in {total:.1f} s = {total / n_runs * 1000:.0f} ms per run")
    print(f"sweep_per_run_ratio={total / n_runs / clean_median:.3f}")
    print(f"clean Z = {grid.clean_z:.4f} nats; answer: {grid.clean_answer!r}")
    print("layer      ΔZ (nats)   answer changed")
    for i, layer in enumerate(grid.conditions):
        print(f"{layer:5d}  {grid.delta_z[i].mean():+12.4f}   {grid.answer_changed[i].mean():.0%}")
    if args.json:
        payload = {
            "sweep": grid.to_dict(),
            "total_s": total,
            "clean_run_s": clean_times,
            "device": handle.info.device,
            "threads": torch.get_num_threads(),
        }
        atomic_write_text(args.json, json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False))
    if args.png:
        _png(grid, args.png, total)
    print(f"sweep_seconds={total:.2f}")
    return 0


def _png(grid, path: str, total: float) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG written", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(9, 3.2), dpi=110)
    delta = grid.delta_z.mean(axis=1)
    ax.bar(grid.conditions, delta, color=["#c0392b" if d > 0 else "#2f5d8a" for d in delta])
    ax.axhline(0, color="#555", lw=0.8)
    ax.set_xlabel("decoder layer (noise on this layer only)")
    ax.set_ylabel("ΔZ (nats)")
    ax.set_title(
        f"{grid.model.split(' (')[0]}: ε = {grid.eps[0]:g}, T = {grid.settings['score_window']}, "
        f"clean Z = {grid.clean_z:.2f} · {len(grid.conditions)} layers in {total:.0f} s",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    raise SystemExit(main())
