"""Peak memory and time of each command on one model, in one process (the model loaded once).

For a model with a large vocabulary (Gemma 3 270M: V = 262,144) the full ``positions × V`` (or ``layers ×
positions × V``) float32 tensors of a lens, a KL or a context score would be hundreds of megabytes; this prints,
for each ``python -m core`` command run in-process on the same loaded handle, the peak resident set size
(``VmHWM`` of ``/proc/self/status``, reset before each command by writing ``5`` to ``/proc/self/clear_refs``), the
RSS before it and the seconds it took. No assertion: the figures go into docs/models.md.

    python bench/model_memory.py [--model gemma3-270m] [--tokens 16] [--context-words 200] [--only run,probe]

The model load itself is measured first (its own peak; with ``--fresh`` the de-quantized cache is not touched,
so the first load's conversion is measured only when the cache is empty). The last line is
``peaks_mib=<json>``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

QUERY = "Which city is the capital of Veltria?"
SENTENCE = (
    "The capital of Veltria is Marrowgate, a harbour city founded by salt traders in 1412, whose old town lies "
    "between two rivers and whose council meets in the tower by the fish market."
)


def _status(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def commands(model: str, tokens: int, context: str, csv_path: str, out: str) -> dict[str, list[str]]:
    common = ["--model", model, "--max-new-tokens", str(tokens)]
    qc = ["--query", QUERY, "--context", context]
    return {
        "run": ["run", *qc, "--json", *common],
        "run --all-detectors": ["run", *qc, "--json", "--all-detectors", *common],
        "probe": ["probe", *qc, "--json", *common],
        "ablate": ["ablate", *qc, "--json", "--layers", "middle", "--seeds", "1", *common],
        "ablate --patch": ["ablate", *qc, "--json", "--layers", "middle", "--patch", *common],
        "evaluate (4 rows)": ["evaluate", csv_path, "--out", out, "--bootstrap", "100", "--sigmas", "0", *common],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--tokens", type=int, default=16, help="--max-new-tokens of every command but `run`")
    parser.add_argument("--run-tokens", type=int, default=64, help="--max-new-tokens of `run` (its default: 64)")
    parser.add_argument("--context-words", type=int, default=200, help="about how many words the context has")
    parser.add_argument("--only", default="", help="comma-separated command names (default: all)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import core.cli.common
    from core.cli import main as cli_main
    from core.model.loading import load_model

    words = SENTENCE.split()
    context = " ".join(words[i % len(words)] for i in range(args.context_words))
    _reset_peak()
    start = time.perf_counter()
    handle = load_model(args.model, device="cpu")
    load_s = time.perf_counter() - start
    peaks = {"load": round(_status("VmHWM"))}
    print(f"load: {load_s:.1f} s, peak {peaks['load']} MiB, rss {_status('VmRSS'):.0f} MiB ({handle.info.name})")
    core.cli.common.load_model = lambda *a, **k: handle  # the one seam (CONTRIBUTING: tests patch it too)
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "rows.csv"
        csv_path.write_text(
            "query,context,label\n"
            f'"{QUERY}","{SENTENCE}",grounded\n'
            '"What is the capital of France?","Paris is the capital of France.",memorized\n'
            '"Who wrote Hamlet?","Hamlet was written by William Shakespeare.",memorized\n'
            '"Where does the Veltrian council meet?","The council of Veltria meets in the harbour tower.",grounded\n'
        )
        wanted = {n.strip() for n in args.only.split(",") if n.strip()}
        runs = commands(args.model, args.tokens, context, str(csv_path), str(Path(tmp) / "eval.json"))
        for name, argv in runs.items():
            if wanted and name.split()[0] not in wanted and name not in wanted:
                continue
            if name == "run":
                argv = [*argv[:-1], str(args.run_tokens)]
            before = _status("VmRSS")
            _reset_peak()
            start = time.perf_counter()
            sink = io.StringIO()
            with contextlib.redirect_stdout(sink):
                try:
                    rc = cli_main(argv)
                except SystemExit as exc:
                    rc = exc.code
            seconds = time.perf_counter() - start
            peaks[name] = round(_status("VmHWM"))
            print(f"{name}: rc {rc}, {seconds:.1f} s, peak {peaks[name]} MiB (rss before {before:.0f} MiB)", flush=True)
        if not wanted or "detectors" in wanted:
            peaks.update(each_detector(handle, context, args.tokens))
    print("peaks_mib=" + json.dumps(peaks))


def each_detector(handle, context: str, tokens: int) -> dict[str, int]:
    """Every registered detector scored one by one on one recorded run (as ``detect`` does, but a detector that
    fails is reported, not fatal): its seconds, peak RSS and score or error."""
    from core.cli import build_parser
    from core.cli.commands.detect import sma_settings_from_args
    from core.detectors import DetectorInput, available, get, keys
    from core.engine import DualPathSettings, run_dual_path
    from core.methods.selfcritique import SelfCritiqueSettings

    settings = DualPathSettings(max_new_tokens=tokens, score_window=tokens)
    argv = ["detect", "--query", QUERY, "--context", context, "--sma-samples", "8", "--sma-max-new-tokens", str(tokens)]
    args = build_parser().parse_args(argv)
    _reset_peak()
    result = run_dual_path(handle, QUERY, context, settings, record=True)
    peaks = {"detectors: recorded run": round(_status("VmHWM"))}
    inp = DetectorInput(
        handle=handle,
        result=result,
        settings=settings,
        cache={
            keys.SELFCRITIQUE_SETTINGS: SelfCritiqueSettings(max_new_tokens=tokens),
            keys.SMA_SETTINGS: sma_settings_from_args(args),
        },
    )
    for name in available():
        _reset_peak()
        start = time.perf_counter()
        try:
            outcome = f"score {float(get(name).score(inp)):.4g}"
        except Exception as exc:  # noqa: BLE001 - reported, the next detector runs
            outcome = f"{type(exc).__name__}: {str(exc)[:160]}"
        peaks[f"detector {name}"] = round(_status("VmHWM"))
        print(f"detector {name}: {time.perf_counter() - start:.1f} s, peak {peaks[f'detector {name}']} MiB, {outcome}")
    return peaks
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
