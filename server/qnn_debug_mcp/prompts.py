"""Prompts: the two conversations users start most often, phrased as the workflow the tools expect."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from pydantic import Field


def register(server: MCPServer) -> None:
    @server.prompt(name="find_first_failing_op", title="Find the first failing operator")
    def find_first_failing_op(
        model: Annotated[str, Field(description="Path of the .onnx or .mnn model, inside the workspace")],
        target: Annotated[str, Field(description="htp-sim, device or host")] = "htp-sim",
    ) -> str:
        """Localise where a model's QNN (HTP/NPU) output starts to go wrong, with numbers as evidence."""
        return (
            f"Find the first operator where `{model}` goes wrong on the QNN target `{target}`.\n\n"
            "Work in this order and quote the numbers you get:\n"
            f"1. `baseline` on the model: ONNX Runtime CPU fp32 reference, the fp16 floor and the MNN CPU gate. "
            "If the baseline is not trusted, stop and explain why.\n"
            f"2. `dump_qnn` with target `{target}`, reusing the baseline's inputs, so every intermediate tensor is captured in one run.\n"
            "3. `compare` the baseline against the dump: report `first_failing` (tensor, op, op type) and the `verdict`.\n"
            "4. Tell a real bug from fp16/quantization error: compare the op's error with the fp16 floor at the same tensor.\n"
            "5. `lookup_op_constraints` for the failing op type and check its parameters against the constraints.\n"
            "6. Propose the smallest fix (model change, conversion flag, precision setting) and say how to verify it by re-running.\n"
            "Long steps return a job id: follow it with `job_status` / `job_result` instead of starting the step again.\n"
            "Read `playbook://wrong-numbers` if the verdict says the error is real."
        )

    @server.prompt(name="triage_qnn_error", title="Triage this QNN error")
    def triage_qnn_error(
        log: Annotated[str, Field(max_length=200_000, description="The error output or log excerpt")],
    ) -> str:
        """Explain a QNN/MNN error log (codes such as 1002, 6000, 3110/0xc26) and the next step."""
        return (
            "Triage this MNN/QNN error. Call `triage_log` with the text below. If its answer has "
            "`low_confidence`, read the whole log yourself by `playbook://triage-labels` (the order of failures "
            "first, then its table) and name the category with the line that decides it; triage's answer is then "
            "only a lead. Then read the playbook of that category (`playbook://<name>`) and answer with: what "
            "failed, the evidence line, the likely cause and the one next command or change to try.\n\n"
            f"```\n{log}\n```"
        )
