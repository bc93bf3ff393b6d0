"""Whether the target saw the reference's inputs, and which tensors it holds but could not be judged.

Part of the metrics stage: read from the rows of the graph inputs. A graph input held as zeros, or whose
first observation differs otherwise, is what the verdict stage blames before any op (``input_not_copied``);
a target fed other data than the reference (its own input recorded under the input's name) is refused.
"""

from __future__ import annotations

import numpy as np

from ..errors import BadInputError
from ..runstore import Run
from . import fmt
from .align import Pair
from .checks import quant_step
from .schema import TensorRow, UnalignedRow
from .stage_types import InputMismatch
from .thresholds import Thresholds


def check_inputs(ref: Run, target: Run, pairs: list[Pair], rows: list[TensorRow], th: Thresholds, *,
                  backend: bool = False) -> tuple[dict[str, list[str]], list[InputMismatch], list[str]]:
    """Graph inputs the target holds as zeros (→ the observations that are), inputs whose first observation
    is a backend copy that differs otherwise, and warnings.

    A graph input recorded under its own name in a run or ``.npz`` (``backend`` False) is what the target
    was fed: if it differs, the target ran on other data (an error). A backend copy (an alias, or anything in
    an MNN dump) that differs cannot tell other baseline data from an input that was never copied, so it
    becomes a finding when it is the input's first observation and a warning always.
    """
    inputs = [(pair, row) for pair, row in zip(pairs, rows, strict=True) if pair.ref.kind == "input"]
    zeros: dict[str, list[str]] = {}
    for pair, _ in inputs:
        arr = target.array(pair.other.name)
        if arr.size and not np.any(arr) and np.any(ref.array(pair.ref.name)):
            zeros.setdefault(pair.ref.name, []).append(pair.name)
    warnings: list[str] = []
    mismatches: dict[str, InputMismatch] = {}
    seen: set[str] = set()
    for pair, row in inputs:
        name = pair.ref.name
        first = name not in seen
        seen.add(name)
        if name in zeros or not _input_differs(pair, row, th):
            continue
        nonfinite = int((row.metrics.get("nan") or 0) + (row.metrics.get("inf") or 0))
        how = (f"holds NaN/Inf ({nonfinite} of {_size(pair)} values)" if nonfinite else
               f"differs from the reference input (SQNR {fmt.db_unit(row.metrics.get('sqnr_db'))})")
        if pair.alias is None and pair.other.kind != "stage" and not backend:
            raise BadInputError(
                f"the target ran on a different input {name!r}: the target's {name!r} {how}",
                hint="rebuild the baseline with the inputs the target used (`qnn-debug baseline MODEL --inputs "
                     "INPUTS_NPZ_OR_TESTDIR`), or re-run the target with the baseline's inputs.npz "
                     "(--inputs BASELINE_DIR/inputs.npz)",
                details={"input": name, "metrics": row.metrics},
            )
        warnings.append(f"the target's copy {pair.name!r} of input {name!r} {how}: other data, or the copy is broken")
        if first:
            mismatches[name] = InputMismatch(name, pair.name, row.metrics.get("sqnr_db"),
                                             constant=_constant(target, pair), nonfinite=nonfinite, size=_size(pair))
    return zeros, list(mismatches.values()), warnings


def _input_differs(pair: Pair, row: TensorRow, th: Thresholds) -> bool:
    """Beyond the floor by a jump, unless it is only the input quantized onto the target's grid."""
    if row.excess_db is None or row.excess_db < th.jump_db:
        return False
    step = quant_step(pair.other.quant)
    return not (step is not None and (row.metrics.get("max_abs") or 0.0) <= 1.01 * step)


def _size(pair: Pair) -> int:
    return int(np.prod(pair.other.shape, dtype=np.int64))


def _constant(target: Run, pair: Pair) -> float | None:
    """The copy's single value when all its (finite) elements are equal: a fill, not data."""
    arr = np.asarray(target.array(pair.other.name), dtype=np.float64).reshape(-1)
    if arr.size < 2 or not np.all(np.isfinite(arr)):
        return None
    lo, hi = float(arr.min()), float(arr.max())
    return lo if lo == hi else None


def uncompared(unaligned: list[UnalignedRow], pairs: list[Pair], rows: list[TensorRow]) -> list[str]:
    """Model tensors the target holds but that could not be judged: a misfit shape, empty, or only NaN/Inf.

    Tensors simply missing from the target (fused away, not dumped) are normal and are not listed here.
    """
    out = [f"{u.name!r}: target shape {u.target_shape} vs reference {u.reference_shape}"
           + (" (empty)" if u.target_shape is not None and 0 in u.target_shape else "")
           for u in unaligned if u.side == "reference" and u.target_shape is not None]
    for pair, row in zip(pairs, rows, strict=True):
        m = row.metrics
        bad = (m.get("nan") or 0) + (m.get("inf") or 0)
        if bad and bad >= _size(pair) and not (m.get("ref_nonfinite") or 0):
            out.append(f"{row.label or row.name!r}: the target holds only NaN/Inf ({int(bad)} values), no value to compare")
    return out
