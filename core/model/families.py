"""The decoder families Read or Recall is tested on: each family's quirks and what it supports, with reasons.

One table (:data:`FAMILIES`, keyed by the ``model_type`` of a transformers config) that the family matrix of
the tests reads (``tests/unit/model/test_families.py`` builds a tiny random model of every row with its quirks
switched on and runs every method on it), the model picker shows and ``docs/families.md`` renders
(:func:`markdown_table`). :func:`support` answers for a loaded model: its family, the quirks its config
switches on, and every view that is unavailable for it with the reason, in one line each.

Views a family can lack (:data:`VIEWS`):

* ``mlp_split`` — a residual state *between* a layer's attention and its MLP (ReDeEP's parametric knowledge
  score reads it). Families with a parallel residual (GPT-J, Cohere, GPT-NeoX / Falcon / StableLM when
  configured so) add attention and MLP to the same input, so no such state exists; OPT runs its MLP inline in
  the decoder layer (``fc1``, ``fc2``), with no module whose input a hook could read;
* ``chat_template`` — the ``chat`` prompt template; a tokenizer without one gets the plain templates A–D.

This module imports no torch: it reads configs and module attributes only, so the app's components may use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Quirk names (what the tiny models of the matrix switch on, and what :func:`detect_quirks` reads back).
GQA = "grouped-query attention"
MQA = "multi-query attention"
SLIDING = "sliding window"
SOFTCAP = "logit soft-capping"
SANDWICH = "norms after each sub-layer"
QK_NORM = "query/key norm"
FUSED_QKV = "fused QKV"
PARALLEL = "parallel attention + MLP"
ALIBI = "ALiBi (no rotary)"
LEARNED_POS = "learned positions"
LOGIT_SCALE = "logit scaling"
TIED = "tied embeddings"
MOE = "mixture of experts"
NOPE = "layers without positions (NoPE)"

VIEWS: dict[str, str] = {
    "mlp_split": "the residual state between attention and MLP (ReDeEP's PKS, issue 24)",
    "chat_template": "the chat prompt template",
}
"""The views a model can lack, with what each needs. Everything else (dual path, hidden states, attention
entropy and mass, the logit lens, CRM, ablations, RADAR, SMA, the audit service, evaluate) works on every
family of the table."""

PARALLEL_REASON = (
    "{name} adds attention and MLP to the same input (parallel residual), so there is no state between them"
)
INLINE_MLP_REASON = "{name}'s decoder layers run their MLP inline (no MLP module whose input a hook could read)"
MLP_MODULES = ("mlp", "feed_forward", "ffn")
"""The names of a decoder layer's MLP module (as the trace API's locator reads them)."""
NO_CHAT_REASON = "the tokenizer has no chat template: the plain templates A–D are used instead"


@dataclass(frozen=True)
class Family:
    """One decoder family of the table.

    Attributes:
        key: the transformers ``model_type`` (``config.model_type``).
        name: the family's name as people say it.
        example: a public checkpoint of the family (for the docs; never downloaded by the tests).
        quirks: what the family does differently from a plain Llama, as switched on in the test matrix.
        refusals: view → reason, for the views that no model of the family supports.
        notes: anything a user should know (e.g. a view that depends on the checkpoint's config).
    """

    key: str
    name: str
    example: str
    quirks: tuple[str, ...]
    refusals: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""


def _parallel(name: str) -> dict[str, str]:
    return {"mlp_split": PARALLEL_REASON.format(name=name)}


FAMILIES: dict[str, Family] = {
    f.key: f
    for f in (
        Family("llama", "Llama 2/3", "meta-llama/Llama-3.2-1B-Instruct", (GQA,)),
        Family("mistral", "Mistral", "mistralai/Mistral-7B-Instruct-v0.3", (GQA, SLIDING)),
        Family("qwen2", "Qwen2 / Qwen2.5", "Qwen/Qwen2.5-0.5B-Instruct", (GQA, SLIDING, TIED)),
        Family("qwen3", "Qwen3", "Qwen/Qwen3-0.6B", (GQA, QK_NORM, TIED)),
        Family("gemma", "Gemma", "google/gemma-2b-it", (GQA, TIED)),
        Family("gemma2", "Gemma 2", "google/gemma-2-2b-it", (GQA, SLIDING, SOFTCAP, SANDWICH, TIED)),
        Family("gemma3_text", "Gemma 3", "google/gemma-3-1b-it", (GQA, SLIDING, SOFTCAP, SANDWICH, QK_NORM, TIED)),
        Family("phi3", "Phi-3", "microsoft/Phi-3-mini-4k-instruct", (GQA, FUSED_QKV)),
        Family("gpt2", "GPT-2", "openai-community/gpt2", (FUSED_QKV, LEARNED_POS, TIED)),
        Family("gptj", "GPT-J", "EleutherAI/gpt-j-6b", (PARALLEL,), _parallel("GPT-J")),
        Family(
            "gpt_neox",
            "GPT-NeoX / Pythia",
            "EleutherAI/pythia-160m",
            (FUSED_QKV, PARALLEL),
            notes="parallel residual is a config switch (use_parallel_residual, on in Pythia)",
        ),
        Family(
            "falcon",
            "Falcon",
            "tiiuae/falcon-7b-instruct",
            (MQA, FUSED_QKV, PARALLEL, TIED),
            notes="parallel residual (parallel_attn) and ALiBi (alibi, Falcon-RW) are config switches, both tested",
        ),
        Family(
            "opt", "OPT", "facebook/opt-125m", (LEARNED_POS, TIED), {"mlp_split": INLINE_MLP_REASON.format(name="OPT")}
        ),
        Family("bloom", "BLOOM", "bigscience/bloomz-560m", (ALIBI, FUSED_QKV, TIED)),
        Family(
            "mpt",
            "MPT",
            "mosaicml/mpt-7b-instruct",
            (ALIBI, FUSED_QKV, TIED),
            notes="generates without a KV cache in the pinned transformers (every step re-runs the whole sequence)",
        ),
        Family("olmo2", "OLMo 2", "allenai/OLMo-2-0425-1B-Instruct", (GQA, SANDWICH, QK_NORM)),
        Family(
            "stablelm",
            "StableLM",
            "stabilityai/stablelm-2-1_6b-chat",
            (GQA, QK_NORM, PARALLEL),
            notes="parallel residual is a config switch (use_parallel_residual)",
        ),
        Family("granite", "Granite", "ibm-granite/granite-3.1-2b-instruct", (GQA, LOGIT_SCALE)),
        Family("cohere", "Cohere (Command R)", "CohereForAI/c4ai-command-r-v01", (GQA, PARALLEL, LOGIT_SCALE, TIED)),
        Family(
            "cohere2",
            "Cohere 2 (Command R7B)",
            "CohereLabs/c4ai-command-r7b-12-2024",
            (GQA, SLIDING, PARALLEL, LOGIT_SCALE, TIED),
            _parallel("Cohere 2"),
        ),
        Family("phi", "Phi-1/2", "microsoft/phi-2", (PARALLEL,), _parallel("Phi-2")),
        Family(
            "gpt_bigcode", "GPT-BigCode (StarCoder)", "bigcode/tiny_starcoder_py", (MQA, FUSED_QKV, LEARNED_POS, TIED)
        ),
        Family("starcoder2", "StarCoder2", "bigcode/starcoder2-3b", (GQA, SLIDING, TIED)),
        Family("mixtral", "Mixtral", "mistralai/Mixtral-8x7B-Instruct-v0.1", (GQA, SLIDING, MOE)),
        Family("smollm3", "SmolLM3", "HuggingFaceTB/SmolLM3-3B", (GQA, NOPE, TIED)),
    )
}


def _text_config(config: Any) -> Any:
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _first(config: Any, *names: str) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return None


def family_of(config: Any) -> Family | None:
    """The :class:`Family` of a transformers config (by ``model_type``), or ``None`` for one not in the table."""
    return FAMILIES.get(str(getattr(_text_config(config), "model_type", "")))


def parallel_residual(config: Any) -> bool:
    """Whether the decoder layers add attention and MLP to the same input (no state between them)."""
    cfg = _text_config(config)
    kind = getattr(cfg, "model_type", "")
    if kind in {"gptj", "cohere", "cohere2", "phi"}:
        return True
    if kind == "falcon":
        return bool(getattr(cfg, "parallel_attn", False) or getattr(cfg, "new_decoder_architecture", False))
    return bool(getattr(cfg, "use_parallel_residual", False))


def detect_quirks(model: Any) -> set[str]:
    """The quirks a loaded model's config and modules switch on (names as in :class:`Family`'s ``quirks``)."""
    cfg = _text_config(model.config)
    kind = getattr(cfg, "model_type", "")
    out: set[str] = set()
    heads = _first(cfg, "num_attention_heads", "n_head", "n_heads")
    kv = _first(cfg, "num_key_value_heads", "num_kv_heads")
    if kind == "falcon" and getattr(cfg, "multi_query", False) and not getattr(cfg, "new_decoder_architecture", False):
        kv = 1
    if isinstance(heads, int) and isinstance(kv, int) and kv < heads:
        out.add(MQA if kv == 1 else GQA)
    window = getattr(cfg, "sliding_window", None)
    if isinstance(window, int) and window > 0 and getattr(cfg, "use_sliding_window", True) is not False:
        out.add(SLIDING)
    if getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "attn_logit_softcapping", None):
        out.add(SOFTCAP)
    if parallel_residual(cfg):
        out.add(PARALLEL)
    if kind in {"bloom", "mpt"} or getattr(cfg, "alibi", False):
        out.add(ALIBI)
    if getattr(cfg, "logits_scaling", 1.0) not in (None, 1.0) or getattr(model, "logit_scale", 1.0) not in (None, 1.0):
        out.add(LOGIT_SCALE)
    if hasattr(model, "get_input_embeddings") and hasattr(model, "get_output_embeddings"):
        inp, outp = model.get_input_embeddings(), model.get_output_embeddings()
        if inp is not None and outp is not None and inp.weight.data_ptr() == outp.weight.data_ptr():
            out.add(TIED)
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    if names & {"qkv_proj", "c_attn", "query_key_value", "Wqkv"}:
        out.add(FUSED_QKV)
    if names & {"q_norm", "k_norm", "q_layernorm", "k_layernorm"}:
        out.add(QK_NORM)
    if "post_feedforward_layernorm" in names:
        out.add(SANDWICH)
    if names & {"wpe", "embed_positions"}:
        out.add(LEARNED_POS)
    if names & {"experts", "block_sparse_moe"}:
        out.add(MOE)
    if any(not flag for flag in getattr(cfg, "no_rope_layers", None) or ()):
        out.add(NOPE)
    return out


@dataclass(frozen=True)
class Support:
    """What a loaded model supports.

    Attributes:
        family: its row of the table, or ``None`` (a family the matrix does not test).
        quirks: what its config switches on (:func:`detect_quirks`).
        unavailable: view → reason, for every view of :data:`VIEWS` it lacks.
    """

    family: Family | None
    quirks: frozenset[str]
    unavailable: Mapping[str, str]

    def lines(self) -> list[str]:
        """One line per unavailable view: ``"<what the view is> is unavailable: <reason>."``."""
        return [
            f"{VIEWS[view][0].upper()}{VIEWS[view][1:]} is unavailable: {why}."
            for view, why in self.unavailable.items()
        ]

    def summary(self) -> str:
        """One line: the family (or that it is untested) and its quirks."""
        name = self.family.name if self.family else "a family outside the tested matrix"
        quirks = ", ".join(sorted(self.quirks)) or "no special quirks"
        return f"{name}: {quirks}."


def support(model: Any, tokenizer: Any = None) -> Support:
    """What ``model`` (a loaded causal LM) supports, with ``tokenizer`` deciding the chat template.

    Args:
        model: a transformers causal LM (the handle's ``model``).
        tokenizer: its tokenizer; ``None`` leaves the chat template out of the answer.
    """
    from core.model.parts import find_parts  # torch only when asked about a loaded model

    family = family_of(model.config)
    name = family.name if family else "this model"
    unavailable: dict[str, str] = {}
    if parallel_residual(model.config):
        unavailable["mlp_split"] = PARALLEL_REASON.format(name=name)
    elif not all(any(hasattr(layer, m) for m in MLP_MODULES) for layer in find_parts(model).layers):
        unavailable["mlp_split"] = INLINE_MLP_REASON.format(name=name)
    if tokenizer is not None and not getattr(tokenizer, "chat_template", None):
        unavailable["chat_template"] = NO_CHAT_REASON
    return Support(family, frozenset(detect_quirks(model)), unavailable)


def handle_support(handle: Any) -> Support:
    """:func:`support` of a :class:`~core.model.handle.ModelHandle`'s model and tokenizer (nothing to say, i.e. an
    empty :class:`Support`, for a stand-in without a model, such as the CLI tests' stubs)."""
    model = getattr(handle, "model", None)
    if model is None or not hasattr(model, "config"):
        return Support(None, frozenset(), {})
    return support(model, getattr(handle, "tokenizer", None))


def picker_caption() -> str:
    """The model picker's one-line caption: the families the test matrix covers."""
    names = ", ".join(f.name for f in FAMILIES.values())
    return f"Tested families ({len(FAMILIES)}): {names}. Others may work; see docs/families.md."


def markdown_table() -> str:
    """The support table as Markdown (``docs/families.md`` holds its output)."""
    head = "| family | `model_type` | example checkpoint | quirks | unavailable views |\n|---|---|---|---|---|\n"
    rows = []
    for f in FAMILIES.values():
        refused = "; ".join(f"**{view}**: {why}" for view, why in f.refusals.items()) or "none"
        if f.notes:
            refused += f" ({f.notes})"
        rows.append(f"| {f.name} | `{f.key}` | `{f.example}` | {', '.join(f.quirks)} | {refused} |")
    return head + "\n".join(rows) + "\n"
