"""Jobs as Ray tasks: an embedded local cluster (in-process, loopback, this machine's cores) or an existing one.

Why Ray: its tasks declare the memory they need (the scheduler keeps a node's running tasks within its
``memory`` resource, which is what ``--max-memory`` budgets), a task whose worker dies is retried by the engine
itself (``max_retries``), and one ``ray start`` per machine makes a cluster with no code of ours on the other
side but this package. Workers read the model and its external data from the path the caller gives (on a
cluster: a path every node mounts the same way), and the boundary values from the run's folder (likewise).

The engine is imported and started only here, only when a command fans out: the rest of the tool never pays
for it. In one process the embedded cluster is started once and reused while the core count and budget stay
the same (a test module, an MCP engine child); an ended process takes it down (Ray ties its processes to ours).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ..errors import (
    MemoryBudgetError,
    MissingDependencyError,
    QnnDebugError,
    TargetError,
    WorkerLostError,
    error_from_dict,
)
from ..progress import Progress
from .jobs import Job, check_order, machine_cores, schedule
from .store import open_store

OBJECT_STORE_BYTES = 96 << 20  # jobs pass file paths and small JSON answers: the store only carries those
POLL_S = 1.0
KEEP_WAIT_S = 2.0  # how long a failing run waits for the jobs that finished with it, to keep them
LOOPBACK = "127.0.0.1"
CONNECT_S = 5.0
_STATE: dict[str, Any] = {"key": None}


def _ray(embedded: bool) -> Any:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no telemetry from a debugging tool
    os.environ.setdefault("RAY_AUTH_MODE", "token")  # Ray's default, said so (else it warns on every start)
    try:
        import ray
        from ray._private import ray_constants
    except ImportError:
        raise MissingDependencyError("the Python package 'ray' is not installed in the environment the engine runs in",
                                     hint="install it there (pip install 'ray==2.60.0'), or run with --workers 1",
                                     details={"module": "ray"}) from None
    if embedded:
        # Ray swaps a loopback node address for the machine's outward one unless it runs single-node; an embedded
        # cluster has one node, and nothing of it is announced beyond this machine's loopback
        ray_constants.ENABLE_RAY_CLUSTER = False
    return ray


def connect(cluster: str | None, workers: int, budget: int) -> Any:
    """The Ray module, connected: to ``cluster``, or to an embedded cluster of ``workers`` CPUs whose node offers
    ``budget`` bytes of memory to tasks. Returns in well under a second when already connected the same way."""
    ray = _ray(embedded=not cluster)
    key = (cluster, None, None) if cluster else (None, workers, budget)
    if ray.is_initialized() and _STATE["key"] == key:
        return ray
    if ray.is_initialized():
        ray.shutdown()
    if cluster:
        _reachable(cluster)
    t0 = time.monotonic()
    try:
        if cluster:
            ray.init(address=cluster, log_to_driver=False, configure_logging=False)
        else:
            ray.init(address="local", num_cpus=workers, object_store_memory=OBJECT_STORE_BYTES, _memory=budget,
                     include_dashboard=False, log_to_driver=False, configure_logging=False,
                     _node_ip_address=LOOPBACK, _system_config={"task_oom_retries": 1})
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"the Ray cluster at {cluster}" if cluster else "an embedded Ray cluster"
        raise TargetError(f"could not connect to {where}: {e}",
                          hint="check the address (`ray status` on the head prints it) and that the head is up"
                               if cluster else "run with --workers 1 to run the jobs one after another") from None
    _quiet_stdout()
    _STATE.update(key=key, started_s=round(time.monotonic() - t0, 3))
    return ray


def _quiet_stdout() -> None:
    """Ray's driver prints the cluster's error notes (a worker died, a task is retried) to stdout from a thread of
    its own; our stdout carries ``--json`` answers and the MCP stream, so those notes go to stderr instead."""
    from ray._private import worker as ray_worker

    original = getattr(ray_worker, "print_to_stdstream", None)
    if original is None or getattr(original, "_qnn_debug", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr._qnn_debug = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr


def _reachable(cluster: str) -> None:
    """A head that does not answer is said at once (Ray itself retries the connection for minutes)."""
    import socket

    host, _, port = cluster.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_S):
            return
    except (OSError, ValueError) as e:
        raise TargetError(f"no Ray cluster answers at {cluster} ({e})",
                          hint="start its head with `ray start --head` (it prints the address), check the address "
                               "and the network, or drop --cluster to run on this machine") from None


def started_s() -> float | None:
    """How long the last connect took (the engine's start-up overhead)."""
    value = _STATE.get("started_s")
    return float(value) if value is not None else None


def _call(fn: str, args: dict[str, Any], env: dict[str, str], *after: dict[str, Any]) -> dict[str, Any]:
    """``after``: the answers of the jobs this one waits for (Ray starts it only once they exist); their data is
    in files, so only a failed one matters here: this job then does not run."""
    from qnn_debug.parallel.runner import run_job

    failed = next((a for a in after if "error" in a), None)
    if failed is not None:
        return {"error": failed["error"], "pid": os.getpid()}
    return run_job(fn, args, env)


class RayExecutor:
    name = "ray"

    def __init__(self, *, cluster: str | None, budget: int, workers: int | None, timeout: float):
        self.cluster, self.budget, self.timeout = cluster, budget, timeout
        self.workers = workers or machine_cores()
        self.slots = self.workers

    def run(self, jobs: list[Job], *, progress: Progress, stage: str, store: Path | None = None) -> list[dict[str, Any]]:
        check_order(jobs)
        kept_store = open_store(store)
        results: list[dict[str, Any] | None] = [kept_store.get(j) if kept_store else None for j in jobs]
        todo = [i for i, r in enumerate(results) if r is None]
        if not todo:
            return [r for r in results if r is not None]
        ray = connect(self.cluster, self.workers, self.budget)
        self._check_fits(ray, [jobs[i] for i in todo])
        remote = ray.remote(_call)
        refs: dict[Any, int] = {}
        by_key: dict[str, Any] = {}
        # in schedule()'s order (Ray starts tasks that are ready in the order they were submitted); a job waits for
        # its ``after`` jobs through their answers as arguments, so Ray starts it once they are done
        for i in schedule(jobs, todo):
            job = jobs[i]
            deps = [by_key[k] for k in job.after if k in by_key]  # a job kept from an earlier run is done
            ref = remote.options(num_cpus=1, memory=max(1, int(job.memory)), max_retries=1, retry_exceptions=False,
                                 name=f"qnn-debug {job.label}").remote(job.fn, job.args, job.env, *deps)
            refs[ref] = i
            by_key[job.key] = ref
        done_before = len(jobs) - len(todo)
        started = time.monotonic()
        nodes = len([n for n in ray.nodes() if n.get("Alive")])
        try:
            with progress.stage(stage, total=len(jobs), message=f"{stage}: {len(todo)} jobs on {nodes} node(s)"
                                + (f", {done_before} kept from an earlier run" if done_before else "")) as advance:
                if done_before:
                    advance(done_before, message=f"{stage}: {done_before} job(s) kept from an earlier run")
                while refs:
                    if time.monotonic() - started > self.timeout:
                        raise TargetError(f"{stage} timed out after {self.timeout:.0f} s",
                                          hint="raise --timeout; the jobs already done are kept for a rerun")
                    ready, _ = ray.wait(list(refs), num_returns=1, timeout=POLL_S)
                    for ref in ready:
                        i = refs.pop(ref)
                        try:
                            out = self._get(ray, ref, jobs[i])
                        except QnnDebugError:
                            self._keep_done(ray, refs, jobs, kept_store, [by_key[k] for k in jobs[i].after if k in by_key])
                            raise
                        if kept_store is not None:
                            kept_store.put(jobs[i], out)
                        results[i] = out
                        finished = len(jobs) - len(refs) - done_before
                        spent = time.monotonic() - started
                        left = spent / finished * len(refs)
                        advance(message=f"{jobs[i].label} done ({len(jobs) - len(refs)}/{len(jobs)}), {spent:.0f} s "
                                        f"elapsed, ~{left:.0f} s left; {min(len(refs), self.slots * nodes)} running on "
                                        f"{nodes} node(s)")
        finally:  # an error, a timeout, a cancel (SIGTERM unwinds as SystemExit): no job of this run goes on
            for ref in refs:
                ray.cancel(ref, force=True)
        return [r for r in results if r is not None]

    def _keep_done(self, ray: Any, refs: dict[Any, int], jobs: list[Job], store: Any, after: list[Any]) -> None:
        """Before an error ends the run, every job that has finished is kept for the rerun. The failed job's
        ``after`` jobs are done (it started on their answers), yet Ray may report its failure to us first."""
        if store is None or not refs:
            return
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=KEEP_WAIT_S)
        for ref in dict.fromkeys([*(r for r in after if r in refs), *ready]):
            i = refs.pop(ref)
            try:
                store.put(jobs[i], self._get(ray, ref, jobs[i]))
            except QnnDebugError:
                continue  # failed as well: nothing to keep

    def _get(self, ray: Any, ref: Any, job: Job) -> dict[str, Any]:
        from ray import exceptions as rx

        lost = tuple(getattr(rx, n) for n in ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError",
                                              "ObjectLostError", "LocalRayletDiedError") if hasattr(rx, n))
        try:
            out: dict[str, Any] = ray.get(ref)
        except lost as e:
            raise WorkerLostError(
                f"the worker running {job.label} died twice (killed, or out of memory: {type(e).__name__}); the job "
                "was retried once", hint="run the same command again to resume (the jobs already done are kept); if "
                "it was memory, lower --max-memory or --layers-per-block", details={"job": job.key, "block": job.label}) from None
        except rx.RayError as e:
            raise TargetError(f"the job running {job.label} failed in the engine: {type(e).__name__}",
                              hint="see the Ray worker logs; run with --workers 1 to run it in one process",
                              details={"job": job.key, "block": job.label}) from None
        if "error" in out:
            raise error_from_dict(out["error"])
        result: dict[str, Any] = out["result"]
        return result

    def _check_fits(self, ray: Any, jobs: list[Job]) -> None:
        """A job that no node can hold would wait for ever: refused instead, naming the job."""
        biggest = max(jobs, key=lambda j: j.memory)
        room = max((float(n.get("Resources", {}).get("memory", 0)) for n in ray.nodes() if n.get("Alive")), default=0.0)
        if biggest.memory > room:
            gib = 1 << 30
            raise MemoryBudgetError(
                f"{biggest.label} needs about {biggest.memory / gib:.1f} GiB, more than any node of the cluster offers "
                f"({room / gib:.1f} GiB)", hint="start the nodes with more `ray start --memory`, or lower "
                "--layers-per-block", details={"job": biggest.key, "block_bytes": biggest.memory, "node_bytes": room})
