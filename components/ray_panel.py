"""The Evaluate page's Ray panel: when the app is started with ``READ_OR_RECALL_RAY_ADDRESS``, the cluster's
workers and a button that runs the evaluation there, with a progress bar (rows done / total, rows per minute).

Without the variable nothing is drawn and nothing of Ray is imported. With it, the panel connects once per app
process (:func:`core.scale.cluster.connect`, cached), lists the alive nodes (CPUs, GPUs, memory), and on a
click scores the page's job on the cluster (:func:`core.scale.ray_eval.score_job_on_ray`: each worker loads
the sidebar's model once; one GPU per worker when the cluster has GPUs). The scored job is stored under the
page's job key, so the result tabs show it exactly like a local run's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import streamlit as st

from components import keys
from components.evaluate_jobs import JOB_KEYS
from components.text import escape_markdown
from components.threshold_state import active_threshold
from core.evaluation import EvaluationJob, JobSpec, Row, any_busy
from core.model.handle import ModelHandle
from core.model.loading import EMBEDDED_NAME

ADDRESS_ENV = "READ_OR_RECALL_RAY_ADDRESS"
"""The environment variable that turns the panel on (``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``)."""


def ray_address() -> str | None:
    """The Ray address the app was started with, or ``None``."""
    return os.environ.get(ADDRESS_ENV, "").strip() or None


@st.cache_resource(show_spinner="Connecting to the Ray cluster…")
def _connect(address: str) -> Any:
    """One connection per app process (every session shares it)."""
    from core.scale.cluster import connect

    return connect(address)


def _nodes_table(nodes: Sequence[Any]) -> list[dict[str, Any]]:
    return [
        {
            "node": n.address + (" (head)" if n.is_head else ""),
            "CPUs": n.cpus,
            "GPUs": n.gpus,
            "memory (GiB)": n.memory_gb,
        }
        for n in nodes
    ]


def loaded_revision(handle: ModelHandle) -> str | None:
    """The hub revision the sidebar's model was loaded at (the allow-list's pinned one in public mode), or ``None``.

    The loader (:func:`core.model.loading.load_model`) names it in the handle's source: ``huggingface hub
    ID@REVISION``.
    """
    prefix = f"huggingface hub {handle.info.name}@"
    source = handle.info.source or ""
    return (source[len(prefix) :].strip() or None) if source.startswith(prefix) else None


def _model_spec(handle: ModelHandle) -> Any:
    """What each worker loads: the sidebar's model (the embedded one by its loader name) at the revision the app
    loaded — never the hub's default branch instead of a pinned revision — device chosen by the cluster (a GPU
    per worker when there are GPUs)."""
    from core.scale.spec import ModelSpec

    if handle.info.name == EMBEDDED_NAME:
        return ModelSpec(model=None)
    return ModelSpec(model=handle.info.name, revision=loaded_revision(handle))


def draw_ray_panel(handle: ModelHandle, job_key: str, spec: JobSpec, rows: Sequence[Row]) -> None:
    """The cluster's workers and "Run on the Ray cluster" (nothing without ``READ_OR_RECALL_RAY_ADDRESS``).

    Args:
        handle: the sidebar's model (it plans the batches; the workers load the same model).
        job_key: where the page keeps the job its result tabs show; ``spec`` and ``rows``: the run to score
            (no run starts while a job of the page is busy).
    """
    address = ray_address()
    if address is None:
        return
    from core.scale.cluster import ClusterError, default_workers, nodes

    with st.container(border=True):
        st.markdown(f"**Ray cluster** `{escape_markdown(address)}`")
        try:
            session = _connect(address)
            alive = nodes()
        except (ClusterError, ConnectionError, RuntimeError) as exc:
            _connect.clear()
            st.error(f"The Ray cluster cannot be reached: {escape_markdown(str(exc))}")
            return
        gpus = sum(n.gpus for n in alive)
        cpus = sum(n.cpus for n in alive)
        workers = default_workers(gpus, cpus)
        st.caption(
            f"{len(alive)} node(s) · {cpus:g} CPUs · {gpus:g} GPUs → {workers} worker(s), each loading "
            f"{escape_markdown(handle.info.name)} once ({'one GPU' if gpus else 'one CPU'} each)"
            f" · connected as {escape_markdown(session.address)}"
        )
        st.dataframe(_nodes_table(alive), hide_index=True)
        busy = any_busy([st.session_state.get(k) for k in JOB_KEYS])
        if not st.button(
            "Run the evaluation on the Ray cluster",
            key=keys.scoped(job_key, "ray_run"),
            disabled=busy or not rows,
            icon=":material/hub:",
            help="Scores every row on the cluster's workers; the tabs below then show the results as for a local run.",
        ):
            return
        _run(handle, job_key, spec, rows)


def _run(handle: ModelHandle, job_key: str, spec: JobSpec, rows: Sequence[Row]) -> None:
    from core.scale.ray_eval import score_job_on_ray

    bar = st.progress(0.0, text=f"0 / {len(rows)} rows scored on the cluster · starting the workers…")
    t0 = time.perf_counter()

    def progress(done: int, total: int, _text: str = "") -> None:
        rate = done / max(1e-9, time.perf_counter() - t0) * 60
        bar.progress(done / max(1, total), text=f"{done} / {total} rows scored on the cluster · {rate:.1f} rows/min")

    job = EvaluationJob(spec, list(rows))
    threshold, source = active_threshold(handle.info.name)
    try:
        stats = score_job_on_ray(
            _model_spec(handle), job, threshold=threshold, threshold_source=source, planner=handle, progress=progress
        )
    except (ValueError, RuntimeError) as exc:
        st.error(f"The run on the cluster failed: {escape_markdown(str(exc))}")
        return
    st.session_state[job_key] = job
    st.success(
        f"{stats.items} rows scored by {stats.workers} {stats.device} worker(s) in {stats.seconds:.0f} s "
        f"({stats.items_per_minute:.1f} rows/min); {stats.actor_restarts} worker restart(s), "
        f"{stats.batch_retries} batch re-run(s)."
    )
