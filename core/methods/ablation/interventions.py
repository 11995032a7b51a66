"""Causal interventions on decoder layers: noise injection and activation patching (CRM §4.4, appendix J).

Both are context managers over a shared :class:`~core.model.handle.ModelHandle`. On entry they open a
session of the handle (its re-entrant lock and inference mode) and register forward hooks on the chosen
decoder layers through :meth:`~core.model.handle.ModelHandle.hooked`; on exit every hook is removed — in
``finally``, so also after an exception raised inside a hooked forward — and the session ends. Hooks are
global state on a model that every browser session shares; because the session is held for the whole hooked
run and every forward pass in the code base runs inside a session of the same handle, no other session's run
can ever execute while the hooks are installed.

Usage::

    with noise_injection(handle, layers=[4, 5, 6, 7, 8], eps=0.5, seed=0):
        perturbed = run_dual_path(handle, query, context, settings)

    with intervene(handle, noise=NoiseSpec((4, 5), 0.5, seed=1), patch=PatchSpec((10,), para_ids, rag_ids)):
        ...

**Noise injection** (CRM §4.4 and appendix J): h′ = h + ε · σ(h) · N(0, 1) at the output of each chosen
decoder layer, at every token position, on every forward pass made while the context is active (both paths,
the prompt and every generated token). σ and the seeded noise field are defined in
:mod:`core.methods.ablation.noise`.

**Activation patching** (CRM §4.4 finding 4): replace h_ℓ(context) at the last prompt token with
h_ℓ(no context) — the output of decoder layer ℓ at the last token of the parametric prompt — for the chosen
layers, then generate. The source states are computed once on entry. The replacement is made in every
forward pass whose row contains the whole retrieval prompt ending at its last position (the generation's
prefill, a teacher-forced pass over prompt + answer); other rows (the parametric prompt) are untouched.
With a KV cache the patched state reaches every later token through attention, as in an unbatched run.

Layer numbering: decoder layer ℓ (0-based) is ``hidden_states[ℓ + 1]`` (:mod:`core.model.parts`). Hooks are
registered with ``prepend=True`` so that ``output_hidden_states`` (transformers records it with its own
forward hooks) reports the perturbed states. When two intervention contexts are nested, the inner one's
hooks run first at a shared layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any, Self

import torch

from core.methods.ablation.capture import last_token_states
from core.methods.ablation.hooks import find_patch_sites, mark, token_positions, with_hidden
from core.methods.ablation.noise import NoiseTable, apply_noise
from core.methods.ablation.specs import InterventionStats, NoiseSpec, PatchSpec
from core.model.handle import HookRegistration, ModelHandle
from core.model.hooks import first_tensor
from core.model.parts import ModelParts, layers_take_position_ids, model_parts


def intervention_parts(handle: ModelHandle) -> ModelParts:
    """The model's parts, checked for interventions: its decoder layers must receive ``position_ids``.

    Raises:
        ValueError: when the model's parts cannot be found or its layers do not take ``position_ids``.
    """
    parts = model_parts(handle)
    if not layers_take_position_ids(parts):
        raise ValueError(
            f"Interventions need decoder layers that receive position_ids (the noise is keyed by token "
            f"position); the layers of {type(handle.model).__name__} do not. Supported: Llama, Mistral, Qwen2, "
            "Gemma, SmolLM and other Llama-like models."
        )
    return parts


class Intervention:
    """Noise injection and/or activation patching on a shared model, as one context manager.

    Entering opens a session of the handle (held until exit), computes the patch source states (clean: before
    this intervention's own hooks exist) and registers one forward hook per affected decoder layer (plus, for
    patching, a pre-hook and a hook on the decoder module that find the target prompt's rows). At a layer that
    is both patched and noised, the patch is applied first, then the noise (every position is noised).
    Exiting removes every hook in ``finally`` and ends the session. An instance can be entered once.

    Args:
        handle: the shared model.
        noise: a :class:`NoiseSpec`, or ``None``.
        patch: a :class:`PatchSpec`, or ``None``.

    Raises:
        ValueError: bad specifications or an unsupported architecture (before anything is installed).
    """

    def __init__(self, handle: ModelHandle, *, noise: NoiseSpec | None = None, patch: PatchSpec | None = None) -> None:
        if noise is None and patch is None:
            raise ValueError("An intervention needs noise, patching, or both.")
        self.handle = handle
        self.parts = intervention_parts(handle)
        if noise is not None:
            noise.validate(self.parts)
        if patch is not None:
            patch.validate(self.parts)
        self.noise = noise
        self.patch = patch
        self.stats = InterventionStats()
        self._exit: ExitStack | None = None
        self._entered = False
        self._sources: dict[int, torch.Tensor] = {}
        self._sites: list[tuple[int, int]] = []
        self._table = NoiseTable(noise.seed, handle.info.hidden_size) if noise is not None else None

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description: the specs and what was actually done."""
        out: dict[str, Any] = {}
        if self.noise is not None:
            out["noise"] = self.noise.to_dict()
        if self.patch is not None:
            out["patch"] = self.patch.to_dict()
        out["stats"] = {
            "noised_forwards": {str(k): v for k, v in sorted(self.stats.noised_forwards.items())},
            "patched_sites": self.stats.patched_sites,
        }
        return out

    # -- context protocol ---------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        if self._entered:
            raise RuntimeError("This intervention was already used; create a new one.")
        self._entered = True
        with ExitStack() as stack:  # on any failure while entering, everything entered so far is undone
            stack.enter_context(self.handle.session())
            stack.callback(self._clear_sites)
            if self.patch is not None:
                self._sources = last_token_states(self.handle, self.patch.source_ids, self.patch.layers)
            stack.enter_context(self.handle.hooked(self._registrations()))
            self._exit = stack.pop_all()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool:
        stack, self._exit = self._exit, None
        if stack is not None:
            stack.__exit__(exc_type, exc, tb)
        return False

    # -- hooks ----------------------------------------------------------------------------------------------

    def _registrations(self) -> list[HookRegistration]:
        """Every hook of this intervention, as registrations for :meth:`ModelHandle.hooked`."""
        regs: list[HookRegistration] = []
        if self.patch is not None:
            decoder, target = self.parts.decoder, self.patch.target_ids

            def find_sites(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
                self._sites = find_patch_sites(args, kwargs, target)

            def clear_sites(module: Any, args: Any, output: Any) -> None:
                self._clear_sites()

            regs.append(lambda: decoder.register_forward_pre_hook(mark(find_sites), with_kwargs=True))
            regs.append(lambda: decoder.register_forward_hook(mark(clear_sites), always_call=True))
        affected = set(self.noise.layers if self.noise else ()) | set(self.patch.layers if self.patch else ())
        for layer in sorted(affected):
            module, hook = self.parts.layers[layer], mark(self._layer_hook(layer))
            regs.append(lambda m=module, h=hook: m.register_forward_hook(h, with_kwargs=True, prepend=True))
        return regs

    def _clear_sites(self) -> None:
        self._sites = []

    def _layer_hook(self, layer: int) -> Any:
        noise = self.noise if self.noise is not None and layer in self.noise.layers else None
        patched = self.patch is not None and layer in self.patch.layers

        def hook(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
            hidden = first_tensor(output)
            new = hidden
            if patched and self._sites:
                new = hidden.clone()
                source = self._sources[layer].to(device=new.device, dtype=new.dtype)
                for row, col in self._sites:
                    new[row, col] = source
                self.stats.patched_sites += len(self._sites)
            if noise is not None and self._table is not None:
                z = self._table.lookup(layer, token_positions(kwargs, hidden))
                new = apply_noise(new, z, noise.eps)
                self.stats.noised_forwards[layer] = self.stats.noised_forwards.get(layer, 0) + 1
            return output if new is hidden else with_hidden(output, new)

        return hook


def intervene(handle: ModelHandle, *, noise: NoiseSpec | None = None, patch: PatchSpec | None = None) -> Intervention:
    """Noise and/or patching as one context manager (see :class:`Intervention`)."""
    return Intervention(handle, noise=noise, patch=patch)


def noise_injection(handle: ModelHandle, layers: Sequence[int], eps: float, seed: int = 0) -> Intervention:
    """h′ = h + ε·σ(h)·N(0, 1) at the output of ``layers`` while the context is active (CRM §4.4)."""
    return Intervention(handle, noise=NoiseSpec(tuple(int(x) for x in layers), float(eps), int(seed)))


def activation_patching(
    handle: ModelHandle, layers: Sequence[int], source_ids: Sequence[int], target_ids: Sequence[int]
) -> Intervention:
    """h_ℓ(target) at its last token ← h_ℓ(source) at its last token for ``layers`` (CRM §4.4 finding 4)."""
    spec = PatchSpec(
        tuple(int(x) for x in layers), tuple(int(i) for i in source_ids), tuple(int(i) for i in target_ids)
    )
    return Intervention(handle, patch=spec)
