"""The family matrix: every method on a tiny random model of every decoder family in core.model.families.

Each family's model (2 layers, hidden size 32, its quirks switched on: ``tests/families.py``) is saved once per
session as safetensors with a byte-level tokenizer and loaded through :func:`core.model.loading.load_model`,
the ``--model FOLDER`` path a user takes. On each family the tests check the invariants that catch a wrong
locator or a wrong hook: the logit lens of the last layer is the model's own distribution (final norm, logit
scale and soft-capping included); hidden-state row ℓ + 1 is transformers' ``hidden_states[ℓ + 1]``; attention
rows sum to 1 and the reductions equal transformers' attentions; teacher forcing reproduces the generation's
logits; ε = 0 noise and patching a layer with its own activations change nothing (bit-identical); batched and
single-row scores agree; no hook is left behind. Then every method runs on each family: the dual path, the
internals analysis, CRM LTS, RADAR, SMA, the audit service's forward and ``evaluate``. What a family cannot do
is a stated refusal, checked here against the model itself.

Issue 24's two lenses (Lookback Lens, ReDeEP) run on every family (:func:`test_lookback_lens`,
:func:`test_redeep`); ReDeEP's PKS needs the ``mlp_split`` view, which parallel-residual families and OPT refuse
(:func:`test_stated_refusals_match_the_model`), and its OV score refuses fused QKV layouts other than GPT-2's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.engine import DualPathSettings, generate_greedy, prepare_prompts, run_dual_path, teacher_forced_logits
from core.engine.batch import score_batch
from core.model import families
from core.model.families import FAMILIES, support
from core.model.lens import lens_log_probs, lens_logits
from core.model.parts import model_parts
from tests.families import FAMILY_CONFIGS, NO_CHAT_TEMPLATE, VARIANTS

pytestmark = pytest.mark.usefixtures("one_thread")


Q, C = "Where is the tower?", "The tower stands in Quillmere, by the river."
ROWS = [(Q, C), ("Who keeps the bees?", "Old Mara keeps the bees behind the chapel.")]
SETTINGS = DualPathSettings(max_new_tokens=4, score_window=4, top_k=3)
TEXT = "The tower stands in Quillmere, by the river. Where is it?"


def _ids(handle, text: str = TEXT) -> list[int]:
    return list(handle.tokenizer(text, add_special_tokens=False)["input_ids"])


def _hf(handle, ids, **kw):
    with torch.inference_mode():
        return handle.model(input_ids=torch.tensor([ids]), use_cache=False, **kw)


# ----------------------------------------------------------------------------------------------------------
# The table itself


def test_the_table_covers_the_matrix_and_the_docs_render_it():
    assert len(FAMILIES) >= 14
    assert set(FAMILY_CONFIGS) == set(FAMILIES) | set(VARIANTS), "every family of the table has a tiny model"
    assert {family for family, _ in VARIANTS.values()} <= set(FAMILIES)
    from core.io import REPO_ROOT

    doc = (REPO_ROOT / "docs" / "families.md").read_text(encoding="utf-8")
    assert families.markdown_table() in doc, "docs/families.md is stale: paste families.markdown_table()"
    caption = families.picker_caption()
    assert all(f.name in caption for f in FAMILIES.values())


def test_stated_refusals_match_the_model(fam):
    key, handle = fam
    family_key, quirks = VARIANTS.get(key, (key, None))
    family = FAMILIES[family_key]
    found = support(handle.model, handle.tokenizer)
    assert found.family is family
    assert set(quirks or family.quirks) <= found.quirks, f"{key}: the tiny model lacks a quirk of the table"
    # a refusal of the table is a refusal of the model, and the mlp split is refused exactly where the layers
    # add attention and MLP to one input or have no MLP module
    assert set(family.refusals) <= set(found.unavailable)
    inline = any(hasattr(layer, "fc1") for layer in model_parts(handle).layers)  # OPT: the MLP's linears in the layer
    assert ("mlp_split" in found.unavailable) == (families.PARALLEL in found.quirks or inline), key
    assert ("chat_template" in found.unavailable) == (key in NO_CHAT_TEMPLATE)
    for line in found.lines():
        assert "\n" not in line and "is unavailable:" in line
    assert found.summary().startswith(family.name)


def test_a_tokenizer_without_chat_template_refuses_it_in_one_line_and_auto_works(fam):
    key, handle = fam
    if key not in NO_CHAT_TEMPLATE:
        assert handle.info.has_chat_template
        assert prepare_prompts(handle, Q, C, DualPathSettings(template="chat")).retrieval.ids
        return
    with pytest.raises(ValueError, match="no chat template") as err:
        prepare_prompts(handle, Q, C, DualPathSettings(template="chat"))
    assert "\n" not in str(err.value)
    assert prepare_prompts(handle, Q, C, DualPathSettings(template="auto")).template_key == "A"


# ----------------------------------------------------------------------------------------------------------
# Locator, hooks and lens


def test_hidden_state_rows_and_the_last_layer_lens(fam):
    from core.methods.internals.forward import layer_states

    key, handle = fam
    parts = model_parts(handle)
    assert parts.n_layers == handle.info.n_layers == 2
    ids = _ids(handle)
    T, L = len(ids), parts.n_layers
    ours = layer_states(handle, ids, positions=list(range(T)))  # (L + 1, T, d)
    out = _hf(handle, ids, output_hidden_states=True)
    hf = [h[0].numpy() for h in out.hidden_states]
    for row in range(L):  # 0 = embeddings, ℓ + 1 = output of layer ℓ
        np.testing.assert_allclose(ours[row], hf[row], rtol=0, atol=1e-5, err_msg=f"{key} row {row}")
    with torch.inference_mode():
        normed = parts.final_norm(torch.from_numpy(ours[L])).numpy()
        lens = lens_logits(parts, torch.from_numpy(ours[L]))
    # transformers' last row is the normed state for most families, the raw one for a few: ours is raw
    last_ok = np.allclose(hf[L], normed, atol=1e-5) or np.allclose(hf[L], ours[L], atol=1e-5)
    assert last_ok, f"{key}: the last hidden-state row is neither the raw nor the normed output of the last layer"
    logits = out.logits[0]
    np.testing.assert_allclose(lens.numpy(), logits.numpy(), rtol=0, atol=1e-4, err_msg=key)
    logp = lens_log_probs(handle, ours[L]).numpy()
    np.testing.assert_allclose(logp, torch.log_softmax(logits.double(), -1).numpy(), rtol=0, atol=1e-4)
    # without the family's logit transform the lens would be wrong wherever the family has one
    if parts.logit_softcap is not None or parts.logit_scale != 1.0:
        with torch.inference_mode():
            plain = parts.unembed(parts.final_norm(torch.from_numpy(ours[L]))).numpy()
        assert np.abs(plain - logits.numpy()).max() > 1e-2, f"{key}: the tiny model does not exercise the transform"


def test_attention_reductions_rows_and_one_head(fam):
    from core.methods.internals.forward import instrumented_forward
    from core.methods.internals.segments import SEGMENTS

    key, handle = fam
    ids = _ids(handle)
    T = len(ids)
    segments = (np.arange(T) * len(SEGMENTS) // T).tolist()
    rows = [3, T // 2, T - 1]
    cap = instrumented_forward(
        handle, ids, positions=rows, attention=True, rows=rows, segment_ids=segments, head=(1, 1)
    )
    A = np.stack([a[0].double().numpy() for a in _hf(handle, ids, output_attentions=True).attentions])  # (L,H,T,T)
    assert A.shape[1] == handle.info.n_heads
    np.testing.assert_allclose(A.sum(-1), 1.0, atol=1e-5, err_msg=f"{key}: attention rows sum to 1")
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(A > 0, A * np.log(A), 0.0).sum(-1)
    np.testing.assert_allclose(cap.entropy, entropy, rtol=1e-4, atol=1e-5, err_msg=key)
    np.testing.assert_allclose(cap.mass.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(cap.pattern, A[1, 1], atol=1e-6)
    np.testing.assert_allclose(cap.pattern.sum(-1), 1.0, atol=1e-5)
    assert np.all(np.triu(cap.pattern, k=1) == 0), f"{key}: causal"


# ----------------------------------------------------------------------------------------------------------
# The dual path


def test_dual_path_and_teacher_forcing_reproduce_the_generation(fam):
    key, handle = fam
    result = run_dual_path(handle, Q, C, SETTINGS)
    assert result.n_tokens >= 1 and np.isfinite(result.repcs_score)
    assert np.all(result.token_kl >= -1e-6)
    prep = prepare_prompts(handle, Q, C, SETTINGS)
    ((answer, logits, _),) = generate_greedy(handle, [prep.retrieval.ids], SETTINGS)
    assert answer == result.answer_token_ids
    forced = teacher_forced_logits(handle, prep.retrieval.ids, answer)
    np.testing.assert_allclose(forced.float().numpy(), logits.float().numpy(), rtol=0, atol=1e-4, err_msg=key)
    # the retrieval path's answer log-probs are those of the generation
    lp = torch.log_softmax(logits.double(), -1)[torch.arange(len(answer)), torch.tensor(answer)].numpy()
    np.testing.assert_allclose(result.retrieval.logprob, lp, atol=1e-4)


def test_batched_and_single_row_scores_agree(fam):
    key, handle = fam
    batched = score_batch(handle, ROWS, SETTINGS)
    for (q, c), row in zip(ROWS, batched, strict=True):
        single = run_dual_path(handle, q, c, SETTINGS)
        assert row.answer_token_ids == single.answer_token_ids, key
        np.testing.assert_allclose(row.token_kl, single.token_kl, rtol=1e-3, atol=1e-4, err_msg=key)
        np.testing.assert_allclose(row.parametric.logprob, single.parametric.logprob, atol=1e-4)


# ----------------------------------------------------------------------------------------------------------
# Ablations


def _identical(a, b) -> bool:
    return (
        a.answer_token_ids == b.answer_token_ids
        and np.array_equal(a.token_kl, b.token_kl)
        and np.array_equal(a.retrieval.logprob, b.retrieval.logprob)
        and np.array_equal(a.parametric.logprob, b.parametric.logprob)
    )


def test_zero_noise_and_self_patching_change_nothing(fam):
    from core.methods.ablation import activation_patching, noise_injection

    key, handle = fam
    clean = run_dual_path(handle, Q, C, SETTINGS)
    layers = list(range(handle.info.n_layers))
    with noise_injection(handle, layers, 0.0, seed=3) as active:
        zero = run_dual_path(handle, Q, C, SETTINGS)
    assert active.stats.noised_forwards, f"{key}: the noise hooks ran"
    assert _identical(clean, zero), f"{key}: ε = 0 changed the run"
    prep = prepare_prompts(handle, Q, C, SETTINGS)
    for layer in layers:
        with activation_patching(handle, [layer], prep.retrieval.ids, prep.retrieval.ids) as active:
            patched = run_dual_path(handle, Q, C, SETTINGS)
        # one site per forward over the whole prompt: the prefill (MPT's generate re-runs the whole sequence at
        # every step in the pinned transformers — no KV cache — so each step patches the same position again)
        assert active.stats.patched_sites >= 1, key
        assert _identical(clean, patched), f"{key}: patching layer {layer} with its own state changed the run"
    with noise_injection(handle, layers, 1.0, seed=3):
        noisy = run_dual_path(handle, Q, C, SETTINGS)
    assert not _identical(clean, noisy), f"{key}: ε = 1 noise did nothing (the hooks miss the residual stream)"


# ----------------------------------------------------------------------------------------------------------
# The methods on top


def test_internals_lens_and_crm_lts(fam):
    from core.methods import crm
    from core.methods.crm.calibration import calibration_displacements
    from core.methods.crm.prompts import load_calibration_prompts
    from core.methods.internals.analysis import analyze

    key, handle = fam
    result = run_dual_path(handle, Q, C, SETTINGS)
    internals = analyze(handle, result, top_k=3)
    L = handle.info.n_layers
    # the lens of the last row at the last prompt token is the model's first-token distribution, on both paths
    assert internals.lens.retrieval.target_logprob[L, 0] == pytest.approx(result.retrieval.logprob[0], abs=1e-4)
    assert internals.lens.parametric.target_logprob[L, 0] == pytest.approx(result.parametric.logprob[0], abs=1e-4)
    assert internals.retrieval.entropy.shape[:2] == (L, handle.info.n_heads)
    prompts = load_calibration_prompts()
    chosen = [p for p in prompts if p.label == "memorized"][:3] + [p for p in prompts if p.label != "memorized"][:3]
    D, lens_kl = calibration_displacements(handle, chosen)
    labels = [1 if p.label == "memorized" else 0 for p in chosen]
    basis = crm.fit_basis(D, labels, lens_kl=lens_kl, model=handle.info.name, template="chat", classifier=False)
    report = crm.crm_report(basis, internals.displacement)
    assert report["available"] and np.isfinite(report["crm_lts_score"]), key
    lts = np.asarray(report["per_answer_position"]["lts_pc1"])
    assert lts.shape == (internals.displacement.shape[1], L + 1) and np.all(np.isfinite(lts)), key


def test_radar_features(fam):
    from core.methods import radar

    key, handle = fam
    values, trace = radar.extract_features(handle, TEXT)
    assert trace.n_layers == handle.info.n_layers
    vec = radar.feature_vector(values)
    assert vec.shape == (37,) and np.all(np.isfinite(vec)), key
    # the last layer's lens confidence is the model's own top next-token probability
    probs = torch.softmax(_hf(handle, trace.token_ids).logits[0, -1].double(), -1)
    assert trace.confidence[-1] == pytest.approx(float(probs.max()), abs=1e-4), key


def test_sma_with_a_few_masks(fam):
    from core.methods.sma import SMASettings, run_sma

    key, handle = fam
    result = run_sma(handle, Q, C, SMASettings(n_samples=3, max_new_tokens=2, batch_size=4))
    assert len(result.ads) == len(result.units) and np.all(np.isfinite(result.ads)), key


def test_audit_forward_batched_matches_single(fam):
    from core.audit.forward import capture_pairs

    key, handle = fam
    prepared = [prepare_prompts(handle, q, c, SETTINGS) for q, c in ROWS]
    together = capture_pairs(handle, prepared, batch_size=2)
    for prep, cap in zip(prepared, together, strict=True):
        (alone,) = capture_pairs(handle, [prep], batch_size=1)
        np.testing.assert_allclose(cap.displacement, alone.displacement, rtol=1e-4, atol=1e-4, err_msg=key)
        assert cap.first_token_kl == pytest.approx(alone.first_token_kl, abs=1e-4)
    first = run_dual_path(handle, *ROWS[0], SETTINGS)
    assert together[0].first_token_kl == pytest.approx(float(first.token_kl[0]), abs=1e-4), key


def test_lookback_lens(fam):
    """Issue 24's Lookback Lens: LR = A_ctx / (A_ctx + A_new) per query head (grouped- and multi-query families
    included) equals the ratio of transformers' own attentions, and its detectors run without a bundled fit."""
    from core.detectors import DetectorInput, get
    from core.methods.internals.replay import prepared_for
    from core.methods.lookback import lookback_map, span_features

    key, handle = fam
    settings = DualPathSettings(max_new_tokens=4, score_window=4, top_k=3, force_length=True)
    result = run_dual_path(handle, Q, C, settings)
    m = lookback_map(handle, result)
    prompt = list(prepared_for(handle, result).retrieval.ids)
    plen, n = len(prompt), result.n_tokens
    A = _hf(handle, prompt + list(result.answer_token_ids[:-1]), output_attentions=True).attentions
    assert m.lr.shape == (handle.info.n_layers, A[0].shape[1], n), key
    for layer, a in enumerate(A):
        w = a[0].double().numpy()
        for t in range(1, n):
            a_ctx, a_new = w[:, plen - 1 + t, :plen].mean(-1), w[:, plen - 1 + t, plen : plen + t].mean(-1)
            np.testing.assert_allclose(m.lr[layer, :, t], a_ctx / (a_ctx + a_new), atol=1e-5, err_msg=key)
    assert np.all(np.isfinite(span_features(m.lr))), key
    inp = DetectorInput(handle, result, settings)
    assert 0.0 <= get("lookback_mean").score(inp) <= 1.0
    with pytest.raises(ValueError, match="No Lookback Lens classifier"):  # the stated refusal: no bundled fit
        get("lookback").score(inp)


SANDWICH_OR_PLAIN = ("llama", "gemma2", "gemma3_text", "olmo2", "gpt2", "qwen2", "mistral")
"""Families whose attention module returns the attention's own contribution (the by-hand x^mid of ReDeEP)."""


def test_redeep(fam):
    """Issue 24's ReDeEP on every family: ECS and PKS from the one trace, PKS against a by-hand logit lens before
    and after the MLP where the attention module's output is the attention's contribution (sandwich norms
    included), the stated refusals (no MLP split; OV on fused layouts), and the detectors with the label-free
    default choice."""
    import math

    from scipy.spatial.distance import jensenshannon

    from core.detectors import DetectorInput, get
    from core.methods.internals.replay import path_sequence
    from core.methods.redeep import ov_copying_scores, redeep_trace

    key, handle = fam
    settings = DualPathSettings(max_new_tokens=4, score_window=4, top_k=3, force_length=True)
    result = run_dual_path(handle, Q, C, settings)
    t = redeep_trace(handle, result)
    L, H, n = handle.info.n_layers, handle.info.n_heads, result.n_tokens
    assert t.ecs.shape == (n, L, H) and np.all(np.abs(t.ecs) <= 1 + 1e-5), key
    refusal = support(handle.model, handle.tokenizer).unavailable.get("mlp_split")
    inp = DetectorInput(handle, result, settings)
    assert np.isfinite(get("redeep_ecs").score(inp)), key
    if refusal is not None:
        assert t.pks is None and t.pks_refusal == refusal, key
        for name in ("redeep", "redeep_pks"):
            with pytest.raises(ValueError, match="PKS is unavailable"):
                get(name).score(inp)
    else:
        assert t.pks.shape == (n, L) and np.all(t.pks >= 0) and np.all(t.pks <= math.log(2) + 1e-6), key
        assert np.isfinite(get("redeep").score(inp)) and np.isfinite(get("redeep_pks").score(inp)), key
    if key in SANDWICH_OR_PLAIN:
        parts = model_parts(handle)
        ids, _, plen = path_sequence(handle, result, "retrieval")
        rows = [plen - 1 + i for i in range(n)]
        attn, mlp = {}, {}
        hooks = [
            a.register_forward_hook(lambda m, i, o, k=k: attn.__setitem__(k, o[0]))
            for k, a in enumerate(parts.attentions)
        ]
        hooks += [
            layer.mlp.register_forward_hook(lambda m, i, o, k=k: mlp.__setitem__(k, o))
            for k, layer in enumerate(parts.layers)
        ]
        try:
            hs = _hf(handle, ids, output_hidden_states=True).hidden_states
        finally:
            for h in hooks:
                h.remove()
        for layer in range(L):
            block = parts.layers[layer]
            post_attn = (
                getattr(block, "post_attention_layernorm", None)
                if hasattr(block, "post_feedforward_layernorm")
                else None
            )
            with torch.inference_mode():
                delta = post_attn(attn[layer]) if post_attn is not None else attn[layer]
                mid = hs[layer] + delta
                out = mlp[layer]
                post = mid + (
                    block.post_feedforward_layernorm(out) if hasattr(block, "post_feedforward_layernorm") else out
                )
                p = torch.softmax(lens_logits(parts, mid[0, rows]).double(), -1).numpy()
                q = torch.softmax(lens_logits(parts, post[0, rows]).double(), -1).numpy()
            expected = [jensenshannon(a, b) ** 2 for a, b in zip(p, q)]
            np.testing.assert_allclose(t.pks[:, layer], expected, rtol=2e-3, atol=1e-6, err_msg=f"{key} layer {layer}")
    attn0 = model_parts(handle).attentions[0]
    if isinstance(getattr(attn0, "v_proj", None), torch.nn.Linear) or key == "gpt2":
        ov = ov_copying_scores(handle)
        assert ov.shape == (L, H) and np.all(np.abs(ov) <= 1 + 1e-9), key
    else:
        with pytest.raises(ValueError, match="separate value and output projections"):
            ov_copying_scores(handle)


def test_evaluate_on_a_few_rows(fam):
    from core.evaluation.data import LabeledRow
    from core.evaluation.evaluate import evaluate_rows

    key, handle = fam
    rows = [
        LabeledRow(i + 1, q, c, label)
        for i, ((q, c), label) in enumerate(zip(ROWS * 2, ["memorized"] * 2 + ["grounded"] * 2))
    ]
    report = evaluate_rows(handle, rows, SETTINGS, batch_size=4, noise_sigmas=(), n_boot=20)
    assert report["n"] == 4 and len(report["rows"]) == 4
    assert all(np.isfinite(r["scores"]["repcs"]) for r in report["rows"]), key


@pytest.mark.parametrize("key", ["gptj", "llama"])
def test_the_cli_says_what_a_family_cannot_do_in_one_line_each(key, family_folders, capsys):
    import json

    from core.cli import main

    folder = str(family_folders(key))
    args = ["run", "--model", folder, "--device", "cpu", "--query", Q, "--context", C, "--max-new-tokens", "2"]
    assert main([*args, "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["model"] == folder
    notes = [line for line in out.err.splitlines() if line.startswith("note: ")]
    if key == "llama":
        assert notes == []
    else:  # GPT-J: a parallel residual and a tokenizer saved without a chat template
        assert len(notes) == 2
        assert any("parallel residual" in n for n in notes) and any("no chat template" in n for n in notes)


# ----------------------------------------------------------------------------------------------------------
# The fp16 path on a GPU (skipped without CUDA): the same invariants at fp16 tolerance

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the fp16 path)")


def _fp16_invariants(handle) -> None:
    from core.methods.ablation import activation_patching, count_hooks, noise_injection
    from core.methods.internals.forward import instrumented_forward

    assert handle.info.dtype == "float16"
    ids = _ids(handle)
    L = handle.info.n_layers
    with torch.inference_mode():
        out = handle.model(input_ids=torch.tensor([ids], device=handle.device), use_cache=False)
    before = count_hooks(handle.model)
    cap = instrumented_forward(handle, ids, positions=[len(ids) - 1], attention=True, head=(0, 0))
    model_logp = torch.log_softmax(out.logits[0, -1].float(), -1).cpu().numpy()
    lens_logp = lens_log_probs(handle, cap.states[L, 0]).cpu().numpy()
    np.testing.assert_allclose(lens_logp, model_logp, rtol=0, atol=5e-2)  # fp16 rounding of the state and logits
    np.testing.assert_allclose(cap.pattern.sum(-1), 1.0, atol=1e-2)
    result = run_dual_path(handle, Q, C, SETTINGS)
    prep = prepare_prompts(handle, Q, C, SETTINGS)
    ((answer, logits, _),) = generate_greedy(handle, [prep.retrieval.ids], SETTINGS)
    forced = teacher_forced_logits(handle, prep.retrieval.ids, answer)
    np.testing.assert_allclose(
        torch.log_softmax(forced.float(), -1).cpu().numpy(),
        torch.log_softmax(logits.float(), -1).cpu().numpy(),
        atol=5e-2,
    )
    with noise_injection(handle, list(range(L)), 0.0, seed=3):
        zero = run_dual_path(handle, Q, C, SETTINGS)
    with activation_patching(handle, [L - 1], prep.retrieval.ids, prep.retrieval.ids):
        patched = run_dual_path(handle, Q, C, SETTINGS)
    assert _identical(result, zero) and _identical(result, patched)
    assert count_hooks(handle.model) == before


@CUDA
@pytest.mark.parametrize("key", ["llama", "gemma2"])
def test_fp16_on_cuda_keeps_the_invariants(key, family_folders):
    from core.model.loading import load_model

    _fp16_invariants(load_model(str(family_folders(key)), device="cuda", dtype=torch.float16))


@CUDA
@pytest.mark.slow
def test_fp16_on_cuda_keeps_the_invariants_on_the_embedded_model():
    from core.model.loading import load_model

    _fp16_invariants(load_model(device="cuda", dtype=torch.float16))
