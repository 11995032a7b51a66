"""RePCS latency overhead on the embedded model (RePCS §III-K: 1.047× on a T4 at T = 64).

Side by side in one run, several repeats, order alternated each repeat:
  plain    — a plain greedy ``generate`` of the retrieval answer (T = 64 forced new tokens, no logits kept)
  scored   — the same answer with ``output_logits`` + one teacher-forced parametric forward + Z
             (``run_dual_path(..., free_parametric=False)``, the exact production code path)
  dual     — the full live dual view: both answers generated (batched) + chart data
Prints medians, the ratios to ``plain``, and as its last line ``overhead_ratio=<median scored/plain>``.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from _common import CONTEXT, QUERY, median_line, time_alternating

from core.engine import DualPathSettings, prepare_prompts, run_dual_path
from core.model.loading import load_model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()

    handle = load_model()
    settings = DualPathSettings(max_new_tokens=args.tokens, score_window=args.tokens, force_length=True)
    prep = prepare_prompts(handle, QUERY, CONTEXT, settings)
    ids = torch.tensor([prep.retrieval.ids], device=handle.device)

    def sync() -> None:
        if handle.device.type == "cuda":
            torch.cuda.synchronize()

    def plain() -> None:
        out = handle.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=args.tokens,
            min_new_tokens=args.tokens,
            do_sample=False,
            pad_token_id=handle.pad_token_id,
        )
        assert out.shape[1] == ids.shape[1] + args.tokens

    def scored() -> None:
        r = run_dual_path(handle, QUERY, CONTEXT, settings, free_parametric=False)
        assert r.n_tokens == args.tokens

    def dual() -> None:
        r = run_dual_path(handle, QUERY, CONTEXT, settings, free_parametric=True)
        assert r.n_tokens == args.tokens

    jobs = {"plain": plain, "scored": scored, "dual": dual}
    for fn in jobs.values():  # warm-up
        fn()
    rounds, _ = time_alternating(jobs, args.repeats, sync=sync)
    times = {name: [r[name] * 1000 for r in rounds] for name in jobs}
    ratios = {name: [r[name] / r["plain"] for r in rounds] for name in ("scored", "dual")}
    threads = torch.get_num_threads() if handle.device.type == "cpu" else "-"
    print(
        f"model={handle.info.name} device={handle.info.device} T={args.tokens} repeats={args.repeats} "
        f"threads={threads} prompt_tokens={len(prep.retrieval.ids)}"
    )
    for name, ms in times.items():
        print(median_line(name, ms, "ms", width=7))
    print(f"dual_view_ratio={statistics.median(ratios['dual']):.3f}")
    print(f"overhead_ratio={statistics.median(ratios['scored']):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
