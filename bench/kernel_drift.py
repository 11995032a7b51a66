"""How far float32 model numbers move with the kernels' order of summation: the measurement behind the pinned tests'
tolerances (docs/architecture.md#pinned-numbers).

Every number of ``tests/unit/model/test_trace_readers.py`` (hidden states, attention reductions, KL, Z, CRM, the
audit, RADAR, ablation sources; :func:`compute_pins`) is recomputed

* in float32 under several kernel choices, each in its own process: one and two torch threads, ATen's vector
  kernels forced down to AVX2 and to the portable ``DEFAULT`` ones (``ATEN_CPU_CAPABILITY``), and MKL's
  conditional numerical reproducibility path (``MKL_CBWR=COMPATIBLE``: another sgemm blocking), alone and
  combined — what another x86-64 CPU changes;
* in float64 from the same weights (the model and its inputs cast to double): the "true" value each float32
  run approximates.

For each pinned array it prints its scale (the largest magnitude, ``max |x|``), the largest difference between two
float32 runs (``drift``), the largest float32-to-float64 error, both relative to the scale, and whether the
discrete outputs (token ids) agree; the greedy steps' smallest top-1/top-2 logit margin says how far the drift is
from flipping a token. Nothing is asserted.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/kernel_drift.py            # tiny and embedded (≈ 3 min on 2 cores)
    HF_HUB_OFFLINE=1 .venv/bin/python bench/kernel_drift.py --tiny     # the tiny random model only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "out" / "kernel_drift"

CONFIGS: dict[str, dict[str, str]] = {
    "native, 1 thread": {"OMP_NUM_THREADS": "1"},
    "native, 2 threads": {"OMP_NUM_THREADS": "2"},
    "ATen AVX2": {"OMP_NUM_THREADS": "1", "ATEN_CPU_CAPABILITY": "avx2"},
    "ATen DEFAULT": {"OMP_NUM_THREADS": "1", "ATEN_CPU_CAPABILITY": "default"},
    "MKL CBWR": {"OMP_NUM_THREADS": "1", "MKL_CBWR": "COMPATIBLE"},
    "DEFAULT + CBWR, 2 threads": {"OMP_NUM_THREADS": "2", "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
}
"""Kernel choices, each run in a fresh process (the environment is read when torch loads)."""

DISCRETE = ("ids", "para_ids", "top_ids")
"""Pinned arrays that hold token ids: compared exactly."""


def _handles(embedded: bool, double: bool):
    """The handle the pins are computed on (cast to float64 when ``double``)."""
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if embedded:
        from core.model.loading import handle_from_model, load_model

        handle = load_model(device="cpu")
        if not double:
            return handle
        model = handle.model.double()
        return handle_from_model(model, handle.tokenizer, name=handle.info.name, source="float64 copy")
    from core.model.loading import handle_from_model
    from tests.conftest import make_byte_tokenizer, make_tiny_llama

    tok = make_byte_tokenizer()
    model = make_tiny_llama(len(tok))
    if double:
        model = model.double()
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return handle_from_model(model, tok, name="tiny-random-llama", source="tests/conftest.py")


def worker(path: Path, embedded: bool, double: bool) -> None:
    """Compute the pins in this process and save them (with the greedy margins) to ``path``."""
    sys.path.insert(0, str(ROOT))
    from tests.unit.model.test_trace_readers import compute_pins

    handle = _handles(embedded, double)
    pins = compute_pins(handle, embedded=embedded)
    pins["_margin"] = np.array([greedy_margin(handle, embedded)], np.float64)
    np.savez(path, **pins)


def greedy_margin(handle, embedded: bool) -> float:
    """The smallest gap (logits) between the top-1 and the top-2 token over every discrete choice the pins hold:
    each greedy step of both answers of every pinned row (retrieval answer and free parametric answer, re-scored
    by one teacher-forced pass over prompt + answer) and the RADAR logit lens' arg-max at every layer."""
    import torch

    from core.engine import DualPathSettings, prepare_prompts, run_dual_path
    from core.methods.internals import instrumented_forward
    from core.methods.radar.trace import encode_radar_prompt
    from core.model.lens import lens_logits
    from core.model.parts import model_parts
    from tests.unit.model.test_trace_readers import EMBEDDED_ROWS, RADAR_TEXT, ROWS

    def gaps(logits: torch.Tensor) -> torch.Tensor:
        top = torch.topk(logits.double(), 2, dim=-1).values
        return top[..., 0] - top[..., 1]

    settings = DualPathSettings(max_new_tokens=5, score_window=5)
    smallest = np.inf
    for query, context in EMBEDDED_ROWS if embedded else ROWS:
        res = run_dual_path(handle, query, context, settings)
        prepared = prepare_prompts(handle, query, context, settings)
        for prompt, answer in (
            (list(prepared.retrieval.ids), list(res.answer_token_ids)),
            (list(prepared.parametric.ids), list(res.parametric.token_ids)),
        ):
            if not answer:
                continue
            ids = torch.tensor([prompt + answer])
            logits = handle.forward(input_ids=ids).logits[0, len(prompt) - 1 : -1]
            smallest = min(smallest, float(gaps(logits).min()))
    states = instrumented_forward(handle, encode_radar_prompt(handle, RADAR_TEXT), positions=[-1]).states
    with handle.session():
        param = next(handle.model.parameters())
        lens = lens_logits(model_parts(handle), torch.as_tensor(states[1:, -1]).to(param.dtype))
    return min(smallest, float(gaps(lens).min()))


def _spawn(name: str, env: dict[str, str], embedded: bool, double: bool) -> Path:
    tag = (
        ("embedded" if embedded else "tiny")
        + ("-f64" if double else "")
        + "-"
        + name.replace(" ", "_").replace(",", "")
    )
    path = OUT / f"{tag}.npz"
    cmd = [sys.executable, __file__, "--worker", str(path)] + (["--embedded"] if embedded else [])
    cmd += ["--double"] if double else []
    subprocess.run(cmd, env={**os.environ, **env, "HF_HUB_OFFLINE": "1"}, check=True)
    return path


def _existing(name: str, env: dict[str, str], embedded: bool, double: bool) -> Path:
    """The file an earlier run of :func:`_spawn` wrote (``--reuse``)."""
    tag = (
        ("embedded" if embedded else "tiny")
        + ("-f64" if double else "")
        + "-"
        + name.replace(" ", "_").replace(",", "")
    )
    return OUT / f"{tag}.npz"


def _load(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def report(embedded: bool, reuse: bool = False) -> dict[str, float | list[float]]:
    """Run every configuration and the float64 reference for one model, print the table, and return the pins'
    tolerances built from the measured drift (:func:`tests.unit.model.test_trace_readers.build_tolerances`)."""
    from tests.unit.model.test_trace_readers import DISCRETE, build_tolerances

    spawn = _existing if reuse else _spawn
    runs = {name: _load(spawn(name, env, embedded, False)) for name, env in CONFIGS.items()}
    ref = _load(spawn("native, 1 thread", CONFIGS["native, 1 thread"], embedded, True))
    pins_file = ROOT / "tests" / "unit" / "model" / ("trace_pins_embedded.npz" if embedded else "trace_pins_tiny.npz")
    pinned = _load(pins_file)
    model = "embedded SmolLM2-135M" if embedded else "tiny random Llama"
    margins = {name: float(r.pop("_margin")[0]) for name, r in runs.items()}
    ref.pop("_margin")
    samples = [*runs.values(), pinned]  # the pins' own CPU is one more kernel choice
    print(f"\n## {model}: {len(CONFIGS)} float32 kernel choices and the pins' CPU; float64 reference\n")
    print("| array | max abs | drift f32↔f32 | drift / scale | f32↔f64 / scale | pins↔here / drift here |")
    print("|---|---|---|---|---|---|")
    drift: dict[str, np.ndarray] = {}
    worst = {"drift": 0.0, "f64": 0.0, "pins": 0.0}
    logit_drift = 0.0
    for key in sorted(pinned):
        values = [np.asarray(r[key], np.float64) for r in samples]
        if key.rsplit(".", 1)[-1] in DISCRETE:
            same = all(np.array_equal(v, values[0]) for v in values)
            print(f"| {key} | ids | {'equal' if same else 'DIFFER'} | | | |")
            continue
        drift[key] = np.max([np.abs(a - b) for a in values for b in values], axis=0)
        here = np.max([np.abs(a - b) for a in values[:-1] for b in values[:-1]]) if values[0].size else 0.0
        scale = max(float(np.max(np.abs(pinned[key]))) if pinned[key].size else 0.0, 1e-30)
        top = float(np.max(drift[key])) if drift[key].size else 0.0
        f64 = max(float(np.max(np.abs(v - ref[key]))) if v.size else 0.0 for v in values[:-1])
        if key.startswith(("batch", "audit")) or not np.isfinite(f64):
            f64 = np.nan  # padded passes: transformers' float64 padding mask is -inf, so padded rows are NaN there
        pins = max(float(np.max(np.abs(v - values[-1]))) if v.size else 0.0 for v in values[:-1])
        worst = {
            "drift": max(worst["drift"], top / scale),
            "f64": worst["f64"] if np.isnan(f64) else max(worst["f64"], f64 / scale),
            "pins": max(worst["pins"], pins / here if here > 0 else 0.0),
        }
        if key.endswith("topk_probs_para"):  # δp / p ≈ δ(logit): how far the logits move
            p = np.maximum(np.abs(np.asarray(pinned[key], np.float64)), 1e-3)
            logit_drift = max(logit_drift, float(np.max(drift[key] / p)))
        ratio = f"{pins / here:.1f}" if here > 0 else "—"
        print(f"| {key} | {scale:.3g} | {top:.2e} | {top / scale:.1e} | {f64 / scale:.1e} | {ratio} |")
    print(
        f"\nworst, relative to the array's largest value: f32↔f32 drift {worst['drift']:.1e}, f32↔f64 "
        f"{worst['f64']:.1e} (where float64 is defined: unpadded passes); the pins' CPU differs from this one by up "
        f"to {worst['pins']:.1f}× the drift among this CPU's kernel choices"
    )
    print(
        f"greedy choices: smallest top-1/top-2 logit gap {min(margins.values()):.4f}; logits move by about "
        f"{logit_drift:.1e} (top-k probabilities' relative drift): token ids are compared exactly"
    )
    return build_tolerances(drift, pinned)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="only the tiny random model")
    parser.add_argument("--write", action="store_true", help="write the pins' tolerances (trace_pins_tolerance.json)")
    parser.add_argument("--reuse", action="store_true", help="read the runs of an earlier call from out/kernel_drift")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--embedded", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--double", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.embedded, args.double)
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    tolerances = {"tiny": report(embedded=False, reuse=args.reuse)}
    if not args.tiny:
        tolerances["embedded"] = report(embedded=True, reuse=args.reuse)
    if args.write:
        from tests.unit.model.test_trace_readers import FLOOR_ULPS, SAFETY, TOLERANCES

        previous = json.loads(TOLERANCES.read_text(encoding="utf-8")) if TOLERANCES.is_file() else {}
        merged = previous | tolerances
        lines = [
            f"  {json.dumps(key)}: {json.dumps(value)}"
            for key, value in [("safety", SAFETY), ("floor_ulps", FLOOR_ULPS)]
        ]
        for model, table in merged.items():
            if isinstance(table, dict):
                rows = ",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in table.items())
                lines.append(f"  {json.dumps(model)}: {{\n{rows}\n  }}")
        TOLERANCES.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")
        print(f"\nwrote {TOLERANCES.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
