"""``python -m core`` commands, one module each.

Each module defines ``register(subparsers) -> None`` that adds its parser and sets
``func=<callable(args) -> int>`` with ``parser.set_defaults``. :mod:`core.cli` discovers them, so a new
command is a new file here and nothing else changes. Shared flags and helpers (``add_model_args``,
``settings_from_args``, ``threshold_from_args``, ``load_handle``) are in :mod:`core.cli.common`.
"""
