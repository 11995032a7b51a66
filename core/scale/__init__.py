"""Scale-out on Ray: evaluate, the single-layer sweep and SMA's perturbed generations over Ray actors.

Nothing here imports Ray at package import; the modules that do (:mod:`~core.scale.pool` and the three jobs)
are imported only when a command runs with ``--ray`` (:mod:`~core.scale.options`) or the app is started with
``READ_OR_RECALL_RAY_ADDRESS`` (``components.ray_panel``). See docs/scale.md.

* :mod:`~core.scale.cluster` — connecting (``auto`` / ``local`` / an address; a bad address fails in seconds),
  the cluster's nodes;
* :mod:`~core.scale.spec` — :class:`~core.scale.spec.ModelSpec` (what each worker loads, once) and the driver's
  weightless planning handle;
* :mod:`~core.scale.pool` — Ray Data ``map_batches`` over an actor class, whole planned batches per call,
  results in order and each exactly once, restarts and re-runs counted;
* :mod:`~core.scale.ray_eval`, :mod:`~core.scale.ray_sweep`, :mod:`~core.scale.ray_sma` — the three jobs;
* :mod:`~core.scale.options` — the ``--ray`` / ``--workers`` flags and the commands' runs.
"""
