"""Names of the per-row ``DetectorInput.cache`` entries that several detectors (or callers) share.

A detector that computes something another detector also needs (one instrumented forward pass, the context's
token log-probabilities) stores it under one of these keys, so each row pays for it once. Callers put
per-method settings under the ``*_SETTINGS`` keys; detectors leave JSON-ready details under ``*_DETAILS``.
"""

CRM_BASIS = "crm.basis"
"""The :class:`~core.methods.crm.CrmBasis` of the row's model and template."""
CRM_DISPLACEMENT = "crm.displacement"
"""``(n_layers + 1, d)`` float32: h_ℓ(retrieval) − h_ℓ(parametric) at the last prompt token."""
CRM_PARAMETRIC_ANSWER = "crm.parametric_answer"
"""The parametric path's own free answer y_0 (generated when the result has none)."""
CONTEXT_TOKENS = "baselines.context_tokens"
"""Token statistics of the context text (log-probs, μ, σ) from one forward pass."""
RADAR_DETAILS = "radar"
"""RADAR's analyzed text, features and prediction for the row's query."""
SELFCRITIQUE_SETTINGS = "selfcritique.settings"
"""A :class:`~core.methods.selfcritique.SelfCritiqueSettings` for the ``selfcritique`` detector."""
SELFCRITIQUE_DETAILS = "selfcritique"
"""The Self-Critique run's summary."""
SMA_SETTINGS = "sma.settings"
"""An :class:`~core.methods.sma.SMASettings` for the ``sma`` detector."""
SMA_DETAILS = "sma"
"""The SMA run's summary (scores, labels, β on/off, ADS)."""
SMA_RUNNER = "sma.runner"
"""A callable with :func:`~core.methods.sma.run_sma`'s signature that the ``sma`` detector runs instead (``detect
--ray`` puts :class:`core.scale.ray_sma.RaySMARunner` here: the perturbed generations on Ray actors)."""
COMBINED_DETAILS = "combined"
"""The combined detector's P(memorized), τ, verdict, transformed features and per-feature contributions."""
LOOKBACK_MAP = "lookback.map"
"""The row's :class:`~core.methods.lookback.LookbackMap` (the retrieval path's lookback ratios, one forward)."""
LOOKBACK_DETAILS = "lookback"
"""The Lookback Lens detector's P(recalled), τ, verdict and most-weighted heads."""
RETRIEVAL_TRACE = "shared.retrieval_trace"
"""The row's :class:`~core.detectors.shared.RetrievalPass`: one traced forward of the retrieval prompt + answer that
the Lookback Lens, ReDeEP and CRM's h^c read (dropped by :func:`~core.detectors.shared.release`)."""
TEXT_PASS = "shared.text_pass"
"""Set once the row's texts pass ran or was declined (:func:`~core.detectors.shared.text_pass`)."""
RADAR_TRACE = "radar.trace"
"""The :class:`~core.methods.radar.RadarTrace` of the row's RADAR prompt, when the texts pass computed it."""
PLANNED = "shared.planned"
"""What the detectors a caller will run on the row read (their declared ``reads``,
:func:`~core.detectors.shared.plan`)."""
REDEEP_SETTINGS = "redeep.settings"
"""A :class:`~core.methods.redeep.ReDeEPChoice` for the ReDeEP detectors to use instead of the stored one."""
REDEEP_DETAILS = "redeep"
"""The row's :class:`~core.methods.redeep.ReDeEPView` (shared by ``redeep``, ``redeep_ecs``, ``redeep_pks``)."""
