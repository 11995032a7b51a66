"""Every Streamlit widget and session-state key of the app, as named constants.

Two kinds of constants live here:

* **Keys** (values starting with ``ror.``): passed as ``key=`` to a widget or element, or used to index
  ``st.session_state`` directly. Keys of elements that must change with a result or a choice are built with
  :func:`scoped`, e.g. ``scoped(ATTN_MAP, path, tag)`` → ``"ror.attn.map.<path>.<tag>"``.
* **Persistent value names** (no ``ror.`` prefix): passed to :func:`components.state.persistent`,
  :func:`~components.state.stored` and :func:`~components.state.set_stored`. A persistent value ``name`` is
  kept in the store :func:`store_key` ``(name)`` = ``"ror.s.<name>"`` and drawn by the widget
  :func:`widget_key` ``(name)`` = ``"ror.w.<name>"`` (the key tests address, e.g. ``ror.w.query``).

The strings are part of the app's behavior (tests and browser tests address widgets by them): renaming a
constant is free, changing its value is not.
"""

from __future__ import annotations

import hashlib

PREFIX = "ror."
STORE_PREFIX = "ror.s."
WIDGET_PREFIX = "ror.w."


def store_key(name: str) -> str:
    """The session-state key of the store that keeps the persistent value ``name`` across pages."""
    _check_name(name)
    return STORE_PREFIX + name


def widget_key(name: str) -> str:
    """The widget key of the persistent value ``name`` (seeded from its store on every draw)."""
    _check_name(name)
    return WIDGET_PREFIX + name


def tag(text: str) -> str:
    """A short stable tag of a text key (e.g. a page's run key) for :func:`scoped`: 12 hex digits of its sha1.

    A :class:`~core.engine.result.DualPathResult` has its own identity, :func:`core.engine.result.result_digest`.
    """
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def scoped(base: str, *parts: object) -> str:
    """``base`` followed by ``parts``, dot-separated: a key that changes with what it shows.

    Example::

        st.plotly_chart(fig, key=keys.scoped(keys.KL_CHART, result_digest(result)))  # "ror.kl_chart.<digest>"
    """
    if not base.startswith(PREFIX):
        raise ValueError(f"scoped() needs a key starting with {PREFIX!r}, got {base!r}.")
    return ".".join([base, *(str(p) for p in parts)])


def _check_name(name: str) -> None:
    if not name or name.startswith(PREFIX):
        raise ValueError(f"A persistent value name is non-empty and has no {PREFIX!r} prefix, got {name!r}.")


# ----------------------------------------------------------------------------------------------------------
# Session state shared by the components

RESULTS = "ror.results"
"""The session's dual-path results (an LRU: result key → DualPathResult); see components.state."""
LAST_RESULT = "ror.last"
"""The result key of the most recent dual-path result."""
LAST_MODEL = "ror.model.last_loaded"
"""The (model spec, revision) this session last loaded: the fallback while another one cannot load."""
RUN_REQUEST = "ror.run_request"
"""Set to ask the next Dual Path page run to start a run (e.g. before ``st.switch_page``)."""
DRAWN = "ror.drawn"
"""Widget key → (page, parameters) it was last drawn with; see components.state.seed_widget."""
RUN_NUMBER = "ror.run_number"
"""This session's script runs so far (counted by components.page.open_page); see components.state.seed_widget."""
ACTIVE_RUN = "ror.queue.active"
"""The run number of the session's latest page run (components.queue.SessionRuns): older runs are cancelled."""
THRESHOLDS = "ror.threshold.active"
"""The RePCS τ chosen in this session, per model name; see components.threshold_state."""
TAU_MODE = "threshold.mode"
"""Persistent: how the RePCS τ is applied, "length" (τ(L) with the inconclusive band) or "paper" (one constant τ)."""
EXAMPLE_RESTORE = "ror.example.restore"
"""The "restore the example's inputs" button under an edited example (components.inputs)."""
EVAL_TAU_CONFIRM = "ror.eval.tau.confirm"
"""The Evaluate page's "I understand these held-out figures" checkbox before adopting a poor τ."""
URL_RESTORED = "ror.url.restored"
"""Set once this session has read the page URL's inputs and settings (components.url_state)."""
URL_RESULT_PENDING = "ror.url.result_pending"
"""Set when the URL restored inputs: the first page run with a model looks their run up (components.url_state)."""
AGREEMENT = "ror.agreement"
"""Every detector's verdict per dual-path result (an LRU: result tag → agreement state); see components.agreement."""
AGREEMENT_RUN = "ror.agreement.run"
"""Base of the agreement view's "run this costly detector" buttons (scoped by detector and result)."""
SWAP_TESTS = "ror.swap.tests"
"""The swap tests run in this session (an LRU: result digest → SwapTest); see components.swap_view."""
INTERNALS_ANALYSES = "ror.internals.analyses"
INTERNALS_PATTERNS = "ror.internals.patterns"
INTERNALS_PROJECTIONS = "ror.internals.projections"

# Persistent values shared by every page (the sidebar and the shared inputs)
QUERY = "query"
CONTEXT = "context"
EXAMPLE = "example"
MODEL_CHOICE = "model_choice"
MODEL_ID = "model_id"
MODEL_REVISION = "model_revision"
SCORE_WINDOW = "score_window"
MAX_NEW_TOKENS = "max_new_tokens"
TEMPLATE = "template"
TOP_K = "top_k"
KL_SPLIT = "kl_split"

# ----------------------------------------------------------------------------------------------------------
# Landing page, Dual Path page and its result panels

LANDING_ANALYZE = "ror.landing.analyze"
RUN = "ror.run"
SWAP_RUN = "ror.swap.run"
SWAP_AUTO = "ror.swap.auto"
"""The Dual Path page's "swap-test where context and memory agree" toggle (on by default)."""
CALIBRATE_BUDGET = "ror.calibrate.budget"
CALIBRATE_START = "ror.calibrate.start"
CALIBRATE_CANCEL = "ror.calibrate.cancel"
KL_CHART = "ror.kl_chart"
"""Prefix: the per-token KL chart, scoped by the result tag."""
TOPK_POSITION = "ror.position"
"""Prefix: the top-k position selector, scoped by the result tag."""

# ----------------------------------------------------------------------------------------------------------
# Attention (page 2)

ATTN_CELL = "ror.attn.cell"
ATTN_POSITION = "ror.attn.position"
ATTN_MAP = "ror.attn.map"
ATTN_DIFF = "ror.attn.diff"
ATTN_MASS = "ror.attn.mass"
ATTN_PATH = "ror.attn.path_w"
ATTN_LAYER = "ror.attn.layer_w"
ATTN_HEAD = "ror.attn.head_w"
ATTN_ALL_ROWS = "ror.attn.all_rows"
ATTN_PATTERN = "ror.attn.pattern"
ATTN_JSON = "ror.attn.json"
ATTN_CSV = "ror.attn.csv"
ATTN_WHERE = "attn.where"
ATTN_TAU = "attn.tau"
ATTN_LOOKBACK = "ror.attn.lookback"
"""Session cache of the Lookback Lens views (:class:`core.methods.lookback.LookbackAnalysis`), by result digest."""
ATTN_LOOKBACK_RUN = "ror.attn.lookback_run"
ATTN_LOOKBACK_MAP = "ror.attn.lookback_map"
ATTN_LOOKBACK_CURVE = "ror.attn.lookback_curve"
ATTN_LOOKBACK_CSV = "ror.attn.lookback_csv"
ATTN_LOOKBACK_WINDOWS_CSV = "ror.attn.lookback_windows_csv"
ATTN_COPY = "ror.attn.copy"
"""Session cache of the copying heads (:class:`core.methods.copying.CopyingHeads`), by result digest."""
ATTN_COPY_RUN = "ror.attn.copy_run"
ATTN_COPY_MAP = "ror.attn.copy_map"
ATTN_COPY_JSON = "ror.attn.copy_json"

# ----------------------------------------------------------------------------------------------------------
# Layer trajectories (page 3)

TRAJ_COMPUTE = "ror.traj.compute"
TRAJ_LTS = "ror.traj.lts"
TRAJ_BASELINES = "ror.traj.baselines"
TRAJ_QUANTITY = "ror.traj.quantity"
TRAJ_POSITIONS = "ror.traj.positions"
TRAJ_CSV = "ror.traj.csv"
TRAJ_JSON = "ror.traj.json"
CRM_DIRECTION = "crm.direction"

# ----------------------------------------------------------------------------------------------------------
# Vocabulary lens (page 4)

VOCAB_ONLY_KEPT = "ror.vocab.only_kept"
VOCAB_PROJ_CSV = "ror.vocab.proj_csv"
VOCAB_POSITION = "ror.vocab.position"
VOCAB_LENS = "ror.vocab.lens"
VOCAB_LENS_CSV = "ror.vocab.lens_csv"
VOCAB_DIRECTION = "vocab.direction"
VOCAB_K = "vocab.k"

# ----------------------------------------------------------------------------------------------------------
# Ablations (page 5)

ABLATE_RESULTS = "ror.ablate.results"
ABLATE_LAST_NOISE = "ror.ablate.last_noise"
ABLATE_RUN_CLEAN = "ror.ablate.run_clean"
ABLATE_RUN_NOISE = "ror.ablate.run_noise"
ABLATE_RUN_DOSE = "ror.ablate.run_dose"
ABLATE_RUN_SWEEP = "ror.ablate.run_sweep"
ABLATE_RUN_PATCH = "ror.ablate.run_patch"
ABLATE_DIFF = "ror.ablate.diff"
ABLATE_KL = "ror.ablate.kl"
ABLATE_TRAJ = "ror.ablate.traj"
ABLATE_DOWNLOAD = "ror.ablate.dl"
ABLATE_DOSE = "ror.ablate.dose"
ABLATE_SWEEP = "ror.ablate.sweep"
ABLATE_CSV = "ror.ablate.csv"
ABLATE_JSON = "ror.ablate.json"
ABLATE_MODE = "ablate.mode"
ABLATE_PRESET = "ablate.preset"
ABLATE_BLOCK = "ablate.block"
ABLATE_SINGLE = "ablate.single"
ABLATE_CUSTOM = "ablate.custom"
ABLATE_EPS = "ablate.eps"
ABLATE_SEED = "ablate.seed"
ABLATE_GRID = "ablate.grid"
ABLATE_GRID_SEEDS = "ablate.grid_seeds"
ABLATE_GRID_TOKENS = "ablate.grid_tokens"
ABLATE_SWEEP_SEEDS = "ablate.sweep_seeds"
ABLATE_SWEEP_TOKENS = "ablate.sweep_tokens"
ABLATE_PATCH_NOISE = "ablate.patch_noise"

# ----------------------------------------------------------------------------------------------------------
# Self-Critique (page 6)

SC_RESULTS = "ror.sc.results"
SC_LAST = "ror.sc.last"
SC_RESET = "ror.sc.reset"
SC_RUN = "ror.sc.run"
SC_ENTROPY = "ror.sc.entropy"
SC_JSON = "ror.sc.dl.json"
SC_CSV = "ror.sc.dl.csv"
SC_PATH = "sc.path"
SC_TOP_K = "sc.top_k"
SC_INSTRUCTION = "sc.instruction"

# ----------------------------------------------------------------------------------------------------------
# Source attribution, SMA (page 7)

SMA_RESULTS = "ror.sma.results"
SMA_LAST = "ror.sma.last"
SMA_ABLATIONS = "ror.sma.ablations"
SMA_RUN = "ror.sma.run"
SMA_COLOR = "ror.sma.color"
SMA_TEXT = "ror.sma.text"
SMA_BARS = "ror.sma.bars"
SMA_ABLATE = "ror.sma.ablate"
SMA_ABLATION = "ror.sma.ablation"
SMA_ABLATION_CSV = "ror.sma.dl.ablation"
SMA_JSON = "ror.sma.dl.json"
SMA_CSV = "ror.sma.dl.csv"
SMA_N_SAMPLES = "sma.n_samples"
SMA_GRANULARITY = "sma.granularity"
SMA_SCOPE = "sma.scope"
SMA_METHOD = "sma.method"
SMA_PERTURBATION = "sma.perturbation"
SMA_REFERENCE = "sma.reference"
SMA_MAX_NEW_TOKENS = "sma.max_new_tokens"
SMA_GAMMA_LENGTH = "sma.gamma_length"
SMA_GAMMA_SIMILARITY = "sma.gamma_similarity"
SMA_ALPHA = "sma.alpha"
SMA_FIT_INTERCEPT = "sma.fit_intercept"
SMA_SEED = "sma.seed"
SMA_TAU = "sma.tau"
SMA_TAU1 = "sma.tau1"
SMA_TAU2 = "sma.tau2"
SMA_FIRST_TIER = "sma.first_tier"

# ----------------------------------------------------------------------------------------------------------
# RADAR (page 8)

RADAR_EXTRACT = "ror.radar.extract"
RADAR_PROBABILITY = "ror.radar.prob"
RADAR_TRAJECTORY = "ror.radar.traj"
RADAR_HEADS = "ror.radar.heads"
RADAR_ACCURACY = "ror.radar.acc"
RADAR_SCATTER = "ror.radar.scatter"
RADAR_JSON = "ror.radar.dl_json"
RADAR_CSV = "ror.radar.dl_csv"
RADAR_SOURCE = "radar.source"

# ----------------------------------------------------------------------------------------------------------
# Evaluate (page 9)

EVAL_JOB_MAIN = "ror.eval.job.main"
"""A scoring job; its buttons are ``scoped(job, "run" | "stop" | "resume" | "discard")``."""
EVAL_JOB_CONFLICT = "ror.eval.job.conflict"
EVAL_CURRENT_SPEC = "ror.eval.current_spec"
EVAL_TAU_UPLOAD = "ror.eval.tau_upload"
EVAL_RESET_TAU_TOP = "ror.eval.reset_tau_top"
EVAL_USE_LOADED_TAU = "ror.eval.use_loaded_tau"
EVAL_UPLOAD = "ror.eval.upload"
EVAL_ROC = "ror.eval.roc"
EVAL_METRICS = "ror.eval.metrics"
EVAL_CSV = "ror.eval.dl_csv"
EVAL_JSON = "ror.eval.dl_json"
EVAL_ROWS = "ror.eval.rows"
EVAL_OPEN_ROW = "ror.eval.open_row"
EVAL_OPEN = "ror.eval.open"
EVAL_ROWS_CSV = "ror.eval.dl_rows"
EVAL_ALPHA = "ror.eval.alpha"
EVAL_EPSILON = "ror.eval.epsilon"
EVAL_CAL_MODE = "ror.eval.cal_mode"
EVAL_CAL_ROWS = "ror.eval.cal_rows"
EVAL_CAL_FRACTION = "ror.eval.cal_fraction"
EVAL_CALIBRATION_FIG = "ror.eval.calibration_fig"
EVAL_CAL_LENGTH_FIG = "ror.eval.calibration_length_fig"
EVAL_LENGTH_TAU_FIG = "ror.eval.length_tau_fig"
EVAL_LENGTH_FIG = "ror.eval.length_fig"
EVAL_USE_TAU = "ror.eval.use_tau"
EVAL_TAU_JSON = "ror.eval.dl_tau"
EVAL_RESET_TAU = "ror.eval.reset_tau"
EVAL_ROBUSTNESS = "ror.eval.robustness"
EVAL_ROBUSTNESS_TABLE = "ror.eval.robustness_table"
EVAL_CONFLICT_COUNTS = "ror.eval.conflict_counts"
EVAL_CONFLICT_DETECTOR = "ror.eval.conflict_detector"
EVAL_CONFLICT_FIG = "ror.eval.conflict_fig"
EVAL_CONFLICT_ROWS = "ror.eval.conflict_rows"
EVAL_CONFLICT_CSV = "ror.eval.dl_conflict"
EVAL_BEHAVIOR_CONFLICT = "ror.eval.behavior_conflict"
"""Prefix of the behavior-AUC widgets of the conflict set (``components.evaluate_behavior``)."""
EVAL_BEHAVIOR_MAIN = "ror.eval.behavior_main"
"""Prefix of the behavior-AUC widgets of the main evaluation's rows (a behavior-labeled set)."""
EVAL_SOURCE = "eval.source"
EVAL_SAMPLE = "eval.sample"
"""Prefix of a persistent name: rows to score of one set, ``f"{EVAL_SAMPLE}.<digest>.<rows>"``."""
EVAL_SAMPLE_ALL = "ror.eval.sample_all"
"""The "Score all N rows" button next to the sample size (scoped by the set's persistent name)."""
EVAL_KS = "eval.ks"
EVAL_DETECTORS = "eval.detectors"
EVAL_SIGMAS = "eval.sigmas"
EVAL_BATCH = "eval.batch"
EVAL_SWAP = "eval.swap"
EVAL_CONFIRMED = "eval.confirmed"

# Audit log page (pages/10_Audit_Log.py)
AUDIT_REFRESH = "ror.audit.refresh"
AUDIT_FILTER = "ror.audit.filter"
AUDIT_RATE = "ror.audit.rate"
AUDIT_RECORD = "ror.audit.record"
AUDIT_TRAJECTORY = "ror.audit.trajectory"
