"""Read or Recall core library: models, prompts, the dual-path engine and the detectors.

This package never imports streamlit; the app's pages call it and render its results.
"""
