"""One ModuleBasic run on a target (phone over adb, or a local MNN build): stage, run, fetch, judge.

Every run gets a fresh directory on the target::

    <run>/model/    the .mnn (and the offline context .bin beside it: the plugin resolves it there)
    <run>/testdir/  input.json + <input>.txt (+ reference <output>.txt)
    <run>/work/     ModuleBasic's CWD; it writes work/output/<repeat>_<i>.txt and output.mnn
    <run>/dump/     MNN_QNN_DUMP_DIR, so a QNN dump can never land in (or mix with) another run's files

The executor abstracts only *where* files live and *how* a program starts; the steps and the judging
are the same for both targets.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ..errors import QnnDebugError, TargetError
from ..progress import NULL_PROGRESS, Progress
from .modulebasic import ModuleBasicArgs, ModuleBasicReport, build_command, judge, parse_output
from .testdir import load_references

DUMP_ENV = "MNN_QNN_DUMP_DIR"


class Executor(Protocol):
    """Where ModuleBasic runs. Paths it returns are paths *on the target*."""

    kind: str
    module_basic: str  # ModuleBasic.out on the target

    def begin(self) -> str:
        """Create a fresh, empty run directory on the target and return it."""
        ...

    def put(self, local: Path, target_path: str) -> None:
        """Copy a local file or directory to ``target_path`` (which must not exist yet)."""
        ...

    def mkdir(self, target_path: str) -> None: ...

    def join(self, *parts: str) -> str:
        """A path inside the run directory (refusing anything that would leave it)."""
        ...

    def execute(self, argv: list[str], *, cwd: str, env: dict[str, str], timeout: float) -> tuple[int, str]:
        """Run a program; returns (exit status, combined output)."""
        ...

    def fetch(self, target_path: str, local: Path) -> bool:
        """Copy ``target_path`` (file or directory) to ``local``; False when it does not exist."""
        ...

    def finish(self, keep: bool) -> None:
        """Remove the run directory unless ``keep``."""
        ...

    def base_env(self) -> dict[str, str]:
        """Library search paths etc. for ModuleBasic on this target."""
        ...


@dataclass
class ModuleBasicRun:
    """What one run left on the host: the judged report, fetched outputs, and a dump dir if one was written."""

    report: ModuleBasicReport
    local_dir: Path
    log: str
    command: list[str]
    target_dir: str
    target_kind: str
    outputs: dict[str, np.ndarray] = field(default_factory=dict)  # last repeat's output files, flat
    dump_dir: Path | None = None


def run_module_basic(
    executor: Executor,
    *,
    model: Path,
    companions: list[Path],
    testdir: Path,
    local_dir: Path,
    forward: int,
    precision: int,
    loops: int = 0,
    threads: int = 1,
    run_mask: int = 0,
    timeout: float = 1800.0,
    keep: bool = False,
    progress: Progress = NULL_PROGRESS,
) -> ModuleBasicRun:
    """Stage model + test dir, run ModuleBasic, fetch its outputs and any QNN dump, judge the result."""
    local_dir.mkdir(parents=True, exist_ok=True)
    run_dir = executor.begin()
    failed = True
    try:
        with progress.stage(f"{executor.kind}: stage files", total=2 + len(companions)) as advance:
            model_dir = executor.join("model")
            executor.mkdir(model_dir)
            for f in [model, *companions]:
                executor.put(f, executor.join("model", f.name))
                advance()
            executor.put(testdir, executor.join("testdir"))
            executor.mkdir(executor.join("work", "output"))
            executor.mkdir(executor.join("dump"))
            advance()
        args = ModuleBasicArgs(model=executor.join("model", model.name), testdir=executor.join("testdir"),
                               run_mask=run_mask, forward=forward, loops=loops, threads=threads, precision=precision)
        argv = build_command(executor.module_basic, args)
        env = {**executor.base_env(), DUMP_ENV: executor.join("dump")}
        with progress.stage(f"{executor.kind}: ModuleBasic", total=None, message=f"{executor.kind}: running ModuleBasic"):
            rc, log = executor.execute(argv, cwd=executor.join("work"), env=env, timeout=timeout)
        (local_dir / "modulebasic.log").write_text(log, encoding="utf-8", errors="replace")
        with progress.stage(f"{executor.kind}: fetch results", total=2) as advance:
            got_out = executor.fetch(executor.join("work", "output"), local_dir / "output")
            advance()
            got_dump = executor.fetch(executor.join("dump"), local_dir / "dump")
            advance()
        failed = False
    finally:
        if failed:  # the first error is the one to report; a failing clean-up must not replace it
            with contextlib.suppress(QnnDebugError):
                executor.finish(keep)
        else:
            executor.finish(keep)
    report = parse_output(log, rc)
    outputs = _read_outputs(local_dir / "output", report) if got_out else {}
    references = load_references(testdir)
    judge(report, references=references, outputs=outputs, expected_forward=forward)
    dump = local_dir / "dump"
    has_dump = got_dump and any(p.name.startswith("manifest_") for p in dump.iterdir()) if dump.is_dir() else False
    return ModuleBasicRun(report=report, local_dir=local_dir, log=log, command=argv, target_dir=run_dir, target_kind=executor.kind,
                          outputs=outputs, dump_dir=dump if has_dump else None)


def _read_outputs(output_dir: Path, report: ModuleBasicReport) -> dict[str, np.ndarray]:
    """The last repeat's ``output/<r>_<i>.txt`` per output (ModuleBasic announces each with 'Write … to')."""
    out: dict[str, np.ndarray] = {}
    for name, files in report.written.items():
        rel = files[-1]
        path = output_dir / Path(rel).name
        if path.is_file():
            try:
                out[name] = np.array(path.read_text(encoding="utf-8").split(), dtype=np.float64)
            except ValueError:
                continue
    return out


def require_success(run: ModuleBasicRun, out: Path | None = None) -> None:
    """Crashes and load/forward errors stop a dump; numeric failures do not (they are what we debug). The full
    log of a failed run is kept at ``<out>/logs/modulebasic.log`` and the error names that file."""
    from ..runstore import keep_failed_log

    r = run.report
    if r.status in ("crashed", "error"):
        tail = "\n".join(run.log.strip().splitlines()[-15:])
        cause, hint = mnn_cause(run.log)
        message = f"ModuleBasic failed on the {run.target_kind}: {r.reason}" + (f"; {cause}" if cause else "")
        kept = keep_failed_log(out, "modulebasic.log", run.log, message=message, command=run.command) if out else None
        where = f"ModuleBasic's log: {kept}" if kept else "ModuleBasic's last lines: details.log_tail"
        raise TargetError(f"{message} ({where})",
                          hint=(hint + f"; the whole log is at {kept}" if hint and kept else hint) or
                          f"read {'the log at ' + str(kept) if kept else 'details.log_tail'}; `qnn-debug triage` on it "
                          "explains QNN error codes",
                          details={"log_tail": tail, "command": run.command, **({"log": str(kept)} if kept else {})})


def mnn_cause(log: str) -> tuple[str | None, str | None]:
    """MNN's own words for a failed run, said plainly: a refused op, a refused context binary, a build without
    plugin support. ``(None, None)`` when the log holds none of them."""
    from .refusals import read_tool_output, refusal_hint, refusal_message

    facts = read_tool_output(log)
    causes: list[str] = []
    hints: list[str] = []
    if facts.plugin_missing:
        causes.append("this MNN build has no plugin support (MNN: 'recompile with `MNN_WITH_PLUGIN`'), so it cannot "
                      "run an offline QNN model")
        hints.append("rebuild MNN with -DMNN_WITH_PLUGIN=ON (and -DMNN_QNN=ON), or use the online path: --option mode=online")
    if facts.validate_binary_codes:
        codes = ", ".join(str(c) for c in sorted(set(facts.validate_binary_codes)))
        causes.append(f"QNN refused the context binary ('Failed to validate binary: {codes}') and MNN went on with it")
        hints.append("the QNN libraries that run the model must accept the binary: use the QNN version and soc/arch the "
                     "binary was made for (an HTP simulator may not implement binary validation at all)")
    refused = refusal_message(facts, "ModuleBasic")
    if refused:
        causes.append(refused)
        hints.append(refusal_hint(facts))
    return ("; ".join(causes) or None), ("; ".join(hints) or None)

