"""Cut models on an MNN target (``device``, ``host``): each probe runs ModuleBasic on the same machine three times.

The cut target model runs on QNN (forward type 5, precision low = fp16); the cut reference model runs on MNN
CPU fp32 (forward 0, precision 1) as the reference and on MNN CPU at precision 2 (fp16 where the CPU has it)
as the floor; with ``opencl`` also OpenCL fp16 (forward 3) as a third opinion. Each cut is converted to
``.mnn`` by the MNN wheel's converter in a worker (importing MNN writes to fd 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import TargetError
from .base import ProbeSetup, ProbeValues

if TYPE_CHECKING:
    import numpy as np
    import onnx

CONVERT_WORKER = "qnn_debug.workers.mnn_convert_worker"


class MnnProber:
    """Probes through one ModuleBasic executor (a phone over adb, or a local MNN build)."""

    def __init__(self, executor: Any, setup: ProbeSetup):
        self.executor, self.setup, self.count = executor, setup, 0

    def probe(self, model: onnx.ModelProto, outputs: list[str], inputs: dict[str, np.ndarray], *,
              reference: onnx.ModelProto | None = None, work: Path | None = None) -> ProbeValues:
        import onnx

        from ..mnn.runner import require_success, run_module_basic
        from ..mnn.testdir_builder import write_testdir
        from ..workers import run_worker

        setup = self.setup
        where = work or setup.work / f"cut{self.count:04d}"
        self.count += 1
        where.mkdir(parents=True, exist_ok=True)
        models = {}
        for role, cut in (("target", model), ("reference", reference if reference is not None else model)):
            onnx.save(cut, str(where / f"{role}.onnx"))
            run_worker(CONVERT_WORKER, {"src": str(where / f"{role}.onnx"), "dst": str(where / f"{role}.mnn")},
                       log_path=where / f"convert_{role}.log", timeout=setup.timeout, what="MNN converter")
            models[role] = (where / f"{role}.mnn", {v.name for v in cut.graph.input})
        feeds = {k: v for k, v in inputs.items() if k in models["reference"][1]}
        testdir = where / "testdir"
        write_testdir(testdir, feeds, outputs, shape_mutable=False)
        runs = [("qnn", "target", 5, 2), ("cpu_fp32", "reference", 0, 1), ("cpu_fp16", "reference", 0, 2)]
        if setup.opencl:
            runs.append(("opencl_fp16", "reference", 3, 2))
        values: dict[str, dict[str, np.ndarray]] = {}
        for label, role, forward, precision in runs:
            mb = run_module_basic(self.executor, model=models[role][0], companions=[], testdir=testdir,
                                  local_dir=where / label, forward=forward, precision=precision,
                                  timeout=setup.timeout, progress=setup.progress)
            require_success(mb)
            missing = [n for n in outputs if n not in mb.outputs]
            if missing:
                raise TargetError(f"ModuleBasic ({label}) wrote no value for {missing[0]!r}",
                                  hint=f"see {where / label / 'modulebasic.log'}")
            values[label] = dict(mb.outputs)
        opinions = {"opencl_fp16": values["opencl_fp16"]} if "opencl_fp16" in values else {}
        return ProbeValues(target=values["qnn"], reference=values["cpu_fp32"], floor=values["cpu_fp16"],
                           opinions=opinions)
