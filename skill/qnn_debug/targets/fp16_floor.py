"""The fp16 floor: the same graph with every float tensor stored as fp16 and computed in fp32, on ORT CPU.

It answers "how much error does fp16 storage alone cause here?" per tensor, which is what an HTP fp16
run should be judged against (measured: HTP and the floor grow alike with depth). The graph rewrite is
:func:`qnn_debug.onnx_graph.fp16_floor`; tensor names are kept, so the floor aligns with the reference.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from ..progress import NULL_PROGRESS, Progress
from ..runstore import Run
from .ort_cpu import capture_on_cpu

if TYPE_CHECKING:
    import onnx

    from ..inputs import PreparedInputs


def run_floor(model_path: str | os.PathLike[str], model: onnx.ModelProto, prepared: PreparedInputs,
              out: str | os.PathLike[str], *, force: bool = False, progress: Progress = NULL_PROGRESS) -> Run:
    """Mark-all run of the floor graph; the inputs themselves are stored after rounding to fp16."""
    import numpy as np

    from ..onnx_graph import FP16_MAX, fp16_floor

    with progress.stage("fp16-floor: build", total=None, message="fp16-floor: rounding every float tensor through fp16"):
        floor_model = fp16_floor(model)
    rounded = {
        k: (np.clip(v, -FP16_MAX, FP16_MAX).astype(np.float16).astype(v.dtype) if v.dtype == np.float32 else v)
        for k, v in prepared.arrays.items()
    }
    # Rounding is idempotent, so feeding rounded data changes nothing and stores what the graph saw.
    return capture_on_cpu(model_path, model, replace(prepared, arrays=rounded), out, role="fp16_floor",
                          target="fp16-floor", precision="fp16", run_model=floor_model, force=force, progress=progress,
                          extra={"floor": "fp16 storage, fp32 compute; clipped to ±65504 like HTP; "
                                          "float weights with |w| <= 65504 rounded"})
