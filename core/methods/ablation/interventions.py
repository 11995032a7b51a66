"""Causal interventions on decoder layers: noise injection and activation patching (CRM §4.4, appendix J).

Both are context managers over a shared :class:`~core.models.ModelHandle`. On entry they take
``handle.lock`` (re-entrant) and register forward hooks on the chosen decoder layers; on exit they remove
every hook they registered — in ``finally``, so also after an exception raised inside a hooked forward —
and release the lock. Hooks are global state on a model that every browser session shares; because the
lock is held for the whole hooked run and every forward pass in the code base takes the same lock, no other
session's run can ever execute while the hooks are installed.

Usage::

    with noise_injection(handle, layers=[4, 5, 6, 7, 8], eps=0.5, seed=0):
        perturbed = run_dual_path(handle, query, context, settings)

    with intervene(handle, noise=NoiseSpec((4, 5), 0.5, seed=1), patch=PatchSpec((10,), para_ids, rag_ids)):
        ...

**Noise injection** (CRM §4.4 and appendix J)::

    h′ = h + ε · σ(h) · N(0, 1)

at the output of each chosen decoder layer, at every token position, on every forward pass made while the
context is active (both paths, the prompt and every generated token).

* σ(h): CRM appendix J calls it "the per-layer activation standard deviation, computed batch-wise", i.e.
  one scalar over the whole batch tensor. That scalar depends on what else is in the batch (padding, the
  other path's row, the prompt length) and, under token-by-token generation with a KV cache, on how the
  forward was chunked — so the same token would get a different noise scale in a batched and an unbatched
  run. We therefore use **σ per token over the hidden dimension** (population standard deviation,
  ``correction=0``, float32): each position gets noise of the same relative size ε against its own
  activation scale, independent of batching, padding and chunking. (In residual streams with a few
  "massive activation" positions a batch-wise scalar would be dominated by those positions.)
* N(0, 1): a vector in R^d drawn for each ``(seed, layer, position)`` from a seeded
  :class:`torch.Generator` — never the global RNG. ``position`` is the token's position id in its own
  sequence (0 = first prompt token, left padding excluded, as the model's rotary embeddings see it).
  Noise is generated in blocks of :data:`NOISE_BLOCK` positions: block ``k`` of layer ``ℓ`` is
  ``randn(NOISE_BLOCK, d)`` from a generator seeded with ``SeedSequence([seed, ℓ, k])``, and position ``p``
  takes row ``p mod NOISE_BLOCK`` of block ``p // NOISE_BLOCK``. So the noise at a position never depends on
  how the forward pass was chunked (one prefill + token-by-token decoding gives the same noise as one full
  teacher-forced pass), on batching, or on the other path.
* "Same seed on both paths": both paths see the same noise *field* z(seed, ℓ, p). Positions they share —
  the common prompt prefix (chat template, system text) — get identical noise; because the retrieval prompt
  is longer, the answer tokens sit at different positions on the two paths and get different draws from
  the same field, as two separately seeded forward passes of the paper would.

**Activation patching** (CRM §4.4 finding 4): replace h_ℓ(context) at the last prompt token with
h_ℓ(no context) — the output of decoder layer ℓ at the last token of the parametric prompt — for the chosen
layers, then generate. The source states are computed once on entry. The replacement is made in every
forward pass whose row contains the whole retrieval prompt ending at its last position (the generation's
prefill, a teacher-forced pass over prompt + answer); other rows (the parametric prompt) are untouched.
With a KV cache the patched state reaches every later token through attention, as in an unbatched run.

Layer numbering: decoder layer ℓ (0-based) is ``hidden_states[ℓ + 1]`` (CONTRIBUTING.md). Hooks are
registered with ``prepend=True`` so that ``output_hidden_states`` (transformers records it with its own
forward hooks) reports the perturbed states. When two intervention contexts are nested, the inner one's
hooks run first at a shared layer.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np
import torch

from core.model.loading import ModelHandle

logger = logging.getLogger(__name__)

NOISE_BLOCK = 64
"""Positions per independently seeded block of the noise field."""

PRESETS = ("early", "middle", "late", "control", "all")
"""Named layer sets: the three thirds of the decoder stack, CRM's ``early_control`` block (layers 0–7, the
paper's universal baseline in Table 5) and every layer."""

CONTROL_BLOCK = 8
"""CRM Table 5's early_control block: decoder layers 0 … 7."""

MAX_EPS = 100.0
HOOK_MARK = "_read_or_recall_intervention"
"""Attribute set on every hook function this module registers (lets tests find leftovers)."""


# ----------------------------------------------------------------------------------------------------------
# The decoder stack


def decoder_stack(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.ModuleList]:
    """The module that runs the decoder layers and the list of layers, for Llama-like HF models.

    Looks for ``model.model.layers`` (Llama, Mistral, Qwen2, Gemma, SmolLM …), then ``model.base_model.layers``
    and ``model.get_decoder().layers``. The layers must be an ``nn.ModuleList`` of as many layers as the
    config's ``num_hidden_layers`` whose ``forward`` takes ``position_ids`` (the hooks read token positions
    from it).

    Raises:
        ValueError: when no such list exists (e.g. GPT-2's ``transformer.h``), with what was found.
    """
    config = getattr(model, "config", None)
    text_config = config.get_text_config() if config is not None and hasattr(config, "get_text_config") else config
    n_expected = getattr(text_config, "num_hidden_layers", None)
    owners: list[torch.nn.Module] = []
    for getter in (
        lambda: getattr(model, "model", None),
        lambda: getattr(model, "base_model", None),
        lambda: model.get_decoder() if hasattr(model, "get_decoder") else None,
    ):
        try:
            owner = getter()
        except Exception:  # noqa: BLE001 - a model without that accessor
            owner = None
        if isinstance(owner, torch.nn.Module) and owner not in owners:
            owners.append(owner)
    for owner in owners:
        layers = getattr(owner, "layers", None)
        if not isinstance(layers, torch.nn.ModuleList) or len(layers) == 0:
            continue
        if n_expected is not None and len(layers) != int(n_expected):
            continue
        params = inspect.signature(layers[0].forward).parameters
        if "position_ids" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            continue
        return owner, layers
    raise ValueError(
        f"Interventions need a Llama-like decoder (`model.model.layers`, a list of {n_expected} decoder layers "
        f"that receive position_ids); {type(model).__name__} has none. Supported: Llama, Mistral, Qwen2, "
        "Gemma, SmolLM and other models laid out like them."
    )


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder layers of a Llama-like model (see :func:`decoder_stack`)."""
    return decoder_stack(model)[1]


# ----------------------------------------------------------------------------------------------------------
# Layer sets


def layer_preset(name: str, n_layers: int) -> list[int]:
    """A named layer set: ``early``/``middle``/``late`` thirds (bounds ``round(i·L/3)``), ``control`` (CRM's
    early_control block, layers 0–7) or ``all``.

    For 30 layers: early 0–9, middle 10–19, late 20–29, control 0–7.
    """
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    key = name.strip().lower()
    if key == "all":
        return list(range(n_layers))
    if key == "control":
        return list(range(min(CONTROL_BLOCK, n_layers)))
    bounds = [round(i * n_layers / 3) for i in range(4)]
    thirds = {"early": (bounds[0], bounds[1]), "middle": (bounds[1], bounds[2]), "late": (bounds[2], bounds[3])}
    if key not in thirds:
        raise ValueError(f"Unknown layer preset {name!r}; choose one of {', '.join(PRESETS)}")
    lo, hi = thirds[key]
    if hi <= lo:  # fewer than three layers: a third may be empty; fall back to the nearest layer
        return [min(lo, n_layers - 1)]
    return list(range(lo, hi))


def parse_layers(spec: str | int | Sequence[int], n_layers: int) -> list[int]:
    """Decoder layers (0-based, sorted, unique) from ``"4-8"``, ``"3"``, ``"1,3,5-7"``, a preset name
    (``early``, ``middle``, ``late``, ``control``, ``all``; may be mixed with numbers in a comma list) or a list of ints.

    Raises:
        ValueError: for an empty set, a malformed item or a layer outside ``0 … n_layers − 1``.
    """
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    out: set[int] = set()
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        items: list[Any] = [int(spec)]
    elif isinstance(spec, str):
        items = [s.strip() for s in spec.split(",") if s.strip()]
    else:
        items = list(spec)
    for item in items:
        if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            out.add(int(item))
            continue
        text = str(item).strip().lower()
        if text in PRESETS:
            out.update(layer_preset(text, n_layers))
            continue
        parts = text.split("-")
        try:
            if len(parts) == 1:
                out.add(int(parts[0]))
            elif len(parts) == 2:
                lo, hi = int(parts[0]), int(parts[1])
                if hi < lo:
                    raise ValueError(f"layer range {item!r} runs backwards")
                out.update(range(lo, hi + 1))
            else:
                raise ValueError
        except ValueError as exc:
            if "backwards" in str(exc):
                raise
            raise ValueError(
                f"Cannot read layer {item!r}: use a layer number, a range like 4-8, a comma list, or one of "
                f"{', '.join(PRESETS)}"
            ) from None
    if not out:
        raise ValueError("No layers chosen: give at least one decoder layer.")
    bad = sorted(x for x in out if not 0 <= x < n_layers)
    if bad:
        raise ValueError(f"Layer(s) {bad} out of range: this model has decoder layers 0 … {n_layers - 1}.")
    return sorted(out)


def format_layers(layers: Sequence[int]) -> str:
    """``[4, 5, 6, 9]`` → ``"4-6,9"`` (the inverse of :func:`parse_layers` for numbers)."""
    xs = sorted({int(x) for x in layers})
    parts: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if i == j else f"{xs[i]}-{xs[j]}")
        i = j + 1
    return ",".join(parts)


# ----------------------------------------------------------------------------------------------------------
# Specifications


@dataclass(frozen=True)
class NoiseSpec:
    """Noise injection h′ = h + ε·σ(h)·N(0, 1) at the output of ``layers`` (CRM §4.4).

    Attributes:
        layers: decoder layers (0-based).
        eps: ε ≥ 0, the noise scale relative to each token's activation standard deviation.
        seed: seeds the noise field z(seed, layer, position).
    """

    layers: tuple[int, ...]
    eps: float
    seed: int = 0

    def validate(self, n_layers: int) -> None:
        if not self.layers:
            raise ValueError("Noise needs at least one layer.")
        bad = [x for x in self.layers if not 0 <= int(x) < n_layers]
        if bad:
            raise ValueError(f"Noise layer(s) {bad} out of range 0 … {n_layers - 1}.")
        if not isinstance(self.eps, (int, float)) or not math.isfinite(self.eps) or not 0 <= self.eps <= MAX_EPS:
            raise ValueError(f"ε must be a finite number in [0, {MAX_EPS:g}], got {self.eps!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be an integer in [0, 2^63), got {self.seed!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "noise",
            "layers": [int(x) for x in self.layers],
            "eps": float(self.eps),
            "seed": int(self.seed),
            "sigma": "per-token std over the hidden dimension (population)",
            "noise_keyed_by": "(seed, layer, position id)",
        }


@dataclass(frozen=True)
class PatchSpec:
    """Activation patching: h_ℓ(target prompt) at its last token ← h_ℓ(source prompt) at its last token.

    Attributes:
        layers: decoder layers (0-based) to patch.
        source_ids: the prompt the states are taken from (the parametric, no-context prompt).
        target_ids: the prompt whose last-token states are replaced (the retrieval prompt).
    """

    layers: tuple[int, ...]
    source_ids: tuple[int, ...]
    target_ids: tuple[int, ...]

    def validate(self, n_layers: int) -> None:
        if not self.layers:
            raise ValueError("Patching needs at least one layer.")
        bad = [x for x in self.layers if not 0 <= int(x) < n_layers]
        if bad:
            raise ValueError(f"Patch layer(s) {bad} out of range 0 … {n_layers - 1}.")
        if not self.source_ids or not self.target_ids:
            raise ValueError("Patching needs a non-empty source prompt and target prompt.")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "patch",
            "layers": [int(x) for x in self.layers],
            "source_prompt_len": len(self.source_ids),
            "target_prompt_len": len(self.target_ids),
            "position": "last prompt token",
        }


# ----------------------------------------------------------------------------------------------------------
# The noise field


def _block_seed(seed: int, layer: int, block: int) -> int:
    """A 64-bit generator seed for one block, mixed from (seed, layer, block) by NumPy's SeedSequence."""
    return int(np.random.SeedSequence([int(seed), int(layer), int(block)]).generate_state(1, dtype=np.uint64)[0])


def noise_block(seed: int, layer: int, block: int, hidden_size: int) -> torch.Tensor:
    """Block ``block`` of the noise field of ``layer``: ``(NOISE_BLOCK, hidden_size)`` float32 N(0, 1) on CPU."""
    gen = torch.Generator(device="cpu").manual_seed(_block_seed(seed, layer, block))
    return torch.randn((NOISE_BLOCK, hidden_size), generator=gen, dtype=torch.float32)


def noise_field(seed: int, layer: int, positions: Sequence[int] | torch.Tensor, hidden_size: int) -> torch.Tensor:
    """z(seed, layer, p) for each position ``p``: shape ``(len(positions), hidden_size)``, float32, CPU.

    Deterministic and independent of how positions are grouped: the value for ``p`` is row
    ``p mod NOISE_BLOCK`` of :func:`noise_block` ``(seed, layer, p // NOISE_BLOCK)``.
    """
    pos = torch.as_tensor(positions, dtype=torch.long).reshape(-1)
    if pos.numel() and int(pos.min()) < 0:
        raise ValueError("positions must be >= 0")
    out = torch.empty((pos.numel(), hidden_size), dtype=torch.float32)
    for block in torch.unique(pos // NOISE_BLOCK).tolist():
        rows = (pos // NOISE_BLOCK) == block
        out[rows] = noise_block(seed, layer, block, hidden_size)[pos[rows] % NOISE_BLOCK]
    return out


class _NoiseTable:
    """The noise field of one seed, cached per layer as a growing ``(n_positions, d)`` table."""

    def __init__(self, seed: int, hidden_size: int) -> None:
        self.seed = seed
        self.hidden_size = hidden_size
        self._tables: dict[int, torch.Tensor] = {}

    def lookup(self, layer: int, positions: torch.Tensor) -> torch.Tensor:
        """z for a ``(B, S)`` tensor of positions: ``(B, S, d)`` float32 on CPU."""
        if positions.numel() == 0:
            return torch.zeros((*positions.shape, self.hidden_size), dtype=torch.float32)
        needed = int(positions.max()) + 1
        table = self._tables.get(layer, torch.empty((0, self.hidden_size), dtype=torch.float32))
        if needed > table.shape[0]:
            first, n_blocks = table.shape[0] // NOISE_BLOCK, -(-needed // NOISE_BLOCK)
            new = [noise_block(self.seed, layer, k, self.hidden_size) for k in range(first, n_blocks)]
            table = torch.cat([table, *new], dim=0)
            self._tables[layer] = table
        return table[positions]


def token_sigma(hidden: torch.Tensor) -> torch.Tensor:
    """σ(h) per token: the population standard deviation over the hidden dimension, float32, ``(..., 1)``."""
    return hidden.float().std(dim=-1, keepdim=True, correction=0)


def apply_noise(hidden: torch.Tensor, z: torch.Tensor, eps: float) -> torch.Tensor:
    """h′ = h + ε · σ(h) · z, computed in float32 and returned in ``hidden``'s dtype.

    Args:
        hidden: ``(..., d)`` layer output.
        z: ``(..., d)`` standard normal draws (same leading shape).
        eps: ε ≥ 0.
    """
    h32 = hidden.float()
    return (h32 + eps * token_sigma(h32) * z.to(device=h32.device, dtype=torch.float32)).to(hidden.dtype)


# ----------------------------------------------------------------------------------------------------------
# Hook plumbing


def _mark(fn: Any) -> Any:
    setattr(fn, HOOK_MARK, True)
    return fn


def _hidden_of(output: Any) -> torch.Tensor:
    if torch.is_tensor(output):
        return output
    if isinstance(output, (tuple, list)) and output and torch.is_tensor(output[0]):
        return output[0]
    raise TypeError(f"unexpected decoder layer output of type {type(output).__name__}")


def _with_hidden(output: Any, hidden: torch.Tensor) -> Any:
    if torch.is_tensor(output):
        return hidden
    return type(output)([hidden, *output[1:]]) if isinstance(output, tuple) else [hidden, *output[1:]]


def _positions(kwargs: dict[str, Any], hidden: torch.Tensor) -> torch.Tensor:
    """Position ids ``(B, S)`` (CPU, long) of the tokens in this forward, as the layer receives them."""
    batch, seq = hidden.shape[0], hidden.shape[1]
    pos = kwargs.get("position_ids")
    if pos is None:
        pos = kwargs.get("cache_position")
    if pos is None:
        cache = kwargs.get("past_key_values")
        past = 0
        if cache is not None and hasattr(cache, "get_seq_length"):
            past = int(cache.get_seq_length())
        pos = torch.arange(past, past + seq)
    pos = torch.as_tensor(pos).detach().to("cpu", torch.long)
    if pos.ndim == 3:  # multimodal rotary variants: (3, B, S); the first is the text position
        pos = pos[0]
    if pos.ndim == 1:
        pos = pos.unsqueeze(0)
    if pos.shape[-1] != seq:
        raise RuntimeError(f"position ids of length {pos.shape[-1]} for a forward over {seq} tokens")
    return pos.expand(batch, seq)


def _stack_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[torch.Tensor | None, torch.Tensor | None, Any]:
    input_ids = kwargs.get("input_ids")
    if input_ids is None and args and torch.is_tensor(args[0]) and not args[0].is_floating_point():
        input_ids = args[0]
    return input_ids, kwargs.get("position_ids"), kwargs.get("past_key_values")


def count_hooks(module: torch.nn.Module) -> int:
    """All forward/backward (pre-)hooks on ``module`` and every submodule (ours and anyone else's)."""
    total = 0
    for m in module.modules():
        for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
            total += len(getattr(m, name, {}) or {})
    return total


def count_intervention_hooks(module: torch.nn.Module) -> int:
    """Hooks registered by this module (marked with :data:`HOOK_MARK`) left on ``module`` or a submodule."""
    total = 0
    for m in module.modules():
        for name in ("_forward_hooks", "_forward_pre_hooks"):
            total += sum(1 for fn in (getattr(m, name, {}) or {}).values() if getattr(fn, HOOK_MARK, False))
    return total


# ----------------------------------------------------------------------------------------------------------
# Capturing layer outputs


@contextmanager
def capture_layer_outputs(handle: ModelHandle, layers: Sequence[int]) -> Iterator[dict[int, list[torch.Tensor]]]:
    """Record the raw output of each chosen decoder layer on every forward pass inside the block.

    Yields a dict ``layer → [tensor (B, S, d) per forward]`` (CPU copies). The capture hooks are appended
    after any intervention hooks, so they see the output *after* interventions (the state the next layer
    receives). Holds ``handle.lock``; hooks are removed in ``finally``.
    """
    _, stack_layers = decoder_stack(handle.model)
    chosen = sorted({int(x) for x in layers})
    bad = [x for x in chosen if not 0 <= x < len(stack_layers)]
    if bad:
        raise ValueError(f"Layer(s) {bad} out of range 0 … {len(stack_layers) - 1}.")
    records: dict[int, list[torch.Tensor]] = {x: [] for x in chosen}
    handles: list[Any] = []
    with handle.lock:
        try:
            for layer in chosen:

                def hook(module: Any, args: Any, output: Any, _layer: int = layer) -> None:
                    records[_layer].append(_hidden_of(output).detach().to("cpu").clone())

                handles.append(stack_layers[layer].register_forward_hook(_mark(hook)))
            yield records
        finally:
            for h in handles:
                h.remove()


def last_token_states(handle: ModelHandle, ids: Sequence[int], layers: Sequence[int]) -> dict[int, torch.Tensor]:
    """The output of each decoder layer in ``layers`` at the last token of ``ids`` (one forward, no cache).

    Returns ``layer → (d,)`` tensors in the model's dtype, on the model's device.
    """
    if not ids:
        raise ValueError("ids is empty")
    x = torch.tensor([list(ids)], dtype=torch.long, device=handle.device)
    with handle.lock, torch.inference_mode(), capture_layer_outputs(handle, layers) as rec:
        try:
            handle.model(input_ids=x, use_cache=False, logits_to_keep=1)
        except TypeError:  # a model class without logits_to_keep
            handle.model(input_ids=x, use_cache=False)
    return {layer: rec[layer][-1][0, -1].to(handle.device) for layer in rec}


# ----------------------------------------------------------------------------------------------------------
# The intervention context manager


@dataclass
class InterventionStats:
    """What an intervention actually did (filled while it is active).

    Attributes:
        noised_forwards: per noised layer, how many forward passes it perturbed.
        patched_sites: (row, position) replacements made, summed over layers and forwards.
    """

    noised_forwards: dict[int, int] = field(default_factory=dict)
    patched_sites: int = 0


class Intervention:
    """Noise injection and/or activation patching on a shared model, as one context manager.

    Entering takes ``handle.lock`` (held until exit), computes the patch source states (clean: before this
    intervention's own hooks exist) and registers one forward hook per affected decoder layer (plus, for
    patching, a pre-hook on the decoder stack that finds the target prompt's rows). At a layer that is both
    patched and noised, the patch is applied first, then the noise (every position is noised). Exiting
    removes every hook in ``finally`` and releases the lock. An instance can be entered once.

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
        self.stack, self.layers = decoder_stack(handle.model)
        n = len(self.layers)
        if noise is not None:
            noise.validate(n)
        if patch is not None:
            patch.validate(n)
        self.noise = noise
        self.patch = patch
        self.stats = InterventionStats()
        self._handles: list[Any] = []
        self._entered = False
        self._locked = False
        self._sources: dict[int, torch.Tensor] = {}
        self._sites: list[tuple[int, int]] = []
        self._table = _NoiseTable(noise.seed, handle.info.hidden_size) if noise is not None else None

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
        self.handle.lock.acquire()
        self._locked = True
        try:
            if self.patch is not None:
                self._sources = last_token_states(self.handle, self.patch.source_ids, self.patch.layers)

                def find_sites(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
                    self._find_patch_sites(args, kwargs)

                def clear_sites(module: Any, args: Any, output: Any) -> None:
                    self._sites = []

                self._handles.append(self.stack.register_forward_pre_hook(_mark(find_sites), with_kwargs=True))
                self._handles.append(self.stack.register_forward_hook(_mark(clear_sites), always_call=True))
            affected = set(self.noise.layers if self.noise else ()) | set(self.patch.layers if self.patch else ())
            for layer in sorted(affected):
                hook = _mark(self._make_layer_hook(layer))
                self._handles.append(self.layers[layer].register_forward_hook(hook, with_kwargs=True, prepend=True))
        except BaseException:
            self._release()
            raise
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool:
        self._release()
        return False

    def _release(self) -> None:
        try:
            while self._handles:
                self._handles.pop().remove()
            self._sites = []
        finally:
            if self._locked:
                self._locked = False
                self.handle.lock.release()

    # -- hooks ----------------------------------------------------------------------------------------------

    def _find_patch_sites(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Stack pre-hook: the (row, column) of every row whose tokens end the target prompt at its last
        position (position id ``len(target) − 1`` and the preceding tokens equal the target prompt)."""
        self._sites = []
        if self.patch is None:
            return
        input_ids, position_ids, cache = _stack_inputs(args, kwargs)
        if input_ids is None:
            return
        ids = input_ids.detach().to("cpu")
        if position_ids is None:
            past = int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else 0
            pos = torch.arange(past, past + ids.shape[1]).unsqueeze(0)
        else:
            pos = position_ids.detach().to("cpu", torch.long)
            pos = pos[0] if pos.ndim == 3 else pos
        pos = pos.expand(ids.shape[0], ids.shape[1])
        target = torch.tensor(self.patch.target_ids, dtype=ids.dtype)
        last = len(target) - 1
        for row in range(ids.shape[0]):
            cols = (pos[row] == last).nonzero().flatten().tolist()
            for col in cols:
                if col >= last and torch.equal(ids[row, col - last : col + 1], target):
                    self._sites.append((row, col))
                    break

    def _make_layer_hook(self, layer: int) -> Any:
        noise = self.noise if self.noise is not None and layer in self.noise.layers else None
        patched = self.patch is not None and layer in self.patch.layers

        def hook(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
            hidden = _hidden_of(output)
            new = hidden
            if patched and self._sites:
                new = hidden.clone()
                source = self._sources[layer].to(device=new.device, dtype=new.dtype)
                for row, col in self._sites:
                    new[row, col] = source
                self.stats.patched_sites += len(self._sites)
            if noise is not None and self._table is not None:
                positions = _positions(kwargs, hidden)
                z = self._table.lookup(layer, positions)
                new = apply_noise(new, z, noise.eps)
                self.stats.noised_forwards[layer] = self.stats.noised_forwards.get(layer, 0) + 1
            return output if new is hidden else _with_hidden(output, new)

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
    spec = PatchSpec(tuple(int(x) for x in layers), tuple(int(i) for i in source_ids), tuple(int(i) for i in target_ids))
    return Intervention(handle, patch=spec)
