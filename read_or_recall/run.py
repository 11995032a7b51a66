"""One analysed run in a notebook: its headline, both answers, every detector and every chart of its pages.

A :class:`Run` wraps the engine's :class:`~core.engine.result.DualPathResult` (``run.result``) and the
:class:`~read_or_recall.lab.Lab` that made it (the model, for the analyses that need it). What it computes on request
(the internals, the detectors, RADAR, ReDeEP, a Self-Critique or SMA run, the swap test) is remembered on it.

In Jupyter a run shows itself: the headline and why, both answers and the KL chart (``_repr_mimebundle_``; every
user and model text is HTML-escaped).
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from read_or_recall import registry as figure_catalog

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from core.detectors.verdicts import Agreement
    from core.engine.result import DualPathResult
    from core.engine.swap import SwapTest
    from core.methods.crm import CrmBasis
    from core.methods.internals import Internals
    from core.methods.lookback import LookbackAnalysis
    from core.methods.radar import RadarAnalysis
    from core.methods.redeep import ReDeEPView
    from read_or_recall.lab import Lab

PLOTLYJS: str | bool = "once"
"""How a run's HTML carries plotly.js: ``"once"`` (the default: inline, in the first chart shown in this kernel; the
later ones use it — offline, one copy per notebook), ``True`` (inline in every chart), ``"cdn"`` (a script tag that
the viewer's browser fetches) or ``False`` (none: the page already has it)."""
_plotlyjs_sent = False


def _plotlyjs() -> str | bool:
    global _plotlyjs_sent  # one copy of plotly.js per kernel, as plotly's own notebook renderer
    if PLOTLYJS != "once":
        return PLOTLYJS
    if _plotlyjs_sent:
        return False
    _plotlyjs_sent = True
    return True


def figure_html(fig: go.Figure) -> str:
    """A figure as an HTML fragment (plotly.js carried as :data:`PLOTLYJS` says). Text in a figure is JSON-encoded
    by plotly, with ``<``, ``>`` and ``&`` escaped, so it cannot close the script it sits in."""
    return fig.to_html(full_html=False, include_plotlyjs=_plotlyjs(), default_height=420)


class Run:
    """One dual-path run of a :class:`~read_or_recall.lab.Lab`: ``lab.run(query, context)``.

    Attributes:
        lab: the lab (model and settings) that made it.
        result: the engine's :class:`~core.engine.result.DualPathResult` (plain numpy arrays and strings; its
            ``to_json()`` is what ``python -m core run --json`` prints).
    """

    def __init__(self, lab: Lab, result: DualPathResult) -> None:
        self.lab = lab
        self.result = result
        self._cache: dict[Any, Any] = {}

    # ---------------------------------------------------------------------------------------------------------
    # The headline

    @property
    def axes(self) -> dict[str, Any]:
        """The two-axis headline as ``run --json`` writes it under ``axes``: ``verdict``, ``qualifier``, ``title``,
        ``reason``, ``calibration``, ``span`` (the located answer span and its observations), ``context_reliance``
        and ``parametric_support`` (each: state, score, threshold, band, direction, evidence), ``joint``; with
        ``swap_test`` once :meth:`swap_test` ran."""
        return self.result.headline

    @property
    def verdict(self) -> str:
        """The headline's verdict: ``"read"``, ``"recalled"``, ``"neither"``, ``"inconclusive"`` or
        ``"uncalibrated"`` (a model without its own axes calibration)."""
        return self.result.verdict

    @property
    def title(self) -> str:
        """The headline in words, e.g. "Recalled from memory, the context agrees"."""
        return str(self.axes["title"])

    @property
    def reason(self) -> str:
        """One computed sentence: why this verdict, with the numbers behind it."""
        return str(self.axes["reason"])

    @property
    def span(self) -> dict[str, Any] | None:
        """The located answer span both axes read (``text``, ``word``, ``positions``, ``kl``, ``why``, …), ``None``
        when the answer has no content word."""
        return ((self.axes.get("span") or {}).get("span")) or None

    @property
    def repcs_verdict(self) -> str:
        """RePCS' own verdict: Z against the τ in force (:attr:`repcs_reason` says why)."""
        return self.result.repcs_verdict

    @property
    def repcs_reason(self) -> str:
        return self.result.repcs_verdict_reason

    @property
    def z(self) -> float:
        """RePCS' Z = Σ KL_t over the first T answer tokens (nats)."""
        return float(self.result.repcs_score)

    @property
    def answer(self) -> str:
        """The answer with the context (the retrieval path)."""
        return self.result.retrieval.answer

    @property
    def parametric_answer(self) -> str:
        """The model's own answer without the context."""
        return self.result.parametric.answer

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, key for key what ``python -m core run --json`` prints for the same inputs."""
        return self.result.to_dict()

    def to_json(self, indent: int | None = None) -> str:
        return self.result.to_json(indent=indent)

    # ---------------------------------------------------------------------------------------------------------
    # Detectors, swap test

    def agreement(self, names: list[str] | None = None) -> Agreement:
        """Every cheap detector on this run (the Dual Path page's agreement view), plus ``names`` (costly ones too;
        scored once each and remembered)."""
        from core.detectors import resolve
        from core.detectors.agreement import assess, detector_input, judge

        if "agreement" not in self._cache:
            inp = detector_input(self.lab.handle, self.result)
            self._cache["agreement_input"] = inp
            self._cache["agreement"] = assess(self.lab.handle, self.result, inp=inp)
        agreement: Agreement = self._cache["agreement"]
        scored = {v.name for v in agreement.verdicts}
        for detector in resolve(list(names or [])):
            if detector.name not in scored:
                agreement.verdicts.append(judge(detector, self._cache["agreement_input"]))
                scored.add(detector.name)
        return agreement

    def detectors(self, names: list[str] | None = None) -> pd.DataFrame:
        """Every cheap detector's reading of this run — and the detectors ``names`` (costly ones included) — as a
        DataFrame grouped by the question each answers (index ``(group, detector)``, groups in the page's order).

        Columns: ``label``, ``score`` (raw), ``direction`` ("higher = …"), ``threshold``, ``source`` (where the
        threshold comes from), ``verdict`` (the engine's word), ``says`` (in the group's own words),
        ``vs_headline`` ("agrees" / "disagrees" / ``None``: only the two groups that feed the headline), ``cost``,
        ``error``. A detector you registered (:func:`read_or_recall.register_detector`) is one more row.
        """
        import pandas as pd

        from core.detectors.verdicts import GROUP_ORDER

        agreement = self.agreement(names)
        rows = [
            {
                "group": v.group,
                "detector": v.name,
                "label": v.label,
                "score": v.score,
                "direction": v.direction,
                "threshold": v.threshold,
                "source": v.source,
                "verdict": v.verdict,
                "says": v.says,
                "vs_headline": agreement.against_headline(v),
                "cost": v.cost,
                "error": v.error,
            }
            for v in agreement.verdicts
        ]
        frame = pd.DataFrame(rows)
        if frame.empty:
            return frame
        frame["_order"] = frame["group"].map(GROUP_ORDER).fillna(len(GROUP_ORDER))
        frame = frame.sort_values(["_order"], kind="stable").drop(columns="_order")
        return frame.set_index(["group", "detector"])

    def swap_test(self) -> SwapTest:
        """The swap test at the headline's answer span (:func:`core.engine.swap.swap_test`: one more generation
        with the span replaced in the context); its outcome joins :attr:`axes` as ``swap_test``."""
        from core.engine.swap import swap_test, with_swap_test

        if "swap" not in self._cache:
            test = swap_test(self.lab.handle, self.result)
            self._cache["swap"] = test
            self.result = with_swap_test(self.result, test)
        return self._cache["swap"]

    # ---------------------------------------------------------------------------------------------------------
    # Figures and the analyses behind them

    def figure(self, name: str = "kl", **options: Any) -> go.Figure:
        """The chart ``name`` of this run, the same plotly figure its page draws (names and options:
        :func:`read_or_recall.registry.describe`).

        Raises:
            ValueError: an unknown name or option value.
        """
        return figure_catalog.build(self, name, **options)

    def internals(self) -> Internals:
        """The internals of both paths (one instrumented forward per path and the logit lens; the Attention, Layer
        trajectories and Vocabulary lens pages' analysis)."""
        from core.methods.internals import LENS_TOP_K, analyze

        if "internals" not in self._cache:
            self._cache["internals"] = analyze(self.lab.handle, self.result, top_k=LENS_TOP_K)
        return self._cache["internals"]

    def lookback(self) -> LookbackAnalysis:
        """The Lookback Lens map of the retrieval path (one traced forward)."""
        from core.methods.lookback import analyze

        if "lookback" not in self._cache:
            self._cache["lookback"] = analyze(self.lab.handle, self.result)
        return self._cache["lookback"]

    def crm_basis(self, *, required: bool = False) -> CrmBasis | None:
        """The model's stored CRM basis for this run's template (bundled for the embedded model), else ``None``.

        Raises:
            ValueError: ``required`` and there is none (compute it on the Layer trajectories page, or
                ``core.methods.crm.compute_basis``).
        """
        from core.methods.crm import load_basis

        if "crm_basis" not in self._cache:
            self._cache["crm_basis"] = load_basis(self.lab.handle, self.result.template)
        basis = self._cache["crm_basis"]
        if basis is None and required:
            raise ValueError(
                f"No CRM basis is stored for {self.lab.model} with template {self.result.template!r}: compute it on "
                "the Layer trajectories page or with core.methods.crm.compute_basis(handle, template=…)."
            )
        return basis

    def redeep(self) -> ReDeEPView:
        """ReDeEP's per-token decomposition under the model's chosen heads and layers (one traced forward)."""
        from core.methods.redeep.analysis import decompose
        from core.methods.redeep.choice import choice_for

        if "redeep" not in self._cache:
            choice = choice_for(self.lab.handle, self.result.template)
            self._cache["redeep"] = decompose(self.lab.handle, self.result, choice)
        return self._cache["redeep"]

    def radar(self, source: str = "query") -> RadarAnalysis:
        """RADAR on the query alone (``source="query"``, the page's default) or on context + query."""
        from core.methods import radar

        if source not in ("query", "context"):
            raise ValueError(f"source must be 'query' or 'context', got {source!r}")
        key = ("radar", source)
        if key not in self._cache:
            text = radar.radar_prompt(self.result.query, self.result.context if source == "context" else None)
            table = radar.cached_feature_table(self.lab.handle)
            self._cache[key] = radar.analyze_with_table(self.lab.handle, text, table)
        return self._cache[key]

    def radar_report(self) -> dict[str, Any]:
        """RADAR's test-set report for this model (bundled for the embedded model).

        Raises:
            ValueError: the model's RADAR features of the bundled sets are not extracted yet.
        """
        from core.methods import radar

        if "radar_report" not in self._cache:
            table = radar.cached_feature_table(self.lab.handle)
            if table is None:
                raise ValueError(f"RADAR's features of the bundled sets are not extracted for {self.lab.model} yet.")
            self._cache["radar_report"] = radar.evaluation_for(self.lab.handle, table)
        return self._cache["radar_report"]

    def self_critique(self, **settings: Any) -> Any:
        """A Self-Critique run on this run's query and context (new generations; ``settings``: the fields of
        :class:`core.methods.selfcritique.SelfCritiqueSettings`), remembered per settings."""
        from core.methods.selfcritique import SelfCritiqueSettings, run_self_critique

        chosen = SelfCritiqueSettings(**settings)
        chosen.validate()
        key = ("self_critique", repr(chosen))
        if key not in self._cache:
            self._cache[key] = run_self_critique(self.lab.handle, self.result.query, self.result.context, chosen)
        return self._cache[key]

    def sma(self, **settings: Any) -> Any:
        """An SMA run (source attribution with the context on and off; ``settings``: the fields of
        :class:`core.methods.sma.SMASettings`), remembered per settings."""
        from core.methods.sma import SMASettings, run_sma

        chosen = SMASettings(**settings)
        key = ("sma", repr(chosen))
        if key not in self._cache:
            self._cache[key] = run_sma(self.lab.handle, self.result.query, self.result.context, chosen)
        return self._cache[key]

    def context_ablation(self, **settings: Any) -> Any:
        """SMA's context ablation: each context sentence left out in turn (one generation each)."""
        from core.methods.sma import SMASettings
        from core.methods.sma.run import run_context_ablation

        chosen = SMASettings(**settings)
        key = ("context_ablation", repr(chosen))
        if key not in self._cache:
            self._cache[key] = run_context_ablation(self.lab.handle, self.result.query, self.result.context, chosen)
        return self._cache[key]

    # ---------------------------------------------------------------------------------------------------------
    # How a run shows itself

    def __repr__(self) -> str:
        return f"<Run {self.verdict!r}: {self.title} — Z = {self.z:.3f} nats, model {self.lab.model}>"

    def _repr_text(self) -> str:
        lines = [
            f"{self.title}",
            f"  why: {self.reason}",
            f"  answer with the context:    {self.answer}",
            f"  answer without the context: {self.parametric_answer}",
            f"  RePCS: {self.repcs_verdict} (Z = {self.z:.3f} nats)",
        ]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        e = html.escape
        span = self.span
        span_line = (
            f"<p><b>Answer span:</b> “{e(span['text'])}” — {e(span['why'])}</p>"
            if span
            else "<p><b>Answer span:</b> none (no content word)</p>"
        )
        cell = "padding:4px 10px;vertical-align:top;text-align:left"
        answers = (
            f"<table><tr><th style='{cell}'>With the context</th><th style='{cell}'>Without the context</th></tr>"
            f"<tr><td style='{cell}'>{e(self.answer)}</td><td style='{cell}'>{e(self.parametric_answer)}</td></tr>"
            "</table>"
        )
        return (
            "<div class='read-or-recall-run'>"
            f"<h4>{e(self.title)}</h4><p>{e(self.reason)}</p>{span_line}{answers}"
            f"<p>RePCS: {e(self.repcs_verdict)} — Z = {self.z:.3f} nats, τ = {e(_num(self.result.threshold))} "
            f"({e(self.result.threshold_source)}) · model {e(self.lab.model)}</p>"
            f"{figure_html(self.figure('kl'))}</div>"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        """What Jupyter shows: the HTML view (headline, why, both answers, the KL chart) and a text fallback."""
        return {"text/html": self._repr_html_(), "text/plain": self._repr_text()}


def _num(value: float | None) -> str:
    return "none" if value is None else f"{value:.3f}"
