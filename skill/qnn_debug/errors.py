"""Typed errors with exit codes and a next step, so no caller ever shows a traceback to a user.

Every error the engine raises on purpose derives from :class:`QnnDebugError`. The CLI maps
``exit_code`` to the process status; the MCP server turns the message plus ``hint`` into a ToolError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class QnnDebugError(Exception):
    """Base class: a one-line ``message`` saying what was wrong and a ``hint`` saying what to do."""

    exit_code = 1
    kind = "error"

    def __init__(self, message: str, *, hint: str | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details or {}

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message

    def to_dict(self) -> dict[str, Any]:
        """The wire form of this error: ``type`` is the class name, so a parent process rebuilds the same class
        (:func:`error_from_dict`); ``error`` is the coarse kind a script can switch on."""
        return {"error": self.kind, "type": type(self).__name__, "message": self.message, "hint": self.hint,
                "details": self.details}


class BadInputError(QnnDebugError):
    """The user's input is wrong: missing file, corrupt model, mismatched inputs, bad option. Exit 2."""

    exit_code = 2
    kind = "bad_input"


class TargetError(QnnDebugError):
    """A target (HTP simulator, MNN, device, host build) failed to run the model. Exit 3."""

    exit_code = 3
    kind = "target_failure"


class UnsupportedOnTargetError(TargetError):
    """Some nodes would not run on the QNN target; we refuse to fall back to CPU silently."""

    kind = "unsupported_nodes"


class DeviceError(TargetError):
    """adb/device problems: no device, unauthorized, offline, timeouts."""

    kind = "device_failure"


class MissingDependencyError(TargetError):
    """A package the engine runs on is not installed in this Python (e.g. MNN's wheel, which is installed apart)."""

    kind = "missing_dependency"


class WorkerLostError(TargetError):
    """A parallel job's worker process died (killed, out of memory) on its retry too; ``details`` names the job.
    The jobs already done are kept: the same command resumes."""

    kind = "worker_lost"


class MemoryBudgetError(BadInputError):
    """The smallest unit of work (one decoder block) does not fit the memory budget; ``details`` has the numbers."""

    kind = "memory_budget"


class DiskSpaceError(BadInputError):
    """The run folder would not fit the free space of its disk; ``details`` has the numbers (bytes)."""

    kind = "disk_space"


NODEPS_REQUIREMENTS = Path(__file__).resolve().parent / "data" / "nodeps_requirements.txt"


def _pinned(name: str) -> str:
    """``name==version`` as pinned in the wheels installed without dependencies (the file `make setup` installs from,
    so the hint and the tested install cannot drift apart); the bare name if the file has no pin for it."""
    try:
        lines = NODEPS_REQUIREMENTS.read_text(encoding="utf-8").splitlines()
    except OSError:
        return name
    for line in lines:
        if line.split("==")[0].strip().lower() == name.lower():
            return line.strip()
    return name


# import name -> how to install it into the environment the engine runs in (MNN without its dependencies: its
# scripts install packages at run time; its pin is read from the requirements file only when the hint is built)
INSTALL_COMMANDS = {
    "MNN": "pip install --no-deps {MNN}",
    "onnxruntime": "pip install onnxruntime-qnn",
    "onnx": "pip install onnx",
    "numpy": "pip install numpy",
}


def missing_dependency(e: ImportError) -> MissingDependencyError | None:
    """``ModuleNotFoundError`` for a package we depend on, as an error that says what to install; None otherwise."""
    top = (getattr(e, "name", None) or "").split(".")[0]
    if not isinstance(e, ModuleNotFoundError) or top not in INSTALL_COMMANDS:
        return None
    command = INSTALL_COMMANDS[top].format(MNN=_pinned("MNN"))
    return MissingDependencyError(f"the Python package {top!r} is not installed in the environment the engine runs in",
                                  hint=f"install it there ({command}; `make setup` does it in a "
                                       "checkout) and run the command again", details={"module": top})


def flatten_message(text: str, limit: int = 600) -> str:
    """Native messages (ORT, QNN, MNN) span lines and tabs; an error message must be one readable line."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def error_from_dict(doc: dict[str, Any]) -> QnnDebugError:
    """Rebuild the error another process sent with :meth:`QnnDebugError.to_dict`: the same class (by ``type``),
    message, hint and details. An unknown class name becomes a :class:`TargetError` with its kind kept."""
    cls = ERROR_CLASSES.get(str(doc.get("type") or ""), TargetError)
    details = doc.get("details")
    err = cls(str(doc.get("message") or "the engine failed"), hint=doc.get("hint"),
              details=details if isinstance(details, dict) else {})
    kind = doc.get("error")
    if isinstance(kind, str) and kind:
        err.kind = kind  # e.g. a worker's "timeout": the sender's word for what happened
    return err


ERROR_CLASSES: dict[str, type[QnnDebugError]] = {
    cls.__name__: cls
    for cls in (QnnDebugError, BadInputError, TargetError, UnsupportedOnTargetError, DeviceError,
                MissingDependencyError, MemoryBudgetError, DiskSpaceError, WorkerLostError)
}
