"""The one result object that flows from the engine to the detectors, the pages and the CLI.

Naming: the two paths are always ``retrieval`` (the prompt with the context) and ``parametric`` (the same
template without it). A :class:`DualPathResult` holds one :class:`PathOutput` for each; the JSON form (the
``python -m core run --json`` output and the page's download) keeps the flat keys it has had since schema 1
(``rag_answer``, ``entropy_para`` …), so files written by any version read back losslessly.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from core.engine.settings import DualPathSettings
from core.engine.threshold import TAU_PAPER
from core.engine.verdict import normalize_verdict

if TYPE_CHECKING:  # the recording holds torch tensors; this module stays importable without torch
    from core.engine.axes import Headline
    from core.model.recording import Recording

SCHEMA_VERSION = 4
"""2: the in-memory result groups each path's fields in a :class:`PathOutput`; the JSON keys are schema 1's.
3: the verdict speaks :mod:`core.engine.verdict`'s vocabulary (``"recalled"`` / ``"read"`` / ``"inconclusive"`` /
``"uncalibrated"``; older ``"memorized"`` / ``"grounded"`` are read and normalized) and comes with
``verdict_reason``, ``tau_band``, ``tau_mode`` and ``n_scored``.
4: ``axes`` (the two-axis headline of :mod:`core.engine.axes`): the JSON's top-level ``verdict`` / ``verdict_reason``
are the headline's, and RePCS' own Z-vs-τ verdict is under ``repcs_verdict`` / ``repcs_verdict_reason`` — in memory
too: :attr:`DualPathResult.verdict` is the headline's, :attr:`DualPathResult.repcs_verdict` RePCS' (one word, one
meaning). A schema-4 file written without ``axes`` (its ``verdict`` was then RePCS') and the files of schemas 1–3
read back with their RePCS verdict under ``repcs_verdict`` and the headline computed from their numbers."""

RETRIEVAL = "retrieval"
PARAMETRIC = "parametric"
PATHS = (RETRIEVAL, PARAMETRIC)

# PathOutput field → (JSON key for the retrieval path, JSON key for the parametric path, numpy dtype or None).
_PATH_KEYS: dict[str, tuple[str, str, Any]] = {
    "prompt": ("rag_prompt", "parametric_prompt", None),
    "prompt_len": ("rag_prompt_len", "parametric_prompt_len", None),
    "answer": ("rag_answer", "parametric_answer", None),
    "token_ids": ("answer_token_ids", "parametric_token_ids", None),
    "tokens": ("answer_tokens", "parametric_tokens", None),
    "finish": ("rag_finish", "parametric_finish", None),
    "entropy": ("entropy_rag", "entropy_para", np.float32),
    "logprob": ("logprob_rag", "logprob_para", np.float32),
    "topk_ids": ("topk_ids_rag", "topk_ids_para", np.int64),
    "topk_probs": ("topk_probs_rag", "topk_probs_para", np.float32),
    "topk_tokens": ("topk_tokens_rag", "topk_tokens_para", None),
}
SCHEMA_KEYS: dict[int, tuple[str, ...]] = {
    3: ("verdict_reason", "tau_band", "tau_mode", "n_scored"),
    4: ("repcs_verdict", "repcs_verdict_reason", "axes"),
}
"""The JSON keys each schema added (a result of an older schema lacks them)."""
# The JSON key order of schema 1, with the later schemas' verdict keys after "verdict" (diffs of exported files stay
# readable).
_JSON_ORDER = (
    "model",
    "model_info",
    "query",
    "context",
    "template",
    "settings",
    "rag_prompt",
    "parametric_prompt",
    "rag_prompt_len",
    "parametric_prompt_len",
    "rag_answer",
    "parametric_answer",
    "answer_token_ids",
    "answer_tokens",
    "parametric_token_ids",
    "parametric_tokens",
    "rag_finish",
    "parametric_finish",
    "token_kl",
    "entropy_rag",
    "entropy_para",
    "logprob_rag",
    "logprob_para",
    "topk_ids_rag",
    "topk_ids_para",
    "topk_probs_rag",
    "topk_probs_para",
    "topk_tokens_rag",
    "topk_tokens_para",
    "score_window",
    "repcs_score",
    "threshold",
    "threshold_source",
    "verdict",
    *SCHEMA_KEYS[3],
    *SCHEMA_KEYS[4],
    "calibration_id",
    "internals_verdict",
    "kl_stats",
    "max_abs_log_ratio",
    "max_abs_log_ratio_vocab",
    "warnings",
    "timings",
    "extras",
    "schema_version",
)


@dataclass
class PathOutput:
    """One path of a dual-path run. ``n`` = the retrieval answer's length, ``k`` = top-k.

    Attributes:
        prompt: the prompt text; ``prompt_len`` its number of tokens.
        answer: this path's own greedy answer, decoded (``""`` when the parametric answer was not generated).
        token_ids, tokens: that answer's token ids and each token's text (length of *this* path's answer).
        finish: why the answer stopped (``"eos"``; ``"turn"``: it began a turn of its own, :mod:`core.engine.turns`;
            ``"length"``; ``"not generated"``).
        entropy: ``(n,)`` float32 entropy (nats) of this path's next-token distribution at each position of the
            **retrieval** answer (the parametric path is teacher-forced on it).
        logprob: ``(n,)`` float32 log-probability of the retrieval answer's token at each position.
        topk_ids, topk_probs: ``(n, k)`` the top-k candidates at each position; ``topk_tokens`` their texts.
    """

    prompt: str
    prompt_len: int
    answer: str
    token_ids: list[int]
    tokens: list[str]
    finish: str
    entropy: np.ndarray
    logprob: np.ndarray
    topk_ids: np.ndarray
    topk_probs: np.ndarray
    topk_tokens: list[list[str]]


@dataclass
class RunInternals:
    """What the run's own forward passes read for the detectors, so that they need no second pass over the same
    tokens (:attr:`DualPathResult.internals`, asked with ``run_dual_path(…, record=True)``). Never written to the
    JSON, not part of a result's identity, and dropped by the first caller done with it
    (:func:`core.detectors.shared.release`): it can hold tens of MB.

    Attributes:
        retrieval: the retrieval path read while it was generated (:mod:`core.model.recording`): the residual
            stream, the MLPs and the answer's attention rows over prompt + answer.
        parametric_state: ``h_ℓ`` at the parametric prompt's last token, ``(n_layers + 1, d)`` float32, from the
            teacher-forced scoring pass (CRM's h_ℓ^0).
    """

    retrieval: Recording | None = None
    parametric_state: np.ndarray | None = None


@dataclass
class DualPathResult:
    """Everything one dual-path run produced, as CPU numpy arrays and strings.

    Positions ``t = 0 … n−1`` index the retrieval answer's tokens (:attr:`answer_token_ids`). At position ``t``
    both paths predict ``answer_token_ids[t]``: the retrieval path from its own generation (query + context +
    answer[:t]), the parametric path teacher-forced on the same prefix without the context (query + answer[:t]).

    Attributes (units nats):
        retrieval, parametric: each path's :class:`PathOutput`.
        token_kl: ``(n,)`` float32 KL_t = KL(P_retrieval,t ‖ P_parametric,t) over the full vocabulary.
        repcs_score: Z = Σ_{t < T} KL_t over the first ``score_window`` (T) positions (RePCS eq. 2).
        threshold: the τ Z was compared with — τ(L) at this answer's L for a length-aware threshold, else the
            constant τ — ``None`` when no threshold is known.
        repcs_verdict: RePCS' own verdict, Z against τ: ``"recalled"`` (Z below τ, outside the band), ``"read"``,
            ``"inconclusive"`` (Z within the band of τ(L), L outside the calibration's lengths, or an empty answer)
            or ``"uncalibrated"`` (:mod:`core.engine.verdict`; :func:`core.engine.verdict.decide`).
        repcs_verdict_reason: one sentence saying why. (The result's :attr:`verdict` is the headline's.)
        tau_band: ``[low, high]`` of the inconclusive band at this L (length-aware τ), else ``None``.
        tau_mode: ``"length"`` (τ(L) with the band) or ``"paper"`` (one constant τ); ``None`` uncalibrated.
        n_scored: L = min(T, n), the answer tokens summed into Z.
        kl_stats: the CRM level-2 statistics of ``token_kl[:T]``.
        max_abs_log_ratio: max_t |logprob_retrieval − logprob_parametric| over the window (RePCS γ, realised
            tokens only).
        max_abs_log_ratio_vocab: max_t max_v |log P_retrieval,t(v) − log P_parametric,t(v)| over the window and
            every vocabulary entry that enters KL_t (P_retrieval,t(v) > 0): the log-ratio RePCS Lemma III.3
            bounds by γ; ``None`` in results written before it existed.
        axes: the two-axis headline (:meth:`core.engine.axes.Headline.to_dict`), attached by the engine to every
            result it makes (:func:`core.engine.scoring.build_result`); ``None`` in a result built by hand or read
            from a file without one — :attr:`headline` then computes it once from the result's own numbers (no
            model call). :attr:`verdict` is its verdict; :attr:`head` the same headline as an object.
        calibration_id: the key of the calibration record that decided it (``"<slug>/<template>"``,
            :class:`core.engine.calibration_record.ModelCalibration`): the page's card, ``run --json``'s
            ``calibration`` and a re-read headline use that record; ``None`` in a result written before it.
        internals: the run's own internals for the detectors (:class:`RunInternals`), when recorded; never
            serialized or compared.
    """

    model: str
    model_info: dict[str, Any]
    query: str
    context: str
    template: str
    settings: dict[str, Any]
    retrieval: PathOutput
    parametric: PathOutput
    token_kl: np.ndarray
    score_window: int
    repcs_score: float
    threshold: float | None
    threshold_source: str
    repcs_verdict: str
    kl_stats: dict[str, Any]
    max_abs_log_ratio: float
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    repcs_verdict_reason: str = ""
    tau_band: list[float] | None = None
    tau_mode: str | None = None
    n_scored: int = 0
    max_abs_log_ratio_vocab: float | None = None
    axes: dict[str, Any] | None = None
    calibration_id: str | None = None
    schema_version: int = SCHEMA_VERSION
    internals: RunInternals | None = field(default=None, repr=False, compare=False)
    _head: Headline | None = field(default=None, init=False, repr=False, compare=False)

    def attach_headline(self, head: Headline) -> None:
        """Attach the headline decided for this result (the engine's one computation of it): :attr:`axes` is its
        JSON form and :attr:`head` the object itself, which every reader then uses."""
        self._head = head
        self.axes = head.to_dict()

    @property
    def head(self) -> Headline:
        """The two-axis headline as one object (:class:`core.engine.axes.Headline`), computed at most once per
        result: the engine attaches it (:meth:`attach_headline`); a result read from a file rebuilds it from its
        stored ``axes`` (no decision is made again), and one without ``axes`` decides it once, under the record
        that :attr:`calibration_id` (else its model's identity) names, and keeps it."""
        if self._head is None:
            from core.engine.axes import Headline, headline  # the headline reads the result: imported when needed

            self._head = Headline.from_dict(self.axes) if self.axes is not None else headline(self)
        return self._head

    @property
    def headline(self) -> dict[str, Any]:
        """The two-axis headline (the JSON's ``axes``): :attr:`axes` when attached, else :attr:`head`'s JSON form
        (decided once, no model call)."""
        return self.axes if self.axes is not None else self.head.to_dict()

    @property
    def verdict(self) -> str:
        """The headline's verdict (``"read"``, ``"recalled"``, ``"neither"``, ``"inconclusive"``,
        ``"uncalibrated"``): what the page, ``run --json``'s ``verdict`` and the notebook say. RePCS' own is
        :attr:`repcs_verdict`."""
        return str(self.headline["verdict"])

    @property
    def verdict_reason(self) -> str:
        """The headline's sentence of why (RePCS': :attr:`repcs_verdict_reason`)."""
        return str(self.headline["reason"])

    @property
    def answer_token_ids(self) -> list[int]:
        """The retrieval answer's token ids: the position axis both paths are scored on."""
        return self.retrieval.token_ids

    @property
    def answer_tokens(self) -> list[str]:
        """The retrieval answer's tokens as text."""
        return self.retrieval.tokens

    @property
    def n_tokens(self) -> int:
        """The retrieval answer's length ``n`` (the position axis of every per-token array)."""
        return len(self.retrieval.token_ids)

    @property
    def run_settings(self) -> DualPathSettings:
        """The :class:`~core.engine.settings.DualPathSettings` this result was produced with (from
        :attr:`settings`, its JSON form; keys a newer version added are ignored)."""
        return DualPathSettings.from_dict(self.settings)

    def path(self, name: str) -> PathOutput:
        """``retrieval`` or ``parametric``."""
        if name not in PATHS:
            raise ValueError(f"path must be {RETRIEVAL!r} or {PARAMETRIC!r}, got {name!r}")
        return self.retrieval if name == RETRIEVAL else self.parametric

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with schema 1's flat keys; float32 values are written exactly (lossless)."""
        flat: dict[str, Any] = {}
        for f in fields(self):
            if f.name in PATHS:
                continue
            flat[f.name] = getattr(self, f.name)
        for attr, (rkey, pkey, _) in _PATH_KEYS.items():
            flat[rkey] = getattr(self.retrieval, attr)
            flat[pkey] = getattr(self.parametric, attr)
        head = self.headline  # the top-level verdict is the headline's; RePCS' is under repcs_verdict (schema 4)
        flat["axes"], flat["verdict"], flat["verdict_reason"] = head, head["verdict"], head["reason"]
        # the internals' own prediction: the headline's, unless a swap test carried it (core.engine.swap_verdict)
        flat["internals_verdict"] = (head.get("internals") or {}).get("verdict", head["verdict"])
        return {key: _jsonable(flat[key]) for key in _JSON_ORDER}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DualPathResult:
        """Read the JSON form (schemas 1–4: 3 adds the verdict keys, 4 the axes; older verdicts are normalized).

        Both verdicts come back as they were written: ``repcs_verdict`` (schema 4's ``repcs_verdict``; in older files
        and in a schema-4 file without ``axes``, the top-level ``verdict``, which was RePCS') and the headline
        (``axes``; absent from such files, it is then computed from the result's numbers when asked,
        :attr:`headline`).

        A result of schema 1 or 2 was judged with one constant τ: it reads back with ``tau_mode = "paper"`` (when
        it had a threshold), no band, ``n_scored = min(T, n)`` and ``"memorized"`` / ``"grounded"`` read as
        ``"recalled"`` / ``"read"``.

        Raises:
            ValueError: keys missing, a schema newer than this version knows, or an unknown verdict.
        """
        optional = {
            "warnings",
            "timings",
            "extras",
            "schema_version",
            "max_abs_log_ratio_vocab",
            "calibration_id",
            "internals_verdict",
            *SCHEMA_KEYS[3],
            *SCHEMA_KEYS[4],
        }
        missing = [k for k in _JSON_ORDER if k not in data and k not in optional]
        if missing:
            raise ValueError(f"Not a Read or Recall result: missing keys {sorted(missing)}")
        version = int(data.get("schema_version", 1))
        if version > SCHEMA_VERSION:
            raise ValueError(f"This result has schema {version}; this version reads up to {SCHEMA_VERSION}.")
        paths = {}
        for index, name in enumerate(PATHS):
            kwargs = {}
            for attr, keys in _PATH_KEYS.items():
                value = data[keys[index]]
                dtype = keys[2]
                kwargs[attr] = np.asarray(value, dtype=dtype) if dtype is not None else value
            paths[name] = PathOutput(**kwargs)
        top = {f.name: data[f.name] for f in fields(cls) if f.name not in PATHS and f.name in data}
        top["token_kl"] = np.asarray(top["token_kl"], dtype=np.float32)
        normalize_verdict(
            data["verdict"]
        )  # the top-level verdict (the headline's or, in older files, RePCS') is checked
        if "repcs_verdict" not in data:  # schemas 1–3: the top-level verdict is RePCS'
            top["repcs_verdict"], top["repcs_verdict_reason"] = data["verdict"], data.get("verdict_reason", "")
        top["repcs_verdict"] = normalize_verdict(top["repcs_verdict"])
        if top.get("axes") is not None and top["axes"].get("verdict") != data["verdict"]:
            raise ValueError(
                f"The result's verdict {data['verdict']!r} is not its headline's {top['axes'].get('verdict')!r}."
            )
        if "n_scored" not in top:
            top["n_scored"] = min(int(top["score_window"]), len(paths[RETRIEVAL].token_ids))
        if "tau_mode" not in top and top.get("threshold") is not None:
            top["tau_mode"] = TAU_PAPER
        if top.get("tau_band") is not None:
            top["tau_band"] = [float(v) for v in top["tau_band"]]
        top["schema_version"] = SCHEMA_VERSION
        return cls(retrieval=paths[RETRIEVAL], parametric=paths[PARAMETRIC], **top)

    @classmethod
    def from_json(cls, text: str) -> DualPathResult:
        return cls.from_dict(json.loads(text))


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def result_digest(result: DualPathResult) -> str:
    """A result's identity: 16 hex digits of sha1 over what makes it this result (the model, both prompts,
    the answer's token ids and the settings). Equal results have equal digests, also after a JSON round trip;
    the app keys its caches and widgets on it (the one digest of a :class:`DualPathResult`)."""
    payload = json.dumps(
        [result.model, result.retrieval.prompt, result.parametric.prompt, result.answer_token_ids, result.settings],
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha1(payload.encode("utf-8")).hexdigest()[:16]
