"""Pins of every number read off a model's internals, recorded before the readers moved onto one trace.

``trace_pins_tiny.npz`` (the tiny random Llama of ``tests/conftest.py``) and ``trace_pins_embedded.npz`` (the
embedded model, CPU fp32) were written by :func:`compute_pins` with the code as it was before
:mod:`core.model.trace` existed (each reader with its own hooks or ``output_hidden_states``). The tests run the
same calls today and must reproduce every array: hidden states, attention entropy / segment mass / one head's
pattern, CRM's displacement and calibration inputs, the audit's capture, RADAR's trace and 37 features, the
ablation patch sources, and the engine's per-token KL, Z and noisy Z_σ (one row streamed, many batched).

How close is "reproduce" (docs/architecture.md#pinned-numbers): float32 results move with the order in which
the CPU's kernels sum (vector width, MKL's blocking, the thread count), so the pins were written on one CPU and
must hold on every x86-64 CPU. ``trace_pins_tolerance.json`` holds each array's tolerance, measured by
``bench/kernel_drift.py --write``: :data:`SAFETY` × the largest difference seen between the float32 results of
six kernel choices (1 and 2 threads, ATen's AVX-512 / AVX2 / portable kernels, MKL's default and CBWR sgemm) and
the pins' own CPU — per hidden-state vector for the residual-stream arrays (their scale spans 0.1 to 2.5e4
across layers), per element for the few heterogeneous vectors (:data:`PER_ELEMENT`), else per array — and never
below :data:`FLOOR_ULPS` float32 ulps of the values' magnitude. Token ids are compared exactly: the smallest
top-1/top-2 logit gap of any pinned discrete choice (each greedy step of both answers, RADAR's logit-lens arg-max
per layer: 0.0015 tiny, 0.019 embedded) is 550× (embedded) to 1,500× (tiny) the logits' float32 drift.

Regenerate only on purpose (it overwrites the pins): ``python tests/unit/model/test_trace_readers.py [--embedded]``,
then ``bench/kernel_drift.py --write`` for their tolerances.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).resolve().parent
TINY_PINS = HERE / "trace_pins_tiny.npz"
EMBEDDED_PINS = HERE / "trace_pins_embedded.npz"
TOLERANCES = HERE / "trace_pins_tolerance.json"

SAFETY = 10.0
"""Tolerance = SAFETY × the largest float32 difference measured between kernel choices (the pins' CPU differed
from the measuring one by up to 3.3× the drift among its own six kernel choices)."""
FLOOR_ULPS = 8
"""The smallest tolerance, in float32 ulps of the values' magnitude (an array all six kernel choices agreed on)."""
DISCRETE = ("ids", "para_ids", "top_ids")
"""Arrays of token ids (the last part of the key): compared exactly."""
PER_VECTOR = ("internals.states", "displacement", "calibration_d", "ablation.")
"""Residual-stream arrays (last axis: the hidden size): one tolerance per vector, from that vector's own drift."""
PER_ELEMENT = ("radar.features", ".first", "crm.detectors")
"""Vectors of unrelated quantities (37 features; KL, entropies and top ids of the audit; 3 detectors): one tolerance
per element."""

pytestmark = pytest.mark.usefixtures("one_thread")

ROWS = [
    ("Who wrote the note?", "The note was written by Ada on Tuesday."),
    ("Where is the tower?", "The tower stands in Quillmere, by the old harbour."),
    ("How many moons?", "Three."),
]
EMBEDDED_ROWS = [
    ("What is the capital of France?", "France's capital is Paris."),
    ("Who founded Marrowgate?", "Marrowgate was founded in 1412 by salt traders."),
]
RADAR_TEXT = "The capital of France is"


def _run_arrays(prefix: str, res) -> dict[str, np.ndarray]:
    return {
        f"{prefix}.z": np.array([res.repcs_score], np.float64),
        f"{prefix}.token_kl": np.asarray(res.token_kl, np.float64),
        f"{prefix}.ids": np.asarray(res.answer_token_ids, np.float64),
        f"{prefix}.entropy_rag": np.asarray(res.retrieval.entropy, np.float64),
        f"{prefix}.entropy_para": np.asarray(res.parametric.entropy, np.float64),
        f"{prefix}.topk_probs_para": np.asarray(res.parametric.topk_probs, np.float64),
        f"{prefix}.para_ids": np.asarray(res.parametric.token_ids, np.float64),
    }


def compute_pins(handle, *, embedded: bool = False) -> dict[str, np.ndarray]:
    """Every pinned number for ``handle``, through the public entry points of each reader."""
    from core.audit.forward import capture_pairs
    from core.engine import DualPathSettings, prepare_prompts, run_dual_path, score_batch
    from core.methods.ablation import last_token_states
    from core.methods.crm.calibration import calibration_displacements
    from core.methods.crm.prompts import CalibrationPrompt
    from core.methods.internals import displacement, instrumented_forward
    from core.methods.radar.trace import extract_features

    rows = EMBEDDED_ROWS if embedded else ROWS
    out: dict[str, np.ndarray] = {}
    settings = DualPathSettings(max_new_tokens=5, score_window=5)
    prepared = [prepare_prompts(handle, q, c, settings) for q, c in rows]

    # internals: hidden states, attention entropy, segment mass, one head's pattern
    ids = list(prepared[0].retrieval.ids)
    seg = [i % 3 for i in range(len(ids))]
    cap = instrumented_forward(
        handle, ids, positions=[0, 3, -1], attention=True, rows=[-1, -2], segment_ids=seg, n_segments=3, head=(1, 1)
    )
    out["internals.states"] = cap.states
    out["internals.entropy"] = cap.entropy
    out["internals.mass"] = cap.mass
    out["internals.pattern"] = cap.pattern

    # the engine: one row streamed (free parametric answer), many rows batched with noisy Z
    res = run_dual_path(handle, *rows[0], settings)
    out.update(_run_arrays("run", res))
    batch = score_batch(handle, rows, settings, free_parametric=True, noise_sigmas=(0.0, 0.5), noise_seed=7)
    for i, r in enumerate(batch):
        out.update(_run_arrays(f"batch{i}", r))
        out[f"batch{i}.noisy_z"] = np.asarray(r.extras["noisy_repcs"]["z"], np.float64)

    # CRM: the displacement of a result, the calibration inputs
    out["crm.displacement"] = displacement(handle, res)
    prompts = [CalibrationPrompt(id=str(i), label="grounded", query=q, context=c) for i, (q, c) in enumerate(rows)]
    d, kl = calibration_displacements(handle, prompts)
    out["crm.calibration_d"] = d
    out["crm.calibration_kl"] = kl

    # the audit: one left-padded pass per path (rows of different lengths)
    for i, c in enumerate(capture_pairs(handle, prepared)):
        out[f"audit{i}.displacement"] = c.displacement
        out[f"audit{i}.first"] = np.array(
            [c.first_token_kl, c.entropy_retrieval, c.entropy_parametric, c.top_retrieval, c.top_parametric],
            np.float64,
        )

    # ablation: patch sources (decoder-layer outputs at the last token)
    states = last_token_states(handle, ids, [0, handle.info.n_layers - 1])
    for layer, h in states.items():
        out[f"ablation.layer{layer}"] = h.float().cpu().numpy()

    # RADAR: the trace and the 37 features
    features, trace = extract_features(handle, RADAR_TEXT)
    out["radar.features"] = np.array(list(features.values()), np.float64)
    for name in ("confidence", "entropy", "head_entropy", "layer_variance", "layer_norm", "layer_rank"):
        out[f"radar.{name}"] = np.asarray(getattr(trace, name), np.float64)
    out["radar.top_ids"] = np.asarray(trace.top_token_ids, np.float64)
    if embedded:  # the CRM detectors on the bundled basis
        from core.detectors import DetectorInput, resolve

        inp = DetectorInput(handle=handle, result=res, settings=settings)
        out["crm.detectors"] = np.array([d.score(inp) for d in resolve(["crm_lts", "crm_l2", "crm_lr"])], np.float64)
    return {k: np.asarray(v) for k, v in out.items()}


def tolerance_shape(key: str, pinned: np.ndarray) -> tuple[int, ...]:
    """The shape of ``key``'s tolerance, broadcast against its pinned array: ``()`` (one per array), the array's
    shape with the last axis 1 (one per hidden-state vector) or the array's shape (one per element)."""
    if pinned.ndim >= 1 and any(part in key for part in PER_VECTOR):
        return (*pinned.shape[:-1], 1)
    if any(part in key for part in PER_ELEMENT):
        return pinned.shape
    return ()


def build_tolerances(drift: dict[str, np.ndarray], pins: dict[str, np.ndarray]) -> dict[str, float | list[float]]:
    """Each pinned array's tolerance from its measured drift (same shape as the pin: the largest difference of
    each element between float32 runs): :data:`SAFETY` × the drift's maximum over the tolerance's reach
    (:func:`tolerance_shape`), at least :data:`FLOOR_ULPS` ulps of the values' largest magnitude there; 0 for
    token ids."""
    out: dict[str, float | list[float]] = {}
    for key, pinned in sorted(pins.items()):
        if key.rsplit(".", 1)[-1] in DISCRETE or pinned.size == 0:
            out[key] = 0.0
            continue
        shape = tolerance_shape(key, pinned)
        axes = tuple(i for i in range(pinned.ndim) if i >= len(shape) or shape[i] == 1)
        d = np.max(np.abs(drift[key]), axis=axes, keepdims=True) if axes else np.abs(drift[key])
        scale = np.max(np.abs(pinned), axis=axes, keepdims=True) if axes else np.abs(pinned)
        floor = FLOOR_ULPS * np.spacing(scale.astype(np.float32)).astype(np.float64)
        tol = np.where(scale > 0, np.maximum(SAFETY * d, floor), 0.0).reshape(shape)  # all-zero: exact everywhere
        out[key] = float(f"{float(tol):.3g}") if tol.ndim == 0 else [float(f"{t:.3g}") for t in tol.ravel()]
    return out


def _check(got: dict[str, np.ndarray], path: Path, model: str) -> None:
    with np.load(path, allow_pickle=False) as stored:
        expected = {k: stored[k] for k in stored.files}
    tolerances = json.loads(TOLERANCES.read_text(encoding="utf-8"))[model]
    assert sorted(got) == sorted(expected) == sorted(tolerances)
    for key, value in expected.items():
        if key.rsplit(".", 1)[-1] in DISCRETE:
            np.testing.assert_array_equal(got[key], value, err_msg=key)
            continue
        assert np.shape(got[key]) == value.shape, key
        tol = np.broadcast_to(np.asarray(tolerances[key], np.float64).reshape(tolerance_shape(key, value)), value.shape)
        diff = np.abs(np.asarray(got[key], np.float64) - value)
        inside = diff <= tol  # a NaN is outside
        if not inside.all():
            beyond = np.where(inside, -np.inf, np.nan_to_num(diff - tol, nan=np.inf))
            at = tuple(int(i) for i in np.unravel_index(int(np.argmax(beyond)), diff.shape))
            pytest.fail(
                f"{key}: {int(np.sum(~inside))} of {diff.size} values beyond their tolerance; worst at {at}: "
                f"got {got[key][at]!r}, pinned {value[at]!r}, tolerance {tol[at]:.3g}"
            )


def test_tiny_model_numbers_are_unchanged(tiny_handle) -> None:
    _check(compute_pins(tiny_handle), TINY_PINS, "tiny")


@pytest.mark.slow
def test_embedded_model_numbers_are_unchanged(embedded_handle) -> None:
    _check(compute_pins(embedded_handle, embedded=True), EMBEDDED_PINS, "embedded")


if __name__ == "__main__":  # pragma: no cover - regenerates the pins (on purpose only)
    sys.path.insert(0, str(HERE.parents[2]))
    torch.set_num_threads(1)
    if "--embedded" in sys.argv:
        from core.model.loading import load_model

        np.savez(EMBEDDED_PINS, **compute_pins(load_model(device="cpu"), embedded=True))
    else:
        from core.model.loading import handle_from_model
        from tests.conftest import make_byte_tokenizer, make_tiny_llama

        tok = make_byte_tokenizer()
        model = make_tiny_llama(len(tok))
        model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
        handle = handle_from_model(model, tok, name="tiny-random-llama", source="tests/conftest.py")
        np.savez(TINY_PINS, **compute_pins(handle))
