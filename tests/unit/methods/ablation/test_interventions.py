"""Interventions on the tiny random Llama: the layers they hook, the noise formula, where it applies, determinism,
chunking and padding independence, activation patching, hook hygiene, the lock, and concurrent sessions."""

from __future__ import annotations

import threading
import time
from operator import attrgetter

import numpy as np
import pytest
import torch

import core.methods.ablation.interventions as iv
from core.engine import DualPathSettings, generate_greedy, prepare_prompts, run_dual_path
from core.methods.ablation import (
    Intervention,
    NoiseSpec,
    PatchSpec,
    activation_patching,
    capture_layer_outputs,
    count_hooks,
    count_intervention_hooks,
    dose_response,
    intervention_parts,
    noise_field,
    noise_injection,
)

Q, C = "Where is the tower?", "The tower stands in Quillmere."
OTHER = [
    ("What color is the door?", "The door of the mill is painted green."),
    ("Who keeps the bees?", "Old Mara keeps the bees behind the chapel."),
]


def _settings(n: int = 6) -> DualPathSettings:
    return DualPathSettings(max_new_tokens=n, score_window=n, top_k=5)


FIELDS = ("token_kl", "retrieval.logprob", "parametric.logprob", "retrieval.entropy")


def _same(a, b) -> bool:
    """Bit-identical dual-path results (answers and every per-token array)."""
    return (
        a.answer_token_ids == b.answer_token_ids
        and a.parametric.token_ids == b.parametric.token_ids
        and all(np.array_equal(attrgetter(f)(a), attrgetter(f)(b)) for f in FIELDS)
        and a.repcs_score == b.repcs_score
    )


@pytest.fixture(scope="module")
def warm(tiny_handle):
    """Install transformers' own (permanent) output-capturing hooks once, so hook counts have a stable baseline."""
    with torch.inference_mode():
        tiny_handle.model(input_ids=torch.tensor([[1, 2, 3]]), output_hidden_states=True)
    return count_hooks(tiny_handle.model)


# ----------------------------------------------------------------------------------------------------------
# The model's parts


def test_interventions_hook_the_layers_the_locator_finds(tiny_handle, warm):
    parts = intervention_parts(tiny_handle)
    assert parts.decoder is tiny_handle.model.model and list(parts.layers) == list(tiny_handle.model.model.layers)
    with noise_injection(tiny_handle, [1], 0.5, 0) as active:
        assert active.parts.layers[1] is tiny_handle.model.model.layers[1]
        assert count_intervention_hooks(tiny_handle.model.model.layers[1]) == 1
        assert count_intervention_hooks(tiny_handle.model) == 1


class _NoPositions(torch.nn.Module):
    """A decoder layer whose forward cannot receive position_ids."""

    def __init__(self) -> None:
        super().__init__()
        self.self_attn = torch.nn.Linear(4, 4)

    def forward(self, hidden_states):
        return hidden_states


def test_models_whose_layers_take_no_positions_or_have_no_layers_are_refused(tiny_handle):
    from types import SimpleNamespace

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList([_NoPositions(), _NoPositions()])
            self.norm = torch.nn.LayerNorm(4)

    class LM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = Decoder()
            self.lm_head = torch.nn.Linear(4, 8)

        def get_output_embeddings(self):
            return self.lm_head

    handle = SimpleNamespace(model=LM(), info=tiny_handle.info)
    with pytest.raises(ValueError, match="position_ids"):
        Intervention(handle, noise=NoiseSpec((0,), 0.5))
    assert count_hooks(handle.model) == 0
    handle = SimpleNamespace(model=torch.nn.Sequential(torch.nn.Linear(4, 4)), info=tiny_handle.info)
    with pytest.raises(ValueError, match="decoder layers"):
        Intervention(handle, noise=NoiseSpec((0,), 0.5))


def test_noise_on_a_gpt2_layout_is_keyed_by_position_too():
    """The locator finds GPT-2's ``transformer.h``; its blocks receive position_ids, so the noise field applies
    as on Llama: one prefill + cached decoding equals one full pass under the same seed."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from core.model.handle import ModelHandle, ModelInfo

    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0)
    ).eval()
    info = ModelInfo("gpt2-tiny", "test", 2, 2, 16, 64, "cpu", "float32", 32, False)
    handle = ModelHandle(model, None, info)
    before = count_hooks(model)
    ids = torch.tensor([[5, 9, 3, 7, 1, 2]])
    with noise_injection(handle, [0, 1], 0.7, seed=3) as active, torch.inference_mode():
        full = model(input_ids=ids).logits
        prefix = model(input_ids=ids[:, :4], use_cache=True)
        step = model(input_ids=ids[:, 4:], past_key_values=prefix.past_key_values).logits
    assert active.stats.noised_forwards == {0: 3, 1: 3}
    torch.testing.assert_close(torch.cat([prefix.logits, step], dim=1), full, rtol=1e-4, atol=1e-4)
    with torch.inference_mode():
        clean = model(input_ids=ids).logits
    assert (clean - full).abs().max() > 1e-3
    assert count_hooks(model) == before


def test_specs_are_validated_before_anything_is_installed(tiny_handle, warm):
    for spec in (
        NoiseSpec((3,), 0.5),
        NoiseSpec((0,), -0.1),
        NoiseSpec((0,), float("nan")),
        NoiseSpec((), 0.5),
        NoiseSpec((0,), 0.5, seed=-1),
    ):
        with pytest.raises(ValueError):
            Intervention(tiny_handle, noise=spec)
    with pytest.raises(ValueError):
        Intervention(tiny_handle)
    with pytest.raises(ValueError):
        Intervention(tiny_handle, patch=PatchSpec((0,), (), (1, 2)))
    assert count_hooks(tiny_handle.model) == warm


# ----------------------------------------------------------------------------------------------------------
# Noise on whole runs


def test_eps_zero_is_identical_to_the_clean_run(tiny_handle, warm):
    clean = run_dual_path(tiny_handle, Q, C, _settings())
    with noise_injection(tiny_handle, [0, 1, 2], 0.0, seed=3) as active:
        zero = run_dual_path(tiny_handle, Q, C, _settings())
    assert active.stats.noised_forwards, "the hooks ran"
    assert _same(clean, zero)


def test_same_seed_gives_identical_results_and_other_seeds_differ(tiny_handle, warm):
    runs = []
    for seed in (5, 5, 6):
        with noise_injection(tiny_handle, [1, 2], 0.8, seed=seed):
            runs.append(run_dual_path(tiny_handle, Q, C, _settings()))
    assert _same(runs[0], runs[1])
    assert not np.array_equal(runs[0].token_kl, runs[2].token_kl)
    clean = run_dual_path(tiny_handle, Q, C, _settings())
    assert not np.array_equal(runs[0].token_kl, clean.token_kl)


def test_noise_applies_only_at_chosen_layers_with_the_paper_formula(tiny_handle, warm):
    ids = prepare_prompts(tiny_handle, Q, C, _settings()).retrieval.ids
    x = torch.tensor([ids])
    eps, seed, layer = 0.3, 11, 1
    with capture_layer_outputs(tiny_handle, [0, 1, 2]) as clean_rec, torch.inference_mode():
        clean_hs = tiny_handle.model(input_ids=x, output_hidden_states=True).hidden_states
    with (
        noise_injection(tiny_handle, [layer], eps, seed),
        capture_layer_outputs(tiny_handle, [0, 1, 2]) as rec,
        torch.inference_mode(),
    ):
        noisy_hs = tiny_handle.model(input_ids=x, output_hidden_states=True).hidden_states
    # layers before the chosen one are untouched, bit for bit
    assert torch.equal(rec[0][0], clean_rec[0][0])
    assert torch.equal(noisy_hs[0], clean_hs[0]) and torch.equal(noisy_hs[1], clean_hs[1])
    # at the chosen layer: h' = h + ε·σ(h)·z, σ = per-token population std over the hidden dimension (float64)
    h = clean_rec[layer][0][0].double().numpy()
    sigma = h.std(axis=-1, keepdims=True)
    z = noise_field(seed, layer, range(len(ids)), h.shape[-1]).double().numpy()
    np.testing.assert_allclose(rec[layer][0][0].double().numpy(), h + eps * sigma * z, rtol=1e-5, atol=1e-6)
    # transformers' hidden_states report the perturbed state (our hook runs before its recorder)
    assert torch.equal(noisy_hs[layer + 1], rec[layer][0])
    # and the perturbation propagates to the later layer
    assert not torch.allclose(rec[2][0], clean_rec[2][0])


def test_noise_does_not_depend_on_chunking_kv_cache_or_padding(tiny_handle, warm):
    prep = prepare_prompts(tiny_handle, Q, C, _settings(8))
    ids = torch.tensor([prep.retrieval.ids])
    kw = {
        "max_new_tokens": 6,
        "do_sample": False,
        "output_logits": True,
        "return_dict_in_generate": True,
        "pad_token_id": tiny_handle.pad_token_id,
    }
    with noise_injection(tiny_handle, [0, 2], 0.7, seed=3), torch.inference_mode():
        out = tiny_handle.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kw)
        full = tiny_handle.model(input_ids=out.sequences).logits[0, ids.shape[1] - 1 : -1]
    stepwise = torch.stack(out.logits, 1)[0]
    # one prefill + token-by-token decoding with a KV cache == one full forward pass, under the same noise
    torch.testing.assert_close(stepwise, full, rtol=1e-4, atol=1e-4)
    with noise_injection(tiny_handle, [0, 2], 0.7, seed=4), torch.inference_mode():
        other = tiny_handle.model(input_ids=out.sequences).logits[0, ids.shape[1] - 1 : -1]
    assert (other - full).abs().max() > 1e-2, "another seed must change the logits (the check above is not vacuous)"
    # left padding in a batched generation: the parametric row answers as it does alone
    with noise_injection(tiny_handle, [1], 0.9, seed=2):
        batched = run_dual_path(tiny_handle, Q, C, _settings(8))
        ((alone, _, _),) = generate_greedy(tiny_handle, [prep.parametric.ids], _settings(8))
    assert batched.parametric.token_ids == alone


def test_both_paths_get_the_same_noise_on_their_shared_prefix(tiny_handle, warm):
    prep = prepare_prompts(tiny_handle, Q, C, _settings())
    shared = next(i for i, (a, b) in enumerate(zip(prep.retrieval.ids, prep.parametric.ids)) if a != b)
    assert shared > 3
    outs = {}
    for name, ids in (("rag", prep.retrieval.ids), ("para", prep.parametric.ids)):
        with (
            noise_injection(tiny_handle, [0], 1.0, seed=9),
            capture_layer_outputs(tiny_handle, [0]) as rec,
            torch.inference_mode(),
        ):
            tiny_handle.model(input_ids=torch.tensor([ids]))
        outs[name] = rec[0][0][0]
    assert torch.equal(outs["rag"][:shared], outs["para"][:shared])


# ----------------------------------------------------------------------------------------------------------
# Activation patching


def test_patching_replaces_the_last_prompt_token_state_of_the_retrieval_path_only(tiny_handle, warm):
    prep = prepare_prompts(tiny_handle, Q, C, _settings())
    layer = 1
    last = len(prep.retrieval.ids) - 1
    with capture_layer_outputs(tiny_handle, [0, 1]) as rec, torch.inference_mode():
        tiny_handle.model(input_ids=torch.tensor([prep.parametric.ids]))
        tiny_handle.model(input_ids=torch.tensor([prep.retrieval.ids]))
    source = rec[layer][0][0, -1]
    clean_rag = {k: v[1][0] for k, v in rec.items()}
    with (
        activation_patching(tiny_handle, [layer], prep.parametric.ids, prep.retrieval.ids) as active,
        capture_layer_outputs(tiny_handle, [0, 1]) as prec,
        torch.inference_mode(),
    ):
        tiny_handle.model(input_ids=torch.tensor([prep.retrieval.ids]))
        tiny_handle.model(input_ids=torch.tensor([[*prep.parametric.ids, 65, 66]]))
    patched = prec[layer][0][0]
    assert torch.equal(patched[last], source)
    assert torch.equal(patched[:last], clean_rag[layer][:last])
    assert torch.equal(prec[0][0][0], clean_rag[0])  # the earlier layer is untouched
    assert active.stats.patched_sites == 1  # the parametric forward was not patched
    # in a dual-path run only the retrieval row's prefill is patched (one site per patched layer)
    with activation_patching(tiny_handle, [0, 2], prep.parametric.ids, prep.retrieval.ids) as active:
        run_dual_path(tiny_handle, Q, C, _settings())
    assert active.stats.patched_sites == 2


def test_patching_the_last_layer_makes_the_first_token_distribution_parametric(tiny_handle, warm):
    """The first answer token is predicted from the last layer's state at the last prompt token only: with it
    patched, the retrieval path's first distribution is the parametric one, so KL_0 = 0."""
    prep = prepare_prompts(tiny_handle, Q, C, _settings())
    clean = run_dual_path(tiny_handle, Q, C, _settings())
    with activation_patching(tiny_handle, [2], prep.parametric.ids, prep.retrieval.ids):
        patched = run_dual_path(tiny_handle, Q, C, _settings())
    assert clean.token_kl[0] > 1e-6
    assert patched.token_kl[0] == pytest.approx(0.0, abs=1e-6)


# ----------------------------------------------------------------------------------------------------------
# Hook hygiene and the lock


def _lock_free(handle, timeout: float = 2.0) -> bool:
    """Whether the model is free for another thread (polled for up to ``timeout`` seconds)."""
    got: list[bool] = []

    def probe() -> None:
        deadline = time.monotonic() + timeout
        while handle.is_busy() and time.monotonic() < deadline:
            time.sleep(0.01)
        got.append(not handle.is_busy())

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return got == [True]


def test_no_hook_remains_after_normal_runs(tiny_handle, warm):
    prep = prepare_prompts(tiny_handle, Q, C, _settings())
    noise = NoiseSpec((0, 1, 2), 0.4, 1)
    patch = PatchSpec((1,), tuple(prep.parametric.ids), tuple(prep.retrieval.ids))
    with Intervention(tiny_handle, noise=noise, patch=patch):
        assert count_intervention_hooks(tiny_handle.model) == 5  # 3 layer hooks + 2 on the stack
        assert not _lock_free(tiny_handle, timeout=0.2)
        run_dual_path(tiny_handle, Q, C, _settings())
    assert count_hooks(tiny_handle.model) == warm
    assert count_intervention_hooks(tiny_handle.model) == 0
    assert _lock_free(tiny_handle)


def test_no_hook_remains_after_an_exception_inside_a_hooked_forward(tiny_handle, warm, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("failure inside the hook")

    monkeypatch.setattr(iv, "apply_noise", boom)
    with pytest.raises(RuntimeError, match="inside the hook"), noise_injection(tiny_handle, [1], 0.5, 0):
        run_dual_path(tiny_handle, Q, C, _settings())
    monkeypatch.undo()
    assert count_hooks(tiny_handle.model) == warm
    assert count_intervention_hooks(tiny_handle.model) == 0
    assert _lock_free(tiny_handle)
    # an exception in the caller's own code inside the block
    with pytest.raises(KeyError), noise_injection(tiny_handle, [0, 2], 0.5, 0):
        raise KeyError("caller")
    # an exception while entering (the patch source's trace refuses an out-of-vocabulary id)
    with pytest.raises(ValueError, match="vocabulary"), activation_patching(tiny_handle, [1], [10**6], [1, 2, 3]):
        pass
    assert count_hooks(tiny_handle.model) == warm
    assert count_intervention_hooks(tiny_handle.model) == 0
    assert _lock_free(tiny_handle)
    # the model still works and is clean afterwards
    assert _same(run_dual_path(tiny_handle, Q, C, _settings()), run_dual_path(tiny_handle, Q, C, _settings()))


def test_an_intervention_cannot_be_entered_twice(tiny_handle, warm):
    active = noise_injection(tiny_handle, [0], 0.1, 0)
    with active:
        pass
    with pytest.raises(RuntimeError), active:
        pass
    assert count_hooks(tiny_handle.model) == warm


def test_concurrent_noise_sweep_never_leaks_into_another_sessions_clean_runs(tiny_handle, warm):
    """Thread A sweeps noise over every layer while thread B runs clean analyses on the same handle; B's
    results are bit-identical to B alone."""
    inputs = [(Q, C), *OTHER]
    alone = [run_dual_path(tiny_handle, q, c, _settings()) for q, c in inputs]
    with noise_injection(tiny_handle, [0, 1, 2], 1.0, 0):
        noisy = run_dual_path(tiny_handle, Q, C, _settings())
    assert not _same(noisy, alone[0]), "the noise must be visible in a result, or a leak could go unnoticed"

    a_runs = [0]
    a_started = threading.Event()
    b_done = threading.Event()
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            seed = 0
            while not b_done.is_set():
                for layer in range(3):
                    with noise_injection(tiny_handle, [layer], 1.0, seed):
                        run_dual_path(tiny_handle, Q, C, _settings(), free_parametric=False)
                    a_runs[0] += 1
                    a_started.set()
                seed += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            a_started.set()

    b_results = []
    a_progress = []
    thread = threading.Thread(target=sweep)
    thread.start()
    try:
        assert a_started.wait(60)
        for _ in range(3):
            for q, c in inputs:
                before = a_runs[0]
                b_results.append(run_dual_path(tiny_handle, q, c, _settings()))
                a_progress.append(a_runs[0] - before)
    finally:
        b_done.set()
        thread.join(60)
    assert not errors, errors
    assert sum(a_progress) > 0, "A's hooked runs interleaved with B's"
    for i, res in enumerate(b_results):
        assert _same(res, alone[i % len(inputs)]), f"B's run {i} differs from B alone"
    assert count_hooks(tiny_handle.model) == warm and count_intervention_hooks(tiny_handle.model) == 0


# ----------------------------------------------------------------------------------------------------------
# The embedded model


@pytest.mark.slow
def test_embedded_model_noise_and_patching(embedded_handle):
    q, c = "What is the capital of Veltria?", "The capital of the Republic of Veltria is Marrowgate."
    s = DualPathSettings(max_new_tokens=8, score_window=8)
    clean = run_dual_path(embedded_handle, q, c, s)
    with noise_injection(embedded_handle, range(30), 0.0, 0):
        zero = run_dual_path(embedded_handle, q, c, s)
    assert zero.answer_token_ids == clean.answer_token_ids and np.array_equal(zero.token_kl, clean.token_kl)
    grid = dose_response(embedded_handle, q, c, s, "early", [0.0, 1.0], [0], max_new_tokens=8)
    assert grid.z[1, 0] != grid.clean_z  # noise over the early third moves Z
    prep = prepare_prompts(embedded_handle, q, c, s)
    with activation_patching(embedded_handle, [29], prep.parametric.ids, prep.retrieval.ids):
        patched = run_dual_path(embedded_handle, q, c, s, free_parametric=False)
    assert patched.token_kl[0] == pytest.approx(0.0, abs=1e-4)  # the first token is predicted as without context
    assert count_intervention_hooks(embedded_handle.model) == 0
