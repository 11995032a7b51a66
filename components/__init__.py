"""Reusable Streamlit pieces of the Read or Recall app: pages draw with them, ``core`` does the maths.

The page glue:

* :mod:`components.frame` and :mod:`components.prologue` — what a page draws before it imports its libraries:
  its title and introduction, then (from light modules only) the per-run setup and its inputs.
* :mod:`components.page` — the prologue every page starts with: :func:`~components.page.open_page` sets the
  page config, draws the shared sidebar, loads the shared model handle (or shows a plain error and stops)
  and returns a :class:`~components.page.PageContext` (settings, handle, shared inputs, the last result).
* :mod:`components.state` — the app's state in ``st.session_state``: persistent widget values, the shared
  query/context and the per-session cache of dual-path results.
* :mod:`components.widgets` — the shared widgets: sidebar (model and run settings), model facts, the two
  answer columns and the live dual-path run.
* :mod:`components.lru` — :func:`~components.lru.session_lru`, the one bounded per-session LRU cache.
* :mod:`components.keys` — every widget and session-state key, as named constants.
* :mod:`components.text` — untrusted text on a page: markdown escaping, plain error messages without server
  paths.
* :mod:`components.inputs` — the example picker and the shared query/context boxes.
* :mod:`components.panels` — the result panels of the Dual Path page (verdict, KL chart, top-k, export …).

The figure builders (pure plotly / pandas: no Streamlit, no model) are their own package, :mod:`figures`, below
both these pieces and the notebook API (``read_or_recall``), so that the notebook's install holds no app code.

Per-view state and widgets:

* :mod:`components.internals_state` — the inside-the-model views (Attention, Layer trajectories, Vocabulary
  lens): :func:`~components.internals_state.open_view`, the cached analysis of the last run, head patterns,
  CRM bases and vocabulary projections.
* :mod:`components.threshold_state` — the session's RePCS threshold τ, set on the Evaluate page for the
  whole app.
* :mod:`components.evaluate_jobs`, :mod:`components.evaluate_tabs` and :mod:`components.evaluate_calibration`
  — the Evaluate page's scoring-job controls, its result tabs and its calibration tab.

Nothing here does maths beyond presentation (formatting, picking a default position); methods live in
``core``.
"""
