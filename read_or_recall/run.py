"""One analysed run in a notebook: its headline, both answers, every detector and every chart of its pages.

A :class:`Run` wraps the engine's :class:`~core.engine.result.DualPathResult` (``run.result``) and the
:class:`~read_or_recall.lab.Lab` that made it (the model, for the analyses that need it).

**The rule for verbs** (docs/notebook.md): a verb belongs to what it studies. Everything about *this run's inputs* is
a method of the run — its detectors, its charts, the swap test, Self-Critique, SMA, the ablations, the dose–response
and the single-layer sweep (whatever they sweep: ε, layers, seeds) —; the lab's methods are about the model over
many inputs (``run``, ``run_many``, ``evaluate``) or the model itself (``calibration``, ``calibrate``). No lab method
takes a run.

What a run computes on request is remembered on it and listed by :meth:`Run.computed`; :meth:`Run.estimate` says
before a call what it will compute and roughly how long. No call changes the run or an earlier result: each verb
returns its own named result (:mod:`read_or_recall.results`).

In Jupyter a run shows itself: the headline and why, both answers and the KL chart (``_repr_mimebundle_``; every
user and model text is HTML-escaped).
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from read_or_recall import registry as figure_catalog
from read_or_recall.memo import Memo, Plan, plan
from read_or_recall.results import SwapTest
from read_or_recall.verbs import RunVerbs

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import plotly.graph_objects as go

    from core.detectors.verdicts import Agreement
    from core.engine.result import DualPathResult
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


class Run(RunVerbs):
    """One dual-path run of a :class:`~read_or_recall.lab.Lab`: ``lab.run(query, context)``.

    Attributes:
        lab: the lab (model and settings) that made it.
        result: the engine's :class:`~core.engine.result.DualPathResult` (plain numpy arrays and strings; its
            ``to_json()`` is what ``python -m core run --json`` prints).
    """

    def __init__(self, lab: Lab, result: DualPathResult) -> None:
        self.lab = lab
        self.result = result
        self._memo = Memo()

    def computed(self) -> pd.DataFrame:
        """What this run holds: one row per analysis computed on it (``analysis``, ``settings``, ``seconds`` it
        took); asking for it again computes nothing."""
        return self._memo.frame()

    def estimate(self, verb: str, **settings: Any) -> Plan:
        """What ``run.<verb>(**settings)`` will compute and roughly how long, before it runs: held already (nothing
        to compute), else its generations and forward passes and their time from this machine's measured unit
        costs (the estimate the pages show).

        Raises:
            ValueError: an unknown verb (the message lists them).
        """
        from read_or_recall.costs import work_of

        analysis, key, (generations, tokens, forwards) = work_of(self, verb, settings)
        return plan(self.lab.handle, verb, self._memo.holds(analysis, key), generations, tokens, forwards)

    # ---------------------------------------------------------------------------------------------------------
    # The headline

    @property
    def axes(self) -> dict[str, Any]:
        """The two-axis headline as ``run --json`` writes it under ``axes``: ``verdict``, ``qualifier``, ``title``,
        ``reason``, ``calibration``, ``span`` (the located answer span and its observations), ``context_reliance``
        and ``parametric_support`` (each: state, score, threshold, band, direction, evidence), ``joint``,
        ``internals``. Where the run was swap-tested as part of ``lab.run`` (context and memory agree), it holds
        ``swap_test`` and a decided test carries the verdict, what the internals alone said under ``internals``
        (:mod:`core.engine.swap_verdict`); a later :meth:`swap_test` does not change it: its own result carries
        the headline with the test joined (:attr:`SwapTest.axes <read_or_recall.results.SwapTest.axes>`)."""
        return self.result.headline

    @property
    def verdict(self) -> str:
        """The headline's verdict: ``"read"``, ``"recalled"``, ``"neither"``, ``"inconclusive"`` or
        ``"uncalibrated"`` (a model without its own axes calibration)."""
        return self.result.verdict

    @property
    def internals_verdict(self) -> str:
        """What the internals alone predict (no swap test): the verdict, unless a swap test carried it."""
        from core.engine.swap_verdict import internals_verdict

        return internals_verdict(self.result)

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
        """Why RePCS said :attr:`repcs_verdict` (Z, τ and its source)."""
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
        """:meth:`to_dict` as JSON text."""
        return self.result.to_json(indent=indent)

    # ---------------------------------------------------------------------------------------------------------
    # Detectors, swap test

    def agreement(self, names: list[str] | None = None) -> Agreement:
        """Every registered cheap detector on this run (the Dual Path page's agreement view), plus ``names`` (costly
        ones too). Each detector is scored once and remembered; one registered after the run is scored at the next
        call (and one registered again under its name — a built-in replaced with ``overwrite=True`` — scored
        again). A new :class:`Agreement` every call: an earlier one is never changed."""
        from core.detectors import available, resolve
        from core.detectors.agreement import Agreement, assess, cheap_detectors, detector_input

        def first() -> tuple[Agreement, dict[str, Any]]:
            return assess(self.lab.handle, self.result), available()

        base, at_first = self._memo.get("agreement", "", first)
        wanted = list(cheap_detectors()) + [d for d in resolve(list(names or [])) if not d.is_cheap]
        inp = None
        verdicts = []
        for detector in {d.name: d for d in wanted}.values():
            held = next((v for v in base.verdicts if v.name == detector.name), None)
            if held is not None and at_first.get(detector.name) is detector:
                verdicts.append(held)
                continue
            inp = inp or self._memo.get("detector_input", "", lambda: detector_input(self.lab.handle, self.result))
            key = f"{detector.name} #{id(detector)}"
            verdicts.append(self._memo.get("detector", key, lambda d=detector, i=inp: _judge(d, i)))
        scored = {v.name for v in verdicts}
        registered = available()
        costly = [c for c in base.costly if c.name not in scored and c.name in registered]
        return Agreement(verdicts=verdicts, costly=costly, axes=dict(base.axes))

    def detectors(self, names: list[str] | None = None) -> pd.DataFrame:
        """Every cheap detector's reading of this run — and the detectors ``names`` (costly ones included) — as a
        DataFrame grouped by the question each answers (index ``(group, detector)``, groups in the page's order).

        Columns: ``label``, ``score`` (raw), ``direction`` ("higher = …"), ``threshold``, ``source`` (where the
        threshold comes from), ``verdict`` (the engine's word), ``says`` (in the group's own words),
        ``vs_headline`` ("agrees" / "disagrees" / ``None``: only the two groups that feed the headline), ``cost``,
        ``error``, ``replaces`` (the built-in's label where a registered detector replaced it with
        ``overwrite=True``, else ``None``). A detector you registered (:func:`read_or_recall.register_detector`) is
        one more row, also when it was registered after the run.
        """
        import pandas as pd

        from core.detectors.registry import replaced_builtin
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
                "replaces": getattr(replaced_builtin(v.name), "label", None),
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
        with the span replaced in the context). The run is not changed: the result carries the headline with the
        test joined, and :attr:`swap_tests` lists the tests made on this run."""
        from core.engine.swap import swap_test, with_swap_test

        def compute() -> SwapTest:
            test = swap_test(self.lab.handle, self.result)
            return SwapTest(test, with_swap_test(self.result, test))

        return self._memo.get("swap_test", "", compute)

    def hold_swap_test(self, test: Any) -> None:
        """Keep a swap test made as part of the run (``lab.run(swap=…)``): :meth:`swap_test` returns it."""
        from core.engine.swap import with_swap_test

        self._memo.get("swap_test", "", lambda: SwapTest(test, with_swap_test(self.result, test)))

    @property
    def swap_tests(self) -> tuple[SwapTest, ...]:
        """Every swap test made on this run, in order (empty before :meth:`swap_test`)."""
        return tuple(self._memo.values("swap_test"))

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

        return self._memo.get("internals", "", lambda: analyze(self.lab.handle, self.result, top_k=LENS_TOP_K))

    def lookback(self) -> LookbackAnalysis:
        """The Lookback Lens map of the retrieval path (one traced forward)."""
        from core.methods.lookback import analyze

        return self._memo.get("lookback", "", lambda: analyze(self.lab.handle, self.result))

    def crm_basis(self, *, required: bool = False) -> CrmBasis | None:
        """The model's stored CRM basis for this run's template (bundled for the embedded model), else ``None``.

        Raises:
            ValueError: ``required`` and there is none (compute it on the Layer trajectories page, or
                ``core.methods.crm.compute_basis``).
        """
        from core.methods.crm import load_basis

        basis = self._memo.get("crm_basis", "", lambda: load_basis(self.lab.handle, self.result.template))
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

        def compute() -> ReDeEPView:
            return decompose(self.lab.handle, self.result, choice_for(self.lab.handle, self.result.template))

        return self._memo.get("redeep", "", compute)

    def radar(self, source: str = "query") -> RadarAnalysis:
        """RADAR on the query alone (``source="query"``, the page's default) or on context + query."""
        from core.methods import radar

        if source not in ("query", "context"):
            raise ValueError(f"source must be 'query' or 'context', got {source!r}")

        def compute() -> RadarAnalysis:
            text = radar.radar_prompt(self.result.query, self.result.context if source == "context" else None)
            return radar.analyze_with_table(self.lab.handle, text, radar.cached_feature_table(self.lab.handle))

        return self._memo.get("radar", f"source={source!r}", compute)

    def radar_report(self) -> dict[str, Any]:
        """RADAR's test-set report for this model (bundled for the embedded model).

        Raises:
            ValueError: the model's RADAR features of the bundled sets are not extracted yet.
        """
        from core.methods import radar

        table = radar.cached_feature_table(self.lab.handle)
        if table is None:
            raise ValueError(f"RADAR's features of the bundled sets are not extracted for {self.lab.model} yet.")
        return self._memo.get("radar_report", "", lambda: radar.evaluation_for(self.lab.handle, table))

    def attention_pattern(self, layer: int, head: int, path: str = "retrieval") -> tuple[np.ndarray, list[str]]:
        """One head's attention pattern on one path (one forward) and the path's tokens (the ``attention_head``
        chart's data).

        Raises:
            ValueError: a layer or head out of range.
        """
        from core.methods.internals import attention_pattern, path_sequence

        info = self.lab.handle.info
        if not (0 <= layer < info.n_layers and 0 <= head < info.n_heads):
            raise ValueError(f"layer must be 0…{info.n_layers - 1} and head 0…{info.n_heads - 1}, got {layer}, {head}")

        def compute() -> tuple[np.ndarray, list[str]]:
            ids, tokens, _ = path_sequence(self.lab.handle, self.result, path)
            return attention_pattern(self.lab.handle, ids, layer, head), tokens

        return self._memo.get("attention_pattern", f"layer={layer}, head={head}, path={path!r}", compute)

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


def _judge(detector: Any, inp: Any) -> Any:
    """One detector's verdict on a run, its shared passes planned first (as :func:`core.detectors.agreement.assess`
    plans them for every cheap detector) and released after."""
    from core.detectors.agreement import judge
    from core.detectors.shared import plan as plan_passes
    from core.detectors.shared import release

    plan_passes(inp, [detector])
    try:
        return judge(detector, inp)
    finally:
        release(inp)
