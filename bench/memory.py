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

``--batch`` measures batched evaluation instead (issue 17, item 12): for each ``--tokens-list`` value, one fresh
process loads the embedded model, warms it up on one short row (the first forward pages the weights in), then
scores ``--batch-size`` rows of the bundled probe set with :func:`core.engine.score_rows` (``force_length``:
every answer is exactly that long; noise σ from ``--sigmas``, the ``evaluate`` default 0,0.02,0.05,0.1) and
reports the peak RSS of the scoring alone (``VmHWM`` reset before it) above the RSS before it, next to the size
of one path's full-vocabulary logits for the whole batch (rows × tokens × V × 4 bytes); the children run with
``MALLOC_MMAP_THRESHOLD_=65536`` so that freed tensors leave the RSS. With ``--code PATH`` the
child processes import ``core`` from another checkout (e.g. an export of the previous commit) for a
before/after comparison. ``--tiny`` swaps the model for a 2-layer, 64-wide random Llama with the embedded
model's tokenizer and vocabulary (V = 49,152): the logits are as large as the real model's, a step costs next
to nothing, so answers of 1,024 tokens are measurable on a CPU. The last line is ``batch_peaks_mib=<json>``.

    python bench/memory.py --batch [--batch-size 8] [--tokens-list 64,256,1024] [--sigmas 0,0.02,0.05,0.1] [--tiny]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
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


def tiny_real_vocab_handle():
    """The embedded model's tokenizer (V = 49,152) on a 2-layer, 64-wide random Llama: the logits have the real
    model's size, while a generation step costs next to nothing (long answers are measurable on a CPU)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from core.model.loading import embedded_cache_path, ensure_embedded_cache, handle_from_model

    ensure_embedded_cache()
    tokenizer = AutoTokenizer.from_pretrained(embedded_cache_path())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id or tokenizer.eos_token_id
    return handle_from_model(model, tokenizer, name="tiny-real-vocab", source="bench/memory.py")


def batch_child(batch_size: int, tokens: int, sigmas: list[float], tiny: bool = False) -> dict[str, float]:
    """One measurement in this (fresh) process: the peak of scoring ``batch_size`` rows at ``tokens`` tokens."""
    import csv

    from core.engine import score_rows
    from core.io import asset_path

    handle = tiny_real_vocab_handle() if tiny else load_model(device="cpu")
    with asset_path("probes", "probes.csv").open(encoding="utf-8") as fh:
        rows = [(r["query"], r["context"]) for r in csv.DictReader(fh)][:batch_size]
    settings = DualPathSettings(max_new_tokens=tokens, score_window=tokens, force_length=True)
    # warm-up: the first forward pages the weights in (about the model's size); measured from after it
    score_rows(handle, rows[:1], DualPathSettings(max_new_tokens=2, score_window=2), batch_size=1)
    before = _status_mb("VmRSS")
    separate = _reset_peak()
    t0 = time.perf_counter()
    results = score_rows(handle, rows, settings, batch_size=batch_size, noise_sigmas=sigmas)
    seconds = time.perf_counter() - t0
    peak = _status_mb("VmHWM")
    one_path = batch_size * tokens * handle.info.vocab_size * 4 / 2**20
    return {
        "tokens": tokens,
        "rows": len(results),
        "answer_tokens": sum(r.n_tokens for r in results if r is not None),
        "rss_before_mib": round(before, 1),
        "peak_rss_mib": round(peak, 1),
        "peak_above_before_mib": round(peak - before, 1) if separate else float("nan"),
        "one_path_logits_mib": round(one_path, 1),
        "seconds": round(seconds, 1),
    }


def batch_main(args: argparse.Namespace) -> int:
    """Run one child process per ``--tokens-list`` value and print a table of the peaks."""
    # large blocks from mmap, returned to the system when freed: the RSS peak then follows the live tensors
    # rather than what the allocator happens to keep
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    if args.code:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(args.code).resolve()), env.get("PYTHONPATH", "")])
    peaks = {}
    for tokens in [int(t) for t in args.tokens_list.split(",") if t.strip()]:
        cmd = [
            sys.executable,
            __file__,
            "--batch-child",
            "--batch-size",
            str(args.batch_size),
            "--tokens",
            str(tokens),
            "--sigmas",
            args.sigmas,
            "--threads",
            str(args.threads),
            *(["--tiny"] if args.tiny else []),
        ]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            print(f"tokens={tokens}: failed ({done.returncode})\n{done.stderr[-2000:]}")
            continue
        row = json.loads(lines[-1])
        peaks[tokens] = row["peak_above_before_mib"]
        print("  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    print(f"batch_peaks_mib={json.dumps(peaks)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context-tokens", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per answer (default 32)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--batch", action="store_true", help="measure batched evaluation instead (see above)")
    parser.add_argument("--batch-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--tokens-list", default="64,256,1024", help="--batch: new tokens per answer to measure")
    parser.add_argument("--sigmas", default="0,0.02,0.05,0.1", help="--batch: noise σ values ('' for none)")
    parser.add_argument("--code", default=None, help="--batch: import core from this checkout instead")
    parser.add_argument(
        "--tiny", action="store_true", help="--batch: a 2-layer random model with the real vocabulary (fast)"
    )
    args = parser.parse_args()
    set_threads(args.threads)
    if args.batch:
        return batch_main(args)
    if args.batch_child:
        sigmas = [float(x) for x in args.sigmas.split(",") if x.strip()]
        print(json.dumps(batch_child(args.batch_size, args.tokens, sigmas, tiny=args.tiny)))
        return 0
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
