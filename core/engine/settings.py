"""The user-visible settings of a dual-path run: one frozen object, each field defined once.

Every caller (the app's sidebar, the CLI flags, a result read back from JSON, an evaluation report) builds a
:class:`DualPathSettings`; none rebuilds it from a dict by hand: :meth:`DualPathSettings.from_dict` reads the
dict form (``result.settings``, a report's ``"settings"``) and ignores keys it does not know, so settings
written by a newer version still read back.

**Settings as data** (as Inseq does with its argument dataclasses): each field carries one :class:`Setting`
in its metadata (bounds, label, help, unit, CLI flag, widget kind). :meth:`DualPathSettings.validate`, the
CLI flags (:func:`core.cli.common.add_model_args`) and the sidebar widgets
(:func:`components.widgets.settings_widget_specs`) are all generated from it, so a bound is written once and
an out-of-range value gets the same message (:meth:`Setting.check`) wherever it comes from. Adding a setting
is adding one field here (see CONTRIBUTING.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from core.model.prompts import TEMPLATE_CHOICES

SLIDER = "slider"
NUMBER = "number"
SELECT = "select"


@dataclass(frozen=True)
class Setting:
    """One setting's definition: what its CLI flag, its sidebar widget and its validation are built from.

    Attributes:
        label: the sidebar widget's label.
        help: one sentence saying what it does (widget tooltip and CLI ``--help``).
        low: the smallest value accepted (numbers), inclusive.
        high: the largest value accepted (numbers), inclusive; public mode may lower the widget's maximum
            further (:meth:`core.public.PublicPolicy.limit`), never raise it.
        step: the widget's step (numbers).
        unit: the value's unit (``"tokens"``, ``"candidates"``), or ``""``.
        choices: the accepted values of a choice setting (its widget is a select box), else ``None``.
        flag: the CLI flag (``--top-k``); ``None`` when the CLI does not offer it.
        follows: the CLI flag defaults to this other field's value when left out (``--window`` follows
            ``--max-new-tokens``); ``None`` for the field's own default.
        widget: ``"slider"``, ``"number"`` or ``"select"``; ``None`` when the sidebar does not offer it.
    """

    label: str
    help: str
    low: float | None = None
    high: float | None = None
    step: float = 1
    unit: str = ""
    choices: tuple[str, ...] | None = None
    flag: str | None = None
    follows: str | None = None
    widget: str | None = NUMBER

    @property
    def dest(self) -> str | None:
        """The ``argparse`` attribute of the flag (``--top-k`` → ``top_k``), or ``None`` without a flag."""
        return None if self.flag is None else self.flag.lstrip("-").replace("-", "_")

    def check(self, name: str, value: Any) -> None:
        """Refuse a value outside the bounds or the choices, with the one message every caller shows.

        Raises:
            ValueError: ``"<name> must be between <low> and <high>, got <value>"`` for a number, or the
                allowed choices for a choice.
        """
        if self.choices is not None:
            if value not in self.choices:
                raise ValueError(f"Unknown {name} {value!r}; choose one of {', '.join(self.choices)}")
            return
        if self.low is not None and self.high is not None and not self.low <= value <= self.high:
            raise ValueError(f"{name} must be between {self.low} and {self.high}, got {value}")


def setting(default: Any, spec: Setting) -> Any:
    """A dataclass field with ``default`` whose metadata holds ``spec`` (read back by :func:`setting_specs`)."""
    return field(default=default, metadata={"setting": spec})


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

    max_new_tokens: int = setting(
        64,
        Setting(
            "Max new tokens per answer",
            "Greedy decoding stops at end-of-sequence or after this many tokens.",
            low=1,
            high=1024,
            step=8,
            unit="tokens",
            flag="--max-new-tokens",
        ),
    )
    score_window: int = setting(
        64,
        Setting(
            "Score window T (answer tokens)",
            "RePCS sums KL over the first T answer tokens: Z = Σ_{t<T} KL_t.",
            low=1,
            high=4096,
            step=8,
            unit="tokens",
            flag="--window",
            follows="max_new_tokens",
        ),
    )
    top_k: int = setting(
        10,
        Setting(
            "Top-k candidates shown",
            "Next-token candidates kept per answer position, for display.",
            low=1,
            high=100,
            unit="candidates",
            flag="--top-k",
            widget=SLIDER,
        ),
    )
    template: str = setting(
        "auto",
        Setting(
            "Prompt template",
            "Both paths use the same template; the parametric prompt only leaves the context out.",
            choices=TEMPLATE_CHOICES,
            flag="--template",
            widget=SELECT,
        ),
    )
    force_length: bool = setting(
        False,
        Setting("Force the length", "Generate exactly max_new_tokens tokens, no EOS (benchmarks).", widget=None),
    )
    kl_split: int = setting(
        32,
        Setting(
            "Early/late split (tokens)",
            "CRM level-2 statistics compare the mean KL of the first tokens with the rest.",
            low=1,
            high=4096,
            step=4,
            unit="tokens",
            flag="--kl-split",
        ),
    )

    def validate(self) -> None:
        """Check every field against its :class:`Setting`.

        Raises:
            ValueError: a value out of range or an unknown template (the message gives the allowed values).
        """
        for name, spec in setting_specs().items():
            spec.check(name, getattr(self, name))

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


def setting_specs() -> dict[str, Setting]:
    """``{field name: its Setting}`` of :class:`DualPathSettings`, in field order."""
    return {f.name: f.metadata["setting"] for f in fields(DualPathSettings) if "setting" in f.metadata}


def setting_defaults() -> dict[str, Any]:
    """``{field name: its default}`` of :class:`DualPathSettings`."""
    return DualPathSettings().to_dict()
