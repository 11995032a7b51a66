"""Peak memory of a full internals analysis of a 1,000-token context on the embedded model.

Steps, in one fresh process (so the peak belongs to this analysis alone):
  1. load the embedded SmolLM2-135M-Instruct (fp32, CPU);
  2. ``run_dual_path`` on a ~1,000-token context (both answers, ``--tokens`` new tokens each);
  3. ``core.methods.internals.analyze`` (one instrumented forward per path: hidden states, attention entropy and
     segment mass reduced on the fly, logit lens of both paths), the CRM report with the bundled basis;
  4. one head's full attention pattern (what the Attention page keeps when a cell is clicked).

Prints the resident set size after each step and the peaks (``VmHWM`` of ``/proc/self/status``, which is
what ``ru_maxrss`` reports; it is reset after step 2 so the analysis' own peak is reported too), and, for
scale, the size a full layers × heads × T × T attention stack would have needed. The last line is
``peak_rss_mb=<MiB>``. No assertion: the figure goes into the README.

    python bench/memory.py [--context-tokens 1000] [--tokens 32]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch
from _common import set_threads

from core.engine import DualPathSettings, run_dual_path
from core.methods.crm import crm_report, load_basis, load_calibration_prompts
from core.methods.internals import analyze, attention_pattern, path_sequence
from core.model.loading import load_model

QUERY = "According to the passage, what color are the trams in Lisk?"


def _status_mb(field: str) -> float:
    """A ``/proc/self/status`` memory field (kB) in MiB; falls back to ``ru_maxrss`` for the peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS counter (``VmHWM``) to the current RSS (Linux ≥ 4.0); False if unsupported."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def build_context(handle, n_tokens: int) -> str:
    """About ``n_tokens`` tokens of encyclopaedia-style text: the bundled grounded passages, cycled and cut."""
    passages = [p.context for p in load_calibration_prompts() if p.label == "grounded"]
    text, i = "", 0
    while len(handle.tokenizer(text, add_special_tokens=False)["input_ids"]) < n_tokens + 20:
        text += passages[i % len(passages)] + " "
        i += 1
    ids = handle.tokenizer(text, add_special_tokens=False)["input_ids"][:n_tokens]
    return handle.tokenizer.decode(ids).strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context-tokens", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per answer (default 32)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    args = parser.parse_args()
    set_threads(args.threads)
    figures: dict[str, float] = {"start_rss_mb": _status_mb("VmRSS")}

    t0 = time.perf_counter()
    handle = load_model()
    figures["after_model_load_rss_mb"] = _status_mb("VmRSS")
    context = build_context(handle, args.context_tokens)
    context_tokens = len(handle.tokenizer(context, add_special_tokens=False)["input_ids"])

    settings = DualPathSettings(max_new_tokens=args.tokens, score_window=args.tokens, force_length=True)
    result = run_dual_path(handle, QUERY, context, settings)
    figures["after_dual_path_rss_mb"] = _status_mb("VmRSS")
    figures["peak_through_dual_path_rss_mb"] = _status_mb("VmHWM")
    separate = _reset_peak()
    t1 = time.perf_counter()

    internals = analyze(handle, result)
    basis = load_basis(handle, result.template)
    report = crm_report(basis, internals.displacement)
    summary = internals.summary()
    t2 = time.perf_counter()
    figures["after_analysis_rss_mb"] = _status_mb("VmRSS")

    ids, _, _ = path_sequence(handle, result, "retrieval")
    pattern = attention_pattern(handle, ids, 12, 4)
    figures["after_head_pattern_rss_mb"] = _status_mb("VmRSS")
    if separate:
        figures["peak_during_analysis_rss_mb"] = _status_mb("VmHWM")
    figures["peak_rss_mb"] = max(figures["peak_through_dual_path_rss_mb"], _status_mb("VmHWM"))

    T = len(ids)
    info = handle.info
    full_stack_mb = info.n_layers * info.n_heads * T * T * 4 / 2**20
    kept_mb = (
        internals.retrieval.entropy.nbytes
        + internals.parametric.entropy.nbytes
        + internals.retrieval.mass.nbytes
        + internals.parametric.mass.nbytes
        + pattern.nbytes
    ) / 2**20
    out = {
        "model": info.name,
        "context_tokens": context_tokens,
        "retrieval_sequence_tokens": T,
        "answer_tokens": result.n_tokens,
        "dual_path_s": round(t1 - t0, 2),
        "analysis_s": round(t2 - t1, 2),
        "crm_available": report["available"],
        "json_summary_kb": round(len(json.dumps(summary)) / 1024, 1),
        "attention_kept_mb": round(kept_mb, 2),
        "full_attention_stack_would_be_mb": round(full_stack_mb, 1),
        **{k: round(v, 1) for k, v in figures.items()},
        "torch_threads": torch.get_num_threads(),
    }
    for key, value in out.items():
        print(f"{key:34s} {value}")
    print(f"under_3gb={out['peak_rss_mb'] < 3 * 1024}")
    print(f"peak_rss_mb={out['peak_rss_mb']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
