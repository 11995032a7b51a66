"""The shared :class:`ModelHandle`: the one door to a loaded model.

A handle bundles a causal LM, its tokenizer, a re-entrant lock and a few facts about the model. One handle is
shared by every session of the app (``st.cache_resource``), by the CLI and by the audit server, so the handle
owns its lock: callers run the model through it and never take the lock themselves.

* :meth:`ModelHandle.forward` and :meth:`ModelHandle.generate` — one call, under the lock and
  ``torch.inference_mode()``.
* :meth:`ModelHandle.session` — a context manager for a run of several calls that must not interleave with
  another session's (e.g. a hooked run: install hooks, run two passes, remove hooks). It is re-entrant, so
  ``forward``/``generate`` may be called inside it.
* :meth:`ModelHandle.hooked` — a session that registers forward hooks on entry and removes every one of them
  in ``finally``, whatever happens.

Nothing may mutate a shared handle.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import torch

HookRegistration = Callable[[], torch.utils.hooks.RemovableHandle]
"""A zero-argument callable that registers one hook and returns its removable handle."""


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message says why and what to do."""


@dataclass(frozen=True)
class ModelInfo:
    """Facts about a loaded model (all plain Python values, JSON-serializable)."""

    name: str
    source: str
    n_layers: int
    n_heads: int
    hidden_size: int
    vocab_size: int
    device: str
    dtype: str
    max_tokens: int
    has_chat_template: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ModelHandle:
    """A loaded model shared by many sessions.

    Attributes:
        model: the causal LM in eval mode.
        tokenizer: its tokenizer (never mutated).
        info: :class:`ModelInfo`.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, info: ModelInfo) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self._lock = threading.RLock()

    # -- running the model --------------------------------------------------------------------------------

    @contextmanager
    def session(self) -> Iterator[torch.nn.Module]:
        """Hold the model for a run of several calls: the lock and ``torch.inference_mode()``.

        Yields:
            The model. Re-entrant: nested sessions, ``forward`` and ``generate`` inside it are fine.
        """
        with self._lock, torch.inference_mode():
            yield self.model

    def forward(self, **inputs: Any) -> Any:
        """One forward pass ``model(**inputs)`` under the lock and inference mode."""
        with self.session() as model:
            return model(**inputs)

    def generate(self, **kwargs: Any) -> Any:
        """``model.generate(**kwargs)`` under the lock and inference mode."""
        with self.session() as model:
            return model.generate(**kwargs)

    @contextmanager
    def hooked(self, registrations: Sequence[HookRegistration]) -> Iterator[torch.nn.Module]:
        """A :meth:`session` with forward hooks: registered on entry, every one removed in ``finally``.

        Args:
            registrations: callables that each register one hook and return its handle.
        """
        with self.session() as model:
            handles: list[torch.utils.hooks.RemovableHandle] = []
            try:
                for register in registrations:
                    handles.append(register())
                yield model
            finally:
                for h in handles:
                    h.remove()

    def is_busy(self) -> bool:
        """Whether another thread holds the model right now (a hint for the UI; may change at once)."""
        acquired = self._lock.acquire(blocking=False)
        if acquired:
            self._lock.release()
        return not acquired

    # -- facts ----------------------------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def eos_token_ids(self) -> list[int]:
        """Token ids that end an answer (the generation config's and the tokenizer's)."""
        ids: list[int] = []
        gen_eos = getattr(self.model.generation_config, "eos_token_id", None)
        for value in (gen_eos, self.tokenizer.eos_token_id):
            if value is None:
                continue
            for v in value if isinstance(value, (list, tuple)) else [value]:
                if int(v) not in ids:
                    ids.append(int(v))
        return ids

    @property
    def pad_token_id(self) -> int:
        """Token id used to left-pad batches (the tokenizer's pad token, else the first EOS id)."""
        if self.tokenizer.pad_token_id is not None:
            return int(self.tokenizer.pad_token_id)
        eos = self.eos_token_ids
        return eos[0] if eos else 0

    @property
    def slug(self) -> str:
        """The file-name-safe key of this model for every per-model cache file (:func:`core.io.model_slug`)."""
        from core.io import model_slug
        from core.model.loading import EMBEDDED_NAME

        return model_slug(self.info.name, self.info.source, embedded=self.info.name == EMBEDDED_NAME)

    def decode_tokens(self, ids: list[int]) -> list[str]:
        """Each id as its own readable string (byte-level pieces decoded one by one)."""
        return [self.tokenizer.decode([int(i)]) for i in ids]

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"ModelHandle({self.info.name!r}, {self.info.device}, {self.info.dtype})"
