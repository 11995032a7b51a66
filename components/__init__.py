"""Reusable Streamlit pieces of the Read or Recall app.

* :mod:`components.session` — the glue every page uses: the shared sidebar (model and settings), the cached
  model handle, the shared query/context inputs, the per-session result cache and the live dual-path run.
* :mod:`components.figures` — pure plotly/pandas builders (no Streamlit, no model calls).
* :mod:`components.inputs` — the example picker and the query/context boxes.
* :mod:`components.panels` — the result panels of the dual-path view (verdict, KL chart, top-k, …).

Nothing here does maths beyond presentation (formatting, picking a default position); methods live in
``core``.
"""
