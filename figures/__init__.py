"""Every chart of Read or Recall: pure plotly / pandas builders, no Streamlit and no model.

The app's pages (through :mod:`components`) and the notebook API (:mod:`read_or_recall`) both draw with these same
functions, from the same analyses in ``core``; this package sits below both, so that the notebook's install
(``pip install .``) carries the charts and none of the app (docs/notebook.md, "Installing it").

* :mod:`figures.base` — the dual-path result (KL and entropy per token, top-k tables) and the shared plotly helpers
  (one line series, escaped labels, legends, colored text cells).
* :mod:`figures.layer_axes` — axes, marks and a figure frame shared by the internals figures.
* :mod:`figures.attention`, :mod:`figures.trajectory`, :mod:`figures.vocabulary`, :mod:`figures.redeep` — the
  Attention, Layer trajectories (with ReDeEP) and Vocabulary lens pages; :mod:`figures.copying` the Attention
  page's heads that copied the answer.
* :mod:`figures.ablation`, :mod:`figures.detectors` (Self-Critique, SMA), :mod:`figures.radar` — the Ablations,
  Self-Critique / Source attribution and RADAR pages.
* :mod:`figures.evaluate`, :mod:`figures.calibration`, :mod:`figures.audit` — the Evaluate page (its calibration
  tab) and the Audit log page.
"""
