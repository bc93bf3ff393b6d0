"""The request of ``compare-targets`` (kept beside :mod:`.requests`, which holds the other operations')."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .fields import Cli, PathRole
from .request_base import Request


class CompareTargetsRequest(Request):
    """Two runs of one model on two targets (e.g. MNN's own QNN path on a host build and ONNX Runtime's QNN EP on
    the same simulator), each compared with the same baseline, joined tensor by tensor."""

    baseline: Annotated[str, PathRole("dir"), Cli(positional=True), Field(
        min_length=1, max_length=4096, description="The baseline directory both runs are compared with")]
    target_a: Annotated[str, PathRole("any"), Cli(positional=True), Field(
        min_length=1, max_length=4096, description="The run that loses (e.g. diagnose's host/ run folder, or an MNN "
        "QNN dump directory)")]
    target_b: Annotated[str, PathRole("any"), Cli(positional=True), Field(
        min_length=1, max_length=4096, description="The run it is held against (e.g. diagnose's htp-sim/ run folder)")]
    label_a: Annotated[str | None, Cli(flag="--label-a"), Field(
        default=None, max_length=64, description="What to call A in the text (default: its target's name)")] = None
    label_b: Annotated[str | None, Cli(flag="--label-b"), Field(
        default=None, max_length=64, description="What to call B (default: its target's name)")] = None
    model: Annotated[str | None, PathRole("file"), Cli(flag="--model"), Field(
        default=None, max_length=4096, description="The reference's ONNX model (default: the baseline's)")] = None
    mnn_model: Annotated[str | None, PathRole("file"), Cli(flag="--mnn-model"), Field(
        default=None, max_length=4096, description="Source .mnn of an MNN QNN dump given as a target (names its t<N> "
        "tensors)")] = None
