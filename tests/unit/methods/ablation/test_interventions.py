"""Interventions on the tiny random Llama: the noise formula, where it applies, determinism, chunking and
padding independence, activation patching, hook hygiene, the lock, and concurrent sessions."""

from __future__ import annotations

import threading

from operator import attrgetter

import numpy as np
import pytest
import torch

import core.methods.ablation.interventions as iv
from core.engine.dual_path import (
    DualPathSettings,
    generate_greedy,
    prepare_prompts,
    run_dual_path,
)
from core.methods.ablation.interventions import (
    NOISE_BLOCK,
    Intervention,
    NoiseSpec,
    PatchSpec,
    activation_patching,
    capture_layer_outputs,
    count_hooks,
    count_intervention_hooks,
    decoder_stack,
    format_layers,
    layer_preset,
    noise_field,
    noise_injection,
    parse_layers,
)

Q, C = "Where is the tower?", "The tower stands in Quillmere."
OTHER = [("What colour is the door?", "The door of the mill is painted green."),
         ("Who keeps the bees?", "Old Mara keeps the bees behind the chapel.")]


def _settings(n: int = 6) -> DualPathSettings:
    return DualPathSettings(max_new_tokens=n, score_window=n, top_k=5)


def _same(a, b) -> bool:
    """Bit-identical dual-path results (answers and every per-token array)."""
    return (
        a.answer_token_ids == b.answer_token_ids
        and a.parametric.token_ids == b.parametric.token_ids
        and all(np.array_equal(attrgetter(f)(a), attrgetter(f)(b)) for f in ("token_kl", "retrieval.logprob", "parametric.logprob", "retrieval.entropy"))
        and a.repcs_score == b.repcs_score
    )


@pytest.fixture(scope="module")
def warm(tiny_handle):
    """Install transformers' own (permanent) output-capturing hooks once, so hook counts have a stable baseline."""
    with torch.inference_mode():
        tiny_handle.model(input_ids=torch.tensor([[1, 2, 3]]), output_hidden_states=True)
    return count_hooks(tiny_handle.model)


# ----------------------------------------------------------------------------------------------------------
# Layer sets


def test_parse_layers_and_presets():
    assert parse_layers("4-8", 30) == [4, 5, 6, 7, 8]
    assert parse_layers("1,3,5-7", 30) == [1, 3, 5, 6, 7]
    assert parse_layers(" 7 ", 30) == [7]
    assert parse_layers([3, 1, 3], 30) == [1, 3]
    assert parse_layers("early", 30) == list(range(10))
    assert parse_layers("middle", 30) == list(range(10, 20))
    assert parse_layers("late", 30) == list(range(20, 30))
    assert parse_layers("early,25", 30) == list(range(10)) + [25]
    assert parse_layers("all", 3) == [0, 1, 2]
    assert parse_layers("control", 30) == list(range(8)) and parse_layers("control", 3) == [0, 1, 2]
    # thirds partition the stack for any depth
    for n in (1, 2, 3, 7, 30, 32, 48):
        parts = [layer_preset(p, n) for p in ("early", "middle", "late")]
        if n >= 3:
            assert sorted(x for part in parts for x in part) == list(range(n))
    assert format_layers([4, 5, 6, 9, 11, 12]) == "4-6,9,11-12"
    assert parse_layers(format_layers([0, 2, 3, 4, 29]), 30) == [0, 2, 3, 4, 29]
    for bad in ("30", "8-4", "x", "", "1-2-3", "-1", "middle_ish"):
        with pytest.raises(ValueError):
            parse_layers(bad, 30)


def test_decoder_stack_finds_llama_layers_and_rejects_other_layouts(tiny_handle):
    owner, layers = decoder_stack(tiny_handle.model)
    assert owner is tiny_handle.model.model and layers is tiny_handle.model.model.layers
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=64, n_positions=32))
    with pytest.raises(ValueError, match="Llama-like"):
        decoder_stack(gpt2)


def test_specs_are_validated_before_anything_is_installed(tiny_handle, warm):
    for spec in (NoiseSpec((3,), 0.5), NoiseSpec((0,), -0.1), NoiseSpec((0,), float("nan")), NoiseSpec((), 0.5),
                 NoiseSpec((0,), 0.5, seed=-1)):
        with pytest.raises(ValueError):
            Intervention(tiny_handle, noise=spec)
    with pytest.raises(ValueError):
        Intervention(tiny_handle)
    with pytest.raises(ValueError):
        Intervention(tiny_handle, patch=PatchSpec((0,), (), (1, 2)))
    assert count_hooks(tiny_handle.model) == warm


# ----------------------------------------------------------------------------------------------------------
# The noise field


def test_noise_field_depends_only_on_seed_layer_position():
    d = 256
    positions = list(range(3 * NOISE_BLOCK + 5))
    full = noise_field(7, 2, positions, d)
    # any grouping of positions (one at a time, reversed, scattered) gives the same rows
    one_by_one = torch.cat([noise_field(7, 2, [p], d) for p in positions])
    assert torch.equal(full, one_by_one)
    scattered = [130, 3, 64, 63, 0]
    assert torch.equal(noise_field(7, 2, scattered, d), full[scattered])
    # other seeds, layers and positions give other draws
    assert not torch.equal(noise_field(8, 2, positions, d), full)
    assert not torch.equal(noise_field(7, 1, positions, d), full)
    assert not torch.equal(full[0], full[1])
    # standard normal (loose moments over ~50k draws)
    assert abs(float(full.mean())) < 0.02 and abs(float(full.std()) - 1.0) < 0.02
    assert full.dtype == torch.float32


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
    with noise_injection(tiny_handle, [layer], eps, seed), capture_layer_outputs(tiny_handle, [0, 1, 2]) as rec, \
            torch.inference_mode():
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
    kw = {"max_new_tokens": 6, "do_sample": False, "output_logits": True, "return_dict_in_generate": True,
          "pad_token_id": tiny_handle.pad_token_id}
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
        with noise_injection(tiny_handle, [0], 1.0, seed=9), capture_layer_outputs(tiny_handle, [0]) as rec, \
                torch.inference_mode():
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
    with activation_patching(tiny_handle, [layer], prep.parametric.ids, prep.retrieval.ids) as active, \
            capture_layer_outputs(tiny_handle, [0, 1]) as prec, torch.inference_mode():
        tiny_handle.model(input_ids=torch.tensor([prep.retrieval.ids]))
        tiny_handle.model(input_ids=torch.tensor([prep.parametric.ids + [65, 66]]))
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
    """Whether another thread can take the model lock (within ``timeout`` seconds)."""
    got: list[bool] = []

    def probe() -> None:
        ok = handle.lock.acquire(timeout=timeout)
        got.append(ok)
        if ok:
            handle.lock.release()

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
    # an exception while entering (the patch source forward fails on an out-of-vocabulary id)
    with pytest.raises(IndexError), activation_patching(tiny_handle, [1], [10**6], [1, 2, 3]):
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
