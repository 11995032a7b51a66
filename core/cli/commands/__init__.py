"""Extra ``python -m core`` sub-commands, one module each.

Each module defines ``register(subparsers) -> None`` that adds its parser and sets
``func=<callable(args) -> int>`` with ``parser.set_defaults``. :mod:`core.cli` discovers them, so a new
command is a new file here and nothing else changes. Helpers ``add_model_args`` and ``settings_from_args``
in :mod:`core.cli` give every command the same model/settings flags.
"""
