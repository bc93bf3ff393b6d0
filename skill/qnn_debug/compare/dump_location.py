"""Where the first failing row is in the target's own files: the MNN op that made it, its ``t<N>`` tensor and the
dump file holding it, so a reader can open that file (``execution_000000_tensor_0007_t12.raw``)."""

from __future__ import annotations

import re
from pathlib import Path

from ..runstore import Run
from .schema import CompareResult

_T = re.compile(r"t\d+")


def locate_in_dump(result: CompareResult, run: Run) -> None:
    """Fill ``first_failing.dump_tensor`` / ``dump_file`` when the target is an MNN QNN dump."""
    ff = result.first_failing
    extra = run.record.extra
    dump_dir = extra.get("dump_dir")
    if ff is None or not dump_dir:
        return
    name = _dump_name(result, run)
    if name is None:
        return
    ff.dump_tensor = name
    execution = extra.get("execution")
    pattern = (f"execution_{int(execution):06d}_tensor_*_{name}.raw" if isinstance(execution, int)
               else f"execution_*_tensor_*_{name}.raw")
    found = sorted(Path(str(dump_dir)).glob(pattern))
    if found:
        ff.dump_file = str(found[-1])


def _dump_name(result: CompareResult, run: Run) -> str | None:
    """The dump's own name of the failing tensor: the row's target name, or ``t<index>`` of the MNN tensor."""
    ff = result.first_failing
    assert ff is not None
    if ff.target_tensor:  # a stage of the target's own: named by the .mnn, dumped as t<index>
        if _T.fullmatch(ff.target_tensor):
            return ff.target_tensor
        if result.mnn_model:
            from ..mnn.model_reader import read_mnn_model

            try:
                index = read_mnn_model(result.mnn_model).tensor_index(ff.target_tensor)
            except Exception:
                index = None
            if index is not None:
                return f"t{index}"
        return None
    wanted = ff.observed_as or ff.tensor
    for t in run.tensors:
        if t.name == wanted and t.target_name:
            return t.target_name
    return None
