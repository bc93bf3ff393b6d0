"""How comparison numbers read in text (CLI, Markdown report, verdict sentences); JSON keeps full precision.

One convention everywhere, so numbers side by side are comparable: dB with one decimal, relative errors
with three significant digits. Two values are markers, not measurements, and are worded as such: the
±200 dB SQNR cap (identical tensors, or a zero reference) and the fp16 cap a floor is judged at (HTP is
never better than about fp16, see :class:`~qnn_debug.compare.thresholds.Thresholds.floor_cap_db`).
Pure Python: the CLI imports it after a run without paying for numpy.
"""

from __future__ import annotations

SQNR_CAP_DB = 200.0  # must equal metrics.SQNR_CAP_DB (identical tensors are reported as +cap)
NONE = "–"


def db(x: float | None) -> str:
    """'39.6', 'exact' for identical tensors, '−∞' for a zero reference with any error, '–' for none."""
    if x is None:
        return NONE
    if x >= SQNR_CAP_DB:
        return "exact"
    if x <= -SQNR_CAP_DB:
        return "−∞"
    return f"{x:.1f}"


def db_unit(x: float | None) -> str:
    """:func:`db` with the unit where there is a number: '39.6 dB', 'exact', '–'."""
    text = db(x)
    return f"{text} dB" if text not in ("exact", NONE) else text


def rel(x: float | None) -> str:
    """A relative error (rel L2, diff rate) with three significant digits: '1.16e-02'."""
    return NONE if x is None else f"{x:.2e}"


def amount(x: float | None) -> str:
    """A difference in dB (excess, jump) or a count of quantization steps: one decimal."""
    return NONE if x is None else f"{x:.1f}"


def observer(x: float | None) -> str:
    """Marked vs unmarked outputs: 'identical' rather than the 200 dB cap."""
    if x is not None and x >= SQNR_CAP_DB:
        return "identical"
    return f"{db_unit(x)} SQNR"


def yardstick(floor_sqnr: float | None, cap_db: float, *, has_floor: bool = True, quantized: bool = False) -> str:
    """What an excess is measured from, in words, never presenting the cap as the floor's measurement."""
    if not has_floor:
        return f"the fixed {cap_db:g} dB fp16 level (no floor run)"
    if floor_sqnr is None:
        return f"the {cap_db:g} dB fp16 level (no floor value for this tensor)"
    if floor_sqnr < cap_db:
        return f"the fp16 floor ({db_unit(floor_sqnr)})"
    floor_words = "exact" if floor_sqnr >= SQNR_CAP_DB else db_unit(floor_sqnr)
    why = "" if quantized else "; HTP is never better than fp16"
    return f"the {cap_db:g} dB fp16 level (the floor is {floor_words}{why})"


def shortfall(excess: float | None, floor_sqnr: float | None, cap_db: float, *, has_floor: bool = True,
              quantized: bool = False, sqnr: float | None = None) -> str:
    """'7.8 dB below the fp16 floor (53.6 dB)' / '20.4 dB below the 60 dB fp16 level (the floor is exact; …)'.

    The first failing tensor of an fp16 overflow has its excess measured from the fp16 level because the floor
    fails there too (``verdict.mark_first_failing``); given the tensor's own ``sqnr``, that case names the level
    and the failing floor instead of calling a floor below the target its yardstick."""
    if (sqnr is not None and excess and floor_sqnr is not None and floor_sqnr < cap_db
            and sqnr >= floor_sqnr and abs((cap_db - sqnr) - excess) < 0.05):
        return f"{amount(excess)} dB below the {cap_db:g} dB fp16 level (the floor fails here too: {db_unit(floor_sqnr)})"
    return f"{amount(excess)} dB below {yardstick(floor_sqnr, cap_db, has_floor=has_floor, quantized=quantized)}"


def quantized_note(cap_db: float, lsb_ok: float) -> str:
    """What the fp16 floor means for a quantized target, and what the yardstick is instead."""
    return (f"Quantized target: the fp16 floor only measures fp16 rounding, not integer arithmetic (on a QDQ "
            f"reference it is exact wherever rounding keeps a value inside its quantization step), so the dB a "
            f"tensor falls below the floor or the {cap_db:g} dB fp16 level measure quantization (the integer grid, "
            f"and integer kernels rounding differently from the reference), not a fault. The yardstick "
            f"is the quantization step: an op counts as wrong only if, re-run on the target's own inputs, it is "
            f"off by more than {lsb_ok:g} steps.")


def local_inputs(inputs: dict[str, str]) -> str:
    """Where a local re-run got its inputs, in words: 'on the target's own inputs' only when that is true.

    An input taken from the reference (the target had no usable copy) folds the error inherited from upstream
    into the local error, and the text must say so.
    """
    borrowed = sorted(name for name, source in inputs.items() if source != "target")
    if not borrowed:
        return "on the target's own inputs"
    names = ", ".join(repr(n) for n in borrowed[:3]) + (" …" if len(borrowed) > 3 else "")
    return (f"re-run with {names} taken from the reference (the target had no usable copy, so local and "
            f"inherited error cannot be separated),")
