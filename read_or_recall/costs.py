"""What each verb of a :class:`~read_or_recall.run.Run` runs on the model, before it runs (``run.estimate(verb)``).

Each entry counts the work as the pages count it for their estimates: generations (each up to a token budget) and
forward passes. :func:`read_or_recall.memo.plan` turns the count into seconds from this machine's measured unit
costs (:func:`core.engine.estimate.estimate`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from read_or_recall.memo import settings_key

if TYPE_CHECKING:
    from read_or_recall.run import Run

Work = tuple[int, int, int]
"""``(generations, tokens per generation, forward passes)``."""


def _budget(run: Run) -> int:
    return int(run.result.run_settings.max_new_tokens)


def _self_critique(run: Run, settings: Mapping[str, Any]) -> tuple[str, Work]:
    from core.methods.selfcritique import SelfCritiqueSettings

    chosen = SelfCritiqueSettings(**settings)
    tokens = max(int(chosen.max_new_tokens), int(chosen.critique_tokens))
    return repr(chosen), (2, tokens, 2)


def _sma(run: Run, settings: Mapping[str, Any]) -> tuple[str, Work]:
    from core.methods.sma import SMASettings

    chosen = SMASettings(**settings)
    return repr(chosen), (2 * (int(chosen.n_samples) + 1), int(chosen.max_new_tokens), 2 * int(chosen.n_samples))


def _context_ablation(run: Run, settings: Mapping[str, Any]) -> tuple[str, Work]:
    from core.methods.sma import SMASettings
    from core.methods.sma.units import split_units

    chosen = SMASettings(**settings)
    return repr(chosen), (len(split_units(run.result.context, "sentence")) + 2, int(chosen.max_new_tokens), 0)


def _ablate(run: Run, settings: Mapping[str, Any]) -> tuple[str, Work]:
    from core.methods import ablation

    layers = list(ablation.parse_layers(settings.get("layers", "all"), run.lab.handle.info.n_layers))
    patch = bool(settings.get("patch", False))
    noise = {} if patch else {"eps": float(settings.get("eps", 1.0)), "seed": int(settings.get("seed", 0))}
    return settings_key({"layers": layers, "patch": patch, **noise}), (1, _budget(run), 1)


def _dose_response(run: Run, settings: Mapping[str, Any]) -> tuple[str, Work]:
    from core.methods.ablation.sweep import DEFAULT_EPS_GRID, DEFAULT_SEEDS, SWEEP_MAX_NEW_TOKENS

    grid = tuple(settings.get("eps_grid") or DEFAULT_EPS_GRID)
    seeds = tuple(settings.get("seeds") or DEFAULT_SEEDS)
    key = settings_key({"layers": settings.get("layers"), "eps_grid": grid, "seeds": seeds})
    runs = 1 + sum(1 for e in grid if e > 0) * len(seeds)
    return key, (runs, SWEEP_MAX_NEW_TOKENS, runs)


def _layer_sweep(run: Run, settings: Mapping[str, Any]) -> tuple[str, Work]:
    from core.methods import ablation
    from core.methods.ablation.sweep import SWEEP_MAX_NEW_TOKENS

    seeds = tuple(settings.get("seeds", (0,)))
    layers = settings.get("layers")
    n_layers = run.lab.handle.info.n_layers
    n = n_layers if layers is None else len(ablation.parse_layers(layers, n_layers))
    key = settings_key({"eps": settings.get("eps", 1.0), "seeds": seeds, "layers": layers})
    return key, (1 + n * len(seeds), SWEEP_MAX_NEW_TOKENS, 1 + n * len(seeds))


def _fixed(work: Work, key: str = "") -> Callable[[Run, Mapping[str, Any]], tuple[str, Work]]:
    return lambda run, settings: (key if not settings else settings_key(settings), work)


VERBS: dict[str, tuple[str, Callable[[Run, Mapping[str, Any]], tuple[str, Work]]]] = {
    "agreement": ("agreement", _fixed((0, 0, 1))),
    "detectors": ("agreement", _fixed((0, 0, 1))),
    "internals": ("internals", _fixed((0, 0, 2))),
    "lookback": ("lookback", _fixed((0, 0, 1))),
    "redeep": ("redeep", _fixed((0, 0, 1))),
    "radar": ("radar", lambda run, s: (f"source={s.get('source', 'query')!r}", (0, 0, 1))),
    "clean_trajectory": ("clean_trajectory", _fixed((0, 0, 2))),
    "swap_test": ("swap_test", lambda run, s: ("", (1, _budget(run), 1))),
    "self_critique": ("self_critique", _self_critique),
    "sma": ("sma", _sma),
    "context_ablation": ("context_ablation", _context_ablation),
    "ablate": ("ablate", _ablate),
    "dose_response": ("dose_response", _dose_response),
    "layer_sweep": ("layer_sweep", _layer_sweep),
}
"""Each verb an estimate covers: the analysis it is held under and its work for given settings."""


def work_of(run: Run, verb: str, settings: Mapping[str, Any]) -> tuple[str, str, Work]:
    """``(analysis, its settings key, work)`` of ``run.<verb>(**settings)``: where the run would hold it, and
    ``(generations, tokens per generation, forward passes)``.

    Raises:
        ValueError: an unknown verb.
    """
    if verb not in VERBS:
        raise ValueError(f"No estimate for {verb!r}; the verbs a run estimates are: {', '.join(VERBS)}.")
    analysis, count = VERBS[verb]
    key, work = count(run, settings)
    return analysis, key, work
