"""Pydantic models the tools return (their JSON schema is each tool's ``outputSchema``).

Engine results are the engine's own result models (:mod:`qnn_debug.api`), never re-modelled here: a
long tool answers ``LongToolAnswer[Result]``, so its output schema describes ``result`` exactly.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class ErrorInfo(BaseModel):
    """Why a job failed: the engine's message and what to do next."""

    type: str | None = Field(None, description="the engine error's class, e.g. BadInputError, UnsupportedOnTargetError")
    kind: str = Field(description="bad_input, target_failure, device_failure, unsupported_nodes, missing_dependency, timeout, internal")
    message: str
    hint: str | None = None
    details: dict[str, Any] | None = Field(None, description="e.g. QNN's own `reasons` and the rejected `nodes`")


class ProgressLine(BaseModel):
    """One engine progress event as kept in a job's log."""

    t: float = Field(description="seconds since the job was created")
    stage: str
    done: float
    total: float | None = None
    message: str = ""
    finished: bool = False


class JobInfo(BaseModel):
    """State of a background job; call job_result once ``state`` is succeeded/failed/cancelled."""

    job_id: str
    tool: str
    title: str
    state: JobState
    created_at: str
    elapsed_s: float
    progress_events: int = Field(description="how many progress events the job has emitted so far")
    recent_progress: list[ProgressLine] = Field(description="the latest event of each recent stage, oldest first")
    error: ErrorInfo | None = None
    next_step: str


class JobResultSchema:
    """Publishes ``JobOutcome.result`` as one of the long operations' result models (which one: ``tool``).

    The value itself stays the result document the job kept (a compare's rows already trimmed to ``top``):
    nothing is re-validated or dropped; only the schema says what it holds."""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> Any:
        from typing import Union

        from pydantic import TypeAdapter

        from qnn_debug.api import all_operations

        results = tuple(dict.fromkeys(op.result for op in all_operations() if op.long))
        union: Any = Union[results]  # noqa: UP007 (a runtime tuple of models)
        schema = handler(TypeAdapter(union | None).core_schema)
        schema["description"] = ("the engine's result once the job succeeded: the result model of the tool named in "
                                 "`tool` (the same document the tool returns inline)")
        return schema


class JobOutcome(BaseModel):
    """A finished (or still running) job and, when it succeeded, the engine's result document."""

    job_id: str
    tool: str
    state: JobState
    result: Annotated[dict[str, Any] | None, JobResultSchema()] = None
    error: ErrorInfo | None = None
    report_uri: str | None = Field(None, description="resource URI of the run report, when the result has one")
    next_step: str


R = TypeVar("R")


class LongToolAnswer(BaseModel, Generic[R]):
    """Answer of a tool that may run long: the result, or a job id to follow with job_status/job_result."""

    status: JobState = Field(description="succeeded: `result` is filled; queued/running: follow `job_id`")
    job_id: str | None = Field(None, description="id for job_status / job_result / job_cancel; None when run inline")
    summary: str
    result: R | None = Field(None, description="the engine's result once finished")
    report_uri: str | None = None
    next_step: str
