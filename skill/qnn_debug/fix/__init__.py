"""``fix``: for a verdict it knows, write the fixed artefact next to the user's and prove it.

Kinds: ``precision`` from the fp16 range (an exact power-of-two rescale, :mod:`.fp16_range`), ``real_bug``
at a fused MNN op that lost its Relu (``Max(x, 0)`` instead, :mod:`.fused_activation`) and
``input_not_copied`` (``shapeMutable`` false in the test dir, :mod:`.shape_mutable`). A solved case goes into
the cases file only when every proof check passed and nothing is left to prove on a phone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BadInputError
from ..progress import NULL_PROGRESS, Progress
from .models import RANGE_PATTERNS, FixResult


def run_fix(result: str, out: Path, *, model: str | None = None, input_range: dict[str, list[float]] | None = None,
            test_dir: str | None = None, soc_model: int = 69, timeout: float = 1800.0, force: bool = False,
            cases: str | None = None, host_options: dict[str, str] | None = None,
            progress: Progress = NULL_PROGRESS, op: str | None = None) -> FixResult:
    """Fix the verdict of the comparison at ``result`` (see :func:`.source.load_source`)."""
    from .llm_export import is_export
    from .source import load_source, numbers  # here: importing the package (for its models) stays light

    if is_export(result):
        from .llm_export import fix_llm_export

        return fix_llm_export(result, out=out, soc_model=soc_model, timeout=timeout, progress=progress)
    source = load_source(result)
    v = source.result.verdict
    verdict = f"{v.kind} ({v.pattern})"
    if op is not None:  # a chosen scale-invariant region kind, rescaled everywhere (:mod:`.region_rescale`)
        from .region_rescale import fix_region_rescale

        ev = v.evidence.get("fp16_range")
        k = ev.get("rescale_exponent") if isinstance(ev, dict) else None
        fixed = fix_region_rescale(source.result.model, source.result.reference, op, verdict=verdict, model=model,
                                   exponent=int(k) if isinstance(k, int) else None, force=force)
    elif v.kind == "precision" and (v.pattern in RANGE_PATTERNS or "fp16_range" in v.evidence):
        from .fp16_range import fix_fp16_range

        fixed = fix_fp16_range(source, model=model, input_range=input_range, out=out, soc_model=soc_model,
                               timeout=timeout, force=force, progress=progress)
    elif v.kind == "real_bug" and _fused_relu(source) is not None:
        from .fused_activation import fix_fused_activation

        fixed = fix_fused_activation(source, _fused_relu(source) or "", model=model, out=out, timeout=timeout,
                                     force=force, host_options=host_options, progress=progress)
    elif v.kind == "quantization" and v.pattern == "encoding_range":
        from .encoding import fix_encoding

        fixed = fix_encoding(source, model=model, out=out, soc_model=soc_model, timeout=timeout, force=force,
                             progress=progress)
    elif v.kind == "input_not_copied":
        from .shape_mutable import fix_shape_mutable

        before = numbers(source.result, [], report=str(source.path))
        fixed = fix_shape_mutable(test_dir, verdict, before, source.result.mnn_model)
    else:
        raise BadInputError(f"no automatic fix for the verdict {verdict}",
                            hint="fix kinds: precision from the fp16 range (rescale), real_bug at a fused MNN "
                            "op that lost its Relu, input_not_copied (shapeMutable); follow the comparison's next_steps for the others")
    if fixed.proven and not fixed.not_proven and cases:
        from .cases import record_case

        fixed.case_file = record_case(cases, source.result, fixed)
    return fixed


def _fused_relu(source: Any) -> str | None:
    from .fused_activation import fused_activation

    return fused_activation(source.result)
