"""The verbs of a :class:`~read_or_recall.run.Run` that generate again on its inputs: Self-Critique, SMA, its
context ablation, the ablations, the dose–response and the single-layer sweep. Each returns its own named result
(:mod:`read_or_recall.results`), remembered on the run per settings (``run.computed()`` lists them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from read_or_recall.memo import Memo, settings_key
from read_or_recall.results import Ablation, ContextAblation, NoiseSweep, SelfCritique, SourceAttribution

if TYPE_CHECKING:
    from core.engine.result import DualPathResult
    from core.methods.ablation import Trajectory
    from read_or_recall.lab import Lab


class RunVerbs:
    """The generating verbs of :class:`~read_or_recall.run.Run` (a run's ``lab``, ``result`` and memo)."""

    lab: Lab
    result: DualPathResult
    _memo: Memo

    # ---------------------------------------------------------------------------------------------------------
    # More generations on this run's inputs: each its own result, remembered per settings

    def self_critique(self, **settings: Any) -> SelfCritique:
        """A Self-Critique run on this run's query and context (two new generations; ``settings``: the fields of
        :class:`core.methods.selfcritique.SelfCritiqueSettings`). Its chart: ``.figure("entropies")``."""
        from core.methods.selfcritique import SelfCritiqueSettings, run_self_critique

        chosen = SelfCritiqueSettings(**settings)
        chosen.validate()
        q, c = self.result.query, self.result.context
        return self._memo.get(
            "self_critique", repr(chosen), lambda: SelfCritique(run_self_critique(self.lab.handle, q, c, chosen))
        )

    def sma(self, **settings: Any) -> SourceAttribution:
        """An SMA run (source attribution with the context on and off; ``settings``: the fields of
        :class:`core.methods.sma.SMASettings`). Its charts: ``.figure("text")``, ``.figure("bars")``."""
        from core.methods.sma import SMASettings, run_sma

        chosen = SMASettings(**settings)
        q, c = self.result.query, self.result.context
        return self._memo.get("sma", repr(chosen), lambda: SourceAttribution(run_sma(self.lab.handle, q, c, chosen)))

    def context_ablation(self, **settings: Any) -> ContextAblation:
        """SMA's context ablation: each context sentence left out in turn (one generation each; ``settings``: the
        fields of :class:`core.methods.sma.SMASettings`). Its chart: ``.figure("ablation")``."""
        from core.methods.sma import SMASettings
        from core.methods.sma.run import run_context_ablation

        chosen = SMASettings(**settings)
        q, c = self.result.query, self.result.context
        return self._memo.get(
            "context_ablation",
            repr(chosen),
            lambda: ContextAblation(run_context_ablation(self.lab.handle, q, c, chosen)),
        )

    # ---------------------------------------------------------------------------------------------------------
    # Ablations of this run (the Ablations page)

    def clean_trajectory(self) -> Trajectory:
        """This run's per-layer trajectory at the last prompt token (LTS on the CRM basis, else ‖d_ℓ‖₂): the
        reference of every :meth:`ablate`."""
        from core.methods import ablation

        return self._memo.get("clean_trajectory", "", lambda: ablation.layer_trajectory(self.lab.handle, self.result))

    def ablate(self, layers: str | Sequence[int], *, eps: float = 1.0, seed: int = 0, patch: bool = False) -> Ablation:
        """Noise injection (h′ = h + ε·σ(h)·N(0, 1), CRM §4.4) or activation patching on decoder ``layers``: both
        paths re-generated under the intervention, as on the Ablations page.

        Args:
            layers: decoder layers, as the page writes them (``"10-15"``, ``"1,3,5-7"``, a preset name) or a list.
            eps, seed: the noise scale and its seed (noise); ignored with ``patch``.
            patch: activation patching of ``layers`` at the last prompt token (the no-context prompt's states into
                the retrieval prompt) instead of noise.

        Raises:
            ValueError: bad layers, ε or seed (nothing has run then).
        """
        from core.methods import ablation

        chosen = tuple(ablation.parse_layers(layers, self.lab.handle.info.n_layers))
        clean = self.result
        first = clean.answer_token_ids[0] if clean.n_tokens else None
        noise = {} if patch else {"eps": float(eps), "seed": int(seed)}
        key = settings_key({"layers": list(chosen), "patch": patch, **noise})

        def compute() -> Ablation:
            if patch:
                intervention: dict[str, Any] = {"patch_layers": list(chosen)}
            else:
                intervention = {"noise": ablation.NoiseSpec(chosen, float(eps), int(seed))}
            perturbed = ablation.perturbed_run(
                self.lab.handle, clean.query, clean.context, clean.run_settings, clean_first_token=first, **intervention
            )
            new = type(self)(self.lab, perturbed)
            return Ablation(self, new, chosen, ablation.compare(clean, perturbed), self.clean_trajectory())

        return self._memo.get("ablate", key, compute)

    def dose_response(
        self,
        layers: str | Sequence[int],
        eps_grid: Sequence[float] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> NoiseSweep:
        """Z and log P(first clean token) against ε for noise on one block of layers (the Ablations page's
        dose–response; ``1 + #ε·#seeds`` scoring runs). Its chart: ``.figure()``."""
        from core.methods import ablation
        from core.methods.ablation.sweep import DEFAULT_EPS_GRID, DEFAULT_SEEDS

        grid = tuple(DEFAULT_EPS_GRID if eps_grid is None else eps_grid)
        seed_list = tuple(DEFAULT_SEEDS if seeds is None else seeds)
        r = self.result
        return self._memo.get(
            "dose_response",
            settings_key({"layers": layers, "eps_grid": grid, "seeds": seed_list}),
            lambda: NoiseSweep(
                ablation.dose_response(self.lab.handle, r.query, r.context, r.run_settings, layers, grid, seed_list)
            ),
        )

    def layer_sweep(
        self, eps: float = 1.0, seeds: Sequence[int] = (0,), layers: str | Sequence[int] | None = None
    ) -> NoiseSweep:
        """Noise on one decoder layer at a time at a fixed ε: ΔZ per layer (CRM appendix J; ``1 + #layers·#seeds``
        scoring runs; ``layers`` default: every one). Its chart: ``.figure()``."""
        from core.methods import ablation

        r = self.result
        seed_list = tuple(seeds)
        return self._memo.get(
            "layer_sweep",
            settings_key({"eps": eps, "seeds": seed_list, "layers": layers}),
            lambda: NoiseSweep(
                ablation.layer_sweep(self.lab.handle, r.query, r.context, r.run_settings, eps, seed_list, layers=layers)
            ),
        )
