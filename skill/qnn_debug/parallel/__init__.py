"""Independent jobs (block runs, their fp16 floors) run at the same time, on this machine's cores or a Ray cluster.

Why an engine at all: once the CPU reference has produced a model's boundary tensors, every block's simulator run
is independent of the others, and the simulator is single-threaded: on N cores the blocks take 1/N of the time.
The call sites build :class:`Job` lists and call :meth:`Executor.run`; which executor runs them is chosen here:

- :class:`~.serial.SerialExecutor` (``workers=1``, small models): the jobs one after another in one child process
  (the simulator stays out of the caller's process, as every simulator run does);
- :class:`~.ray_engine.RayExecutor`: one Ray task per job. Embedded by default (a local cluster started in this
  process on loopback, sized to this machine's cores, its node's ``memory`` resource the memory budget, so no
  more jobs run at once than the budget holds); ``cluster`` sends the same tasks to an existing cluster.

Each job declares the bytes it needs (the memory budget's estimate); a worker that dies gets its job retried
once, then a :class:`~qnn_debug.errors.WorkerLostError` names the job. Every finished job's result is kept in a
:class:`~.store.JobStore`, so a rerun of the same command resumes with the jobs not yet done.
"""

from __future__ import annotations

from pathlib import Path

from .jobs import AUTO_MIN_BYTES, Executor, Job, ParallelOptions, machine_cores

__all__ = ["AUTO_MIN_BYTES", "Executor", "Job", "ParallelOptions", "choose_executor", "machine_cores"]


def choose_executor(options: ParallelOptions, *, budget: int, work_bytes: int, timeout: float,
                    log_dir: Path | None = None) -> Executor:
    """The executor for ``options``: Ray when a cluster is named, when more than one worker is asked for, or (by
    default) when the machine has more than one core and the jobs hold at least ``AUTO_MIN_BYTES`` of weights;
    else the serial one. Nothing of Ray is imported or started for the serial one."""
    from .serial import SerialExecutor

    if options.cluster:
        from .ray_engine import RayExecutor

        return RayExecutor(cluster=options.cluster, budget=budget, workers=options.workers, timeout=timeout)
    workers = options.workers
    if workers is None:
        workers = machine_cores() if work_bytes >= AUTO_MIN_BYTES else 1
    if workers <= 1:
        return SerialExecutor(timeout=timeout, log_dir=log_dir)
    from .ray_engine import RayExecutor

    return RayExecutor(cluster=None, budget=budget, workers=workers, timeout=timeout)
