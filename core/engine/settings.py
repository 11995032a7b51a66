"""The user-visible settings of a dual-path run: one frozen object, validated in one place.

Every caller (the app's sidebar, the CLI flags, a result read back from JSON, an evaluation report) builds a
:class:`DualPathSettings`; none rebuilds it from a dict by hand: :meth:`DualPathSettings.from_dict` reads the
dict form (``result.settings``, a report's ``"settings"``) and ignores keys it does not know, so settings
written by a newer version still read back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from core.model.prompts import TEMPLATE_CHOICES


@dataclass(frozen=True)
class DualPathSettings:
    """User-visible settings of a run.

    Attributes:
        max_new_tokens: most answer tokens generated per path.
        score_window: RePCS' T, the number of leading answer positions summed into Z.
        top_k: candidates kept per position for display.
        template: a key of :data:`core.model.prompts.TEMPLATES` or ``"auto"``.
        force_length: generate exactly ``max_new_tokens`` tokens (EOS suppressed; benchmarks).
        kl_split: early/late split point of the CRM level-2 statistics.
    """

    max_new_tokens: int = 64
    score_window: int = 64
    top_k: int = 10
    template: str = "auto"
    force_length: bool = False
    kl_split: int = 32

    def validate(self) -> None:
        """Check every field.

        Raises:
            ValueError: a value out of range or an unknown template (the message gives the allowed values).
        """
        if not 1 <= self.max_new_tokens <= 1024:
            raise ValueError(f"max_new_tokens must be between 1 and 1024, got {self.max_new_tokens}")
        if not 1 <= self.score_window <= 4096:
            raise ValueError(f"score_window T must be between 1 and 4096, got {self.score_window}")
        if not 1 <= self.top_k <= 100:
            raise ValueError(f"top_k must be between 1 and 100, got {self.top_k}")
        if self.template not in TEMPLATE_CHOICES:
            raise ValueError(f"Unknown template {self.template!r}; choose one of {', '.join(TEMPLATE_CHOICES)}")
        if self.kl_split < 1:
            raise ValueError(f"kl_split must be >= 1, got {self.kl_split}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (``DualPathResult.settings``, a report's ``"settings"``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DualPathSettings:
        """Settings from their dict form; keys this version does not know are ignored, missing ones default.

        Raises:
            ValueError: ``data`` is not a dict, or a known key holds a value of the wrong type or out of range
                (``null``, ``0`` or ``""`` are refused like any other bad value, never replaced by a default).
        """
        if not isinstance(data, dict):
            raise ValueError(f"settings must be a dict, got {type(data).__name__}")
        values = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            value, kind = data[f.name], type(f.default)
            if kind in (bool, int, float, str):  # a field whose default is None takes what validate() accepts
                accepted = (int, float) if kind is float else kind
                if isinstance(value, bool) != (kind is bool) or not isinstance(value, accepted):
                    raise ValueError(f"settings {f.name!r} must be a {kind.__name__}, got {value!r}")
            values[f.name] = value
        settings = cls(**values)
        settings.validate()
        return settings
