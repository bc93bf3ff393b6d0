"""Request models of the public operations: field names, types, limits and help, declared once.

The MCP tool of an operation takes exactly these fields as its arguments (plus server-only ones such
as ``background``); the CLI command reads them from its flags (:class:`~.fields.Cli`). Paths are
plain strings marked with :class:`~.fields.PathRole`, so the server can confine them before use.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from ..mnn.soc import DEFAULT_SOC, default_soc_help
from .fields import Cli, PathRole

MAX_LOG_CHARS = 2_000_000


class Request(BaseModel):
    """Base of every request: unknown fields are refused (a misspelt option must not be ignored)."""

    model_config = ConfigDict(extra="forbid")

    def default_out(self) -> tuple[str, str] | None:
        """Where this request's output goes when ``out`` is not given: ``(group, leaf)``, i.e. the CLI's
        ``qnn-debug-runs/<group>/<leaf>`` and the server's fresh folder under the same names. None: no output."""
        return None


class TriageRequest(Request):
    """A log to classify: a file (``log_path``) or the text itself (``log_text``), and past solved cases."""

    log_text: Annotated[str | None, Cli(hidden=True), Field(
        default=None, max_length=MAX_LOG_CHARS, description="The log itself (stdout+stderr of the failing run)")] = None
    log_path: Annotated[str | None, PathRole("file"), Cli(positional=True), Field(
        default=None, max_length=4096,
        description="A log file (MNN stdout, QNN/ORT log, logcat, gdb backtrace; any size); give this or log_text")] = None
    cases_path: Annotated[str | None, PathRole("file"), Cli(flag="--cases"), Field(
        default=None, max_length=4096,
        description="Cases file of past solved problems (JSON lines written by `qnn-debug case-add`); default: "
        "qnn-debug-cases.jsonl in the working folder when it exists")] = None


ProbeShape = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[0-9x]+(:[a-z0-9]+)?(=[-0-9.,eE+]*)?$")]


class OpLookupRequest(Request):
    """An op to look up (MNN OpType name or number, ONNX op or QNN op) and, optionally, a simulator probe."""

    op: Annotated[str, Cli(positional=True), Field(
        min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:+-]*$",
        description="MNN OpType name or number (e.g. Convolution or 17), ONNX op (Conv) or QNN op (Conv2d)")]
    probe: Annotated[bool, Cli(flag="--probe"), Field(
        description="also build a one-op ONNX graph and try it on the HTP simulator (takes seconds)")] = False
    shapes: Annotated[list[ProbeShape] | None, Cli(flag="--shape"), Field(
        default=None, max_length=8, description="probe inputs, one per input: DIMS[:DTYPE][=V1,...], e.g. "
        "1x64x56x56:float32; later inputs become constants")] = None
    attrs: Annotated[dict[Annotated[str, Field(max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")],
                          Annotated[str, Field(max_length=200)]] | None, Cli(flag="--attr"), Field(
        default=None, max_length=32, description='probe ONNX attributes, e.g. {"kernel_shape": "3,3"}')] = None
    soc: Annotated[int, Cli(flag="--soc"), Field(
        ge=1, le=1000, description=f"soc_model of the probe ({default_soc_help()}; 30 = fp32-accurate check)")] = DEFAULT_SOC
    sdk: Annotated[str | None, PathRole("dir", role="exec"), Cli(flag="--sdk"), Field(
        default=None, max_length=4096, description="QNN/QAIRT SDK root with headers and HTML docs (default: "
        "$QNN_SDK_ROOT)")] = None
