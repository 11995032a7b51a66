"""Where a causal LM keeps its parts — the one locator of decoder layers, attention, final norm and unembedding.

Nothing else in the project spells ``model.model.layers``: every method asks :func:`model_parts`. Module
names per architecture family are data (the tuples below, in the spirit of Inseq's ``model_config.yaml``);
a new family usually needs one more name here and nothing else.

Layer numbering used everywhere: decoder layer ``ℓ`` is ``parts.layers[ℓ]`` (0-based); hidden-state arrays of
``n_layers + 1`` rows put the embedding output (the input of layer 0) at index 0 and layer ℓ's output at ℓ + 1.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

# The attribute names tried, in order, for each part (Llama/Mistral/Qwen/SmolLM/Gemma, GPT-2, GPT-NeoX …).
DECODER_OWNERS = ("model", "transformer", "gpt_neox", "base_model")
LAYER_LISTS = ("layers", "h", "blocks", "layer")
FINAL_NORMS = ("norm", "ln_f", "final_layernorm", "final_layer_norm", "norm_f", "final_norm")
ATTENTIONS = ("self_attn", "attn", "self_attention", "attention")
MLPS = ("mlp", "feed_forward", "ffn")


@dataclass(frozen=True)
class ModelParts:
    """The modules of a decoder-only LM that hooks and the logit lens need.

    Attributes:
        decoder: the module that runs the decoder layers (e.g. ``LlamaModel``).
        layers: the decoder layers in order, ``len(layers) == n_layers``.
        attentions: each layer's self-attention module (eager attention returns ``(output, weights)``).
        final_norm: the norm applied after the last decoder layer.
        unembed: the output projection (``lm_head``); its weight is ``W_U`` of shape ``(V, d)``.
        logit_scale: the factor the model multiplies its logits by after the unembedding (Cohere's
            ``logit_scale``, Granite's ``1 / logits_scaling``; 1.0 for most families).
        logit_softcap: the final soft-capping ``c`` of ``c · tanh(z / c)`` (Gemma 2/3), or ``None``.
    """

    decoder: torch.nn.Module
    layers: tuple[torch.nn.Module, ...]
    attentions: tuple[torch.nn.Module, ...]
    final_norm: torch.nn.Module
    unembed: torch.nn.Module
    logit_scale: float = 1.0
    logit_softcap: float | None = None

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def check_layers(self, layers: Any) -> list[int]:
        """``layers`` as sorted unique ints, each a valid decoder-layer index.

        Raises:
            ValueError: an index outside ``0 … n_layers − 1`` (the message lists at most five).
        """
        chosen = sorted({int(x) for x in layers})
        bad = [x for x in chosen if not 0 <= x < self.n_layers]
        if bad:
            shown = ", ".join(map(str, bad[:5])) + (" …" if len(bad) > 5 else "")
            raise ValueError(f"Layer(s) {shown} out of range 0 … {self.n_layers - 1}.")
        return chosen


def _first_module(obj: Any, names: tuple[str, ...], kind: type = torch.nn.Module) -> Any:
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, kind) and (kind is not torch.nn.ModuleList or len(value) > 0):
            return value
    return None


def _logit_transform(model: torch.nn.Module, text_config: Any) -> tuple[float, float | None]:
    """What the model does to ``lm_head``'s output before returning logits: a scale and a soft-cap."""
    scale = 1.0
    own = getattr(model, "logit_scale", None)  # Cohere / Cohere 2: logits * self.logit_scale
    if isinstance(own, (int, float)) and not isinstance(own, bool):
        scale *= float(own)
    divisor = getattr(text_config, "logits_scaling", None)  # Granite: logits / config.logits_scaling
    if isinstance(divisor, (int, float)) and not isinstance(divisor, bool) and divisor:
        scale /= float(divisor)
    cap = getattr(text_config, "final_logit_softcapping", None)  # Gemma 2 / 3: cap * tanh(logits / cap)
    return scale, float(cap) if isinstance(cap, (int, float)) and cap else None


def _decoder_candidates(model: torch.nn.Module) -> list[torch.nn.Module]:
    out: list[torch.nn.Module] = []
    get_decoder = getattr(model, "get_decoder", None)
    if callable(get_decoder):
        try:
            dec = get_decoder()
        except (AttributeError, NotImplementedError, TypeError):
            dec = None
        if isinstance(dec, torch.nn.Module) and dec is not model:
            out.append(dec)
    for name in DECODER_OWNERS:
        value = getattr(model, name, None)
        if isinstance(value, torch.nn.Module) and value is not model and value not in out:
            out.append(value)
    return out


def find_parts(model: torch.nn.Module) -> ModelParts:
    """Locate the parts of ``model`` (see :class:`ModelParts`).

    Raises:
        ValueError: when the model is not laid out like a Llama- or GPT-2-style decoder-only LM; the message
            names what is missing.
    """
    config = getattr(model, "config", None)
    text_config = config.get_text_config() if config is not None and hasattr(config, "get_text_config") else config
    n_expected = getattr(text_config, "num_hidden_layers", None)
    for decoder in _decoder_candidates(model):
        layers = _first_module(decoder, LAYER_LISTS, torch.nn.ModuleList)
        norm = _first_module(decoder, FINAL_NORMS)
        if layers is None or norm is None:
            continue
        if isinstance(n_expected, int) and len(layers) != n_expected:
            continue
        unembed = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if unembed is None:
            break
        attentions = []
        for i, layer in enumerate(layers):
            attn = _first_module(layer, ATTENTIONS)
            if attn is None:
                raise ValueError(f"Decoder layer {i} of {type(model).__name__} has no self-attention module.")
            attentions.append(attn)
        scale, cap = _logit_transform(model, text_config)
        return ModelParts(decoder, tuple(layers), tuple(attentions), norm, unembed, scale, cap)
    raise ValueError(
        f"Cannot find decoder layers, a final norm and an unembedding in {type(model).__name__}: Read or Recall "
        "supports decoder-only causal LMs laid out like Llama (model.model.layers, model.model.norm, lm_head) "
        "or GPT-2 (transformer.h, transformer.ln_f)."
    )


def model_parts(handle: Any) -> ModelParts:
    """The parts of a :class:`~core.model.handle.ModelHandle`'s model (a few attribute look-ups; not cached)."""
    return find_parts(handle.model)


def layers_take_position_ids(parts: ModelParts) -> bool:
    """Whether the decoder layers receive ``position_ids`` (interventions read token positions from it)."""
    params = inspect.signature(parts.layers[0].forward).parameters
    return "position_ids" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def layer_mlps(parts: ModelParts) -> tuple[torch.nn.Module, ...]:
    """Each decoder layer's MLP (the first of :data:`MLPS` the layer has), for hooks on its input and output.

    Raises:
        ValueError: a layer with none of those modules (the message names the layer and the names tried).
    """
    out = []
    for i, layer in enumerate(parts.layers):
        mlp = _first_module(layer, MLPS)
        if mlp is None:
            raise ValueError(f"Decoder layer {i} has no MLP module (tried {', '.join(MLPS)}).")
        out.append(mlp)
    return tuple(out)
