"""Public mode: what a visitor of a shared deployment (a Hugging Face Space) may load and how much a run may cost.

Off by default (``make run``, the CLI); the Dockerfile turns it on with ``READ_OR_RECALL_PUBLIC=1``. In public
mode:

* **Models**: only the embedded model and the hub ids an operator lists in ``READ_OR_RECALL_ALLOWED_MODELS``
  (comma-separated, each ``owner/name`` or ``owner/name@revision``; empty by default). Local folders are
  refused even when they exist, and so is any other id (a visitor could otherwise make the server download a
  multi-GB model or read files from its disk).
* **Caps** on the settings that set the cost of a run (each overridable by the operator, see :data:`CAP_ENV`):
  new tokens per answer, SMA masks, layers × seeds of a single-layer sweep, rows scored by the Evaluate page,
  and the size of an uploaded file. The app lowers each widget's maximum to its cap and says so on the page.
* **Run budget**: one click may generate at most ``Caps.run_tokens`` tokens in all (rows × generations per row ×
  tokens per generation, :func:`evaluate_run_tokens`); :meth:`PublicPolicy.run_budget` says so before the run
  and refuses a run over it — the other caps alone let one Evaluate click with SMA generate millions of tokens.
* **Audit log**: the Audit log page (which shows every query and context the audit service stored) is off
  unless the operator sets ``READ_OR_RECALL_PUBLIC_AUDIT_LOG=1`` (:attr:`PublicPolicy.shows_audit_log`).

Nothing here imports streamlit: the app (``components``) reads :func:`current_policy` when it draws a widget,
and tests set the environment with ``monkeypatch.setenv``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

PUBLIC_ENV = "READ_OR_RECALL_PUBLIC"
ALLOWED_ENV = "READ_OR_RECALL_ALLOWED_MODELS"
AUDIT_LOG_ENV = "READ_OR_RECALL_PUBLIC_AUDIT_LOG"
"""Set to 1 to show the Audit log page (stored queries and contexts) to the visitors of a public deployment."""
EMBEDDED = "embedded"
"""The embedded model's spec (``core.model.loading.EMBEDDED_MODEL``; repeated here to keep this module free of
the model layer)."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
"""A hub id without an organisation (``gpt2``, ``distilgpt2``): the hub's legacy top-level models."""
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")


@dataclass(frozen=True)
class Caps:
    """Upper bounds on the settings that set the cost of a run (public mode only).

    Attributes:
        max_new_tokens: answer tokens per path and per run (sidebar, SMA, ablation grids).
        sma_masks: SMA's N (random masks or Shapley permutations).
        sweep_layers: layers × seeds of one single-layer sweep on the Ablations page.
        evaluate_rows: rows the Evaluate page scores in one run.
        upload_mb: size of an uploaded file, in MiB.
        run_tokens: generated tokens in all for one run (one click), across every other cap.
    """

    max_new_tokens: int = 128
    sma_masks: int = 64
    sweep_layers: int = 32
    evaluate_rows: int = 200
    upload_mb: int = 2
    run_tokens: int = 50_000

    def lines(self) -> list[str]:
        """One readable line per cap (for the page and the docs)."""
        return [
            f"at most {self.max_new_tokens} new tokens per answer",
            f"at most {self.sma_masks} SMA masks per run",
            f"at most {self.sweep_layers} layer runs (layers × seeds) per single-layer sweep",
            f"at most {self.evaluate_rows} rows per evaluation",
            f"uploads up to {self.upload_mb} MiB",
            f"at most {self.run_tokens:,} generated tokens per run",
        ]


CAP_ENV: dict[str, str] = {
    "max_new_tokens": "READ_OR_RECALL_MAX_NEW_TOKENS",
    "sma_masks": "READ_OR_RECALL_MAX_SMA_MASKS",
    "sweep_layers": "READ_OR_RECALL_MAX_SWEEP_LAYERS",
    "evaluate_rows": "READ_OR_RECALL_MAX_EVAL_ROWS",
    "upload_mb": "READ_OR_RECALL_MAX_UPLOAD_MB",
    "run_tokens": "READ_OR_RECALL_MAX_RUN_TOKENS",
}
""":class:`Caps` field → the environment variable that overrides its default (a positive integer)."""


@dataclass(frozen=True)
class AllowedModel:
    """A hub id the operator allows, with an optional pinned revision."""

    model_id: str
    revision: str | None = None

    @property
    def label(self) -> str:
        return self.model_id + (f" @ {self.revision}" if self.revision else "")


@dataclass(frozen=True)
class PublicPolicy:
    """What a visitor may do: public or not, the allow-listed models and the caps.

    Attributes:
        public: whether public mode is on.
        allowed: the operator's allow-list (hub ids), in the order given.
        caps: the cost caps (applied only when ``public``).
        audit_log: the operator opted in to showing the audit log to visitors (``READ_OR_RECALL_PUBLIC_AUDIT_LOG``).
    """

    public: bool = False
    allowed: tuple[AllowedModel, ...] = ()
    caps: Caps = field(default_factory=Caps)
    audit_log: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PublicPolicy:
        """Read the policy from the environment (``os.environ`` by default).

        Raises:
            ValueError: a value that is not understood (the message names the variable), so a misconfigured
                deployment fails at its first page instead of running open.
        """
        env = os.environ if env is None else env
        flag = env.get(PUBLIC_ENV, "").strip().lower()
        if flag not in _TRUE | _FALSE:
            raise ValueError(f"{PUBLIC_ENV} must be 1 or 0 (or true/false), got {flag!r}.")
        audit_log = env.get(AUDIT_LOG_ENV, "").strip().lower()
        if audit_log not in _TRUE | _FALSE:
            raise ValueError(f"{AUDIT_LOG_ENV} must be 1 or 0 (or true/false), got {audit_log!r}.")
        caps = {}
        for name, var in CAP_ENV.items():
            raw = env.get(var, "").strip()
            if not raw:
                continue
            if not raw.isdigit() or int(raw) < 1:
                raise ValueError(f"{var} must be a positive whole number, got {raw!r}.")
            caps[name] = int(raw)
        return cls(flag in _TRUE, parse_allow_list(env.get(ALLOWED_ENV, "")), Caps(**caps), audit_log in _TRUE)

    @property
    def shows_audit_log(self) -> bool:
        """Whether the Audit log page may show the log: always outside public mode; in public mode only when
        the operator opted in (the log holds every audited query and context, kept behind the service's token)."""
        return not self.public or self.audit_log

    # -- caps -----------------------------------------------------------------------------------------------

    def limit(self, cap: str, upper: int) -> int:
        """A widget's maximum: ``upper``, lowered to the cap ``cap`` (a :class:`Caps` field) in public mode."""
        if cap not in {f.name for f in fields(Caps)}:
            raise ValueError(f"Unknown cap {cap!r}; one of {', '.join(CAP_ENV)}.")
        return min(int(upper), int(getattr(self.caps, cap))) if self.public else int(upper)

    @property
    def upload_bytes(self) -> int | None:
        """The upload cap in bytes, or ``None`` outside public mode."""
        return self.caps.upload_mb * 1024 * 1024 if self.public else None

    def sweep_seeds(self, n_layers: int, most: int) -> int:
        """How many seeds per layer a single-layer sweep over ``n_layers`` layers may run (0: none fits)."""
        if not self.public:
            return most
        return max(0, min(most, self.caps.sweep_layers // max(1, n_layers)))

    def run_budget(self, tokens: int) -> RunBudget:
        """Whether a run that generates up to ``tokens`` tokens may start, with the sentence the page shows
        before the run (outside public mode every run may start; the sentence still gives the count)."""
        tokens = max(0, int(tokens))
        if not self.public:
            return RunBudget(tokens, None, True, f"This run generates up to {tokens:,} tokens.")
        budget = int(self.caps.run_tokens)
        if tokens <= budget:
            note = f"This run generates up to {tokens:,} tokens (this app's budget: {budget:,} per run)."
            return RunBudget(tokens, budget, True, note)
        return RunBudget(
            tokens,
            budget,
            False,
            f"This run would generate up to {tokens:,} tokens, over this public app's budget of {budget:,} per run: "
            "choose fewer rows, fewer generation-based detectors, or fewer new tokens.",
        )

    # -- models ---------------------------------------------------------------------------------------------

    def model_choices(self) -> list[AllowedModel]:
        """The models a visitor may pick in public mode, after the embedded one (the allow-list)."""
        return list(self.allowed)

    def check_model(self, spec: str, revision: str | None = None) -> tuple[str, str | None]:
        """The ``(spec, revision)`` to load, or a ``ValueError`` saying why this model may not be loaded.

        Outside public mode every spec passes unchanged (the loader reports what does not load). In public
        mode the embedded model passes; a hub id passes only when it is on the allow-list, with the
        allow-list's revision (a visitor's revision is ignored); local folders never pass.
        """
        spec = (spec or EMBEDDED).strip()
        if not self.public or spec == EMBEDDED:
            return spec, (revision.strip() or None) if revision and spec != EMBEDDED else None
        if looks_like_path(spec):
            raise ValueError("This public app does not load models from folders on the server.")
        for entry in self.allowed:
            if entry.model_id == spec:
                if Path(spec).exists():
                    raise ValueError(f"{spec!r} names a folder on the server; the operator must fix the allow-list.")
                return entry.model_id, entry.revision
        if self.allowed:
            names = ", ".join(e.label for e in self.allowed)
            raise ValueError(f"This public app loads only the embedded model and: {names}.")
        raise ValueError("This public app loads only the embedded model.")

    def describe(self) -> list[str]:
        """Plain sentences for the page: what a visitor can do here (empty outside public mode)."""
        if not self.public:
            return []
        models = "the embedded model" + (
            " and " + ", ".join(e.label for e in self.allowed) if self.allowed else " only"
        )
        return [f"Public mode: {models}; " + "; ".join(self.caps.lines()) + "."]


@dataclass(frozen=True)
class RunBudget:
    """The token budget's verdict on one run: ``tokens`` it may generate, the ``budget`` (``None`` outside public
    mode), whether it may start (``ok``) and the sentence to show before it."""

    tokens: int
    budget: int | None
    ok: bool
    message: str


SMA_GENERATIONS_PER_MASK_SET = 2
"""SMA runs its masks with the context on and off (:func:`core.methods.sma.run_sma`)."""


def evaluate_run_tokens(
    n_rows: int, max_new_tokens: int, costs: Sequence[str], *, sma_masks: int = 64, sma_tokens: int = 32
) -> int:
    """Upper bound of the tokens one Evaluate run generates.

    Per row: the retrieval answer (``max_new_tokens``; the parametric path is teacher-forced); one more answer
    per ``"generate"`` detector (Self-Critique, CRM L1); per ``"heavy"`` detector (SMA) the reference answer and
    ``sma_masks`` masked answers on each of its two paths, of at most ``min(sma_tokens, max_new_tokens)`` tokens.
    ``costs`` are the chosen detectors' ``cost`` values (:class:`core.detectors.registry.Detector`).
    """
    new = max(0, int(max_new_tokens))
    per_row = new + sum(c == "generate" for c in costs) * new
    per_row += sum(c == "heavy" for c in costs) * SMA_GENERATIONS_PER_MASK_SET * (sma_masks + 1) * min(sma_tokens, new)
    return max(0, int(n_rows)) * per_row


def parse_allow_list(text: str) -> tuple[AllowedModel, ...]:
    """``"org/a, org/b@v1"`` → the allowed models (duplicates dropped).

    Raises:
        ValueError: an entry that is not a hub id ``owner/name`` (paths, URLs, spaces) or a bad revision.
    """
    out: list[AllowedModel] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        model_id, _, revision = entry.partition("@")
        model_id, revision = model_id.strip(), revision.strip()
        if not _HUB_ID.match(model_id) or ".." in model_id:
            raise ValueError(f"{ALLOWED_ENV}: {entry!r} is not a hub id of the form owner/name.")
        if revision and not _REVISION.match(revision):
            raise ValueError(f"{ALLOWED_ENV}: {entry!r} has an invalid revision.")
        item = AllowedModel(model_id, revision or None)
        if item not in out:
            out.append(item)
    return tuple(out)


def looks_like_path(spec: str) -> bool:
    """Whether ``spec`` reads as a file-system path rather than a hub id (or exists as one on this machine)."""
    s = spec.strip()
    if not s:
        return False
    if s.startswith(("/", ".", "~", "\\")) or "\\" in s or ".." in s or ":" in s or "\x00" in s:
        return True
    if s.count("/") > 1 or not (_HUB_ID.match(s) or _HUB_NAME.match(s)):
        return True
    try:
        return Path(s).exists()
    except (OSError, ValueError):
        return True


def current_policy() -> PublicPolicy:
    """The policy of this process, read from the environment on every call (cheap; tests change it)."""
    return PublicPolicy.from_env()


def is_public() -> bool:
    """Whether public mode is on (``READ_OR_RECALL_PUBLIC=1``)."""
    return current_policy().public
