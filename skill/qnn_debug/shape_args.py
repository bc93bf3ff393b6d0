"""``--shape NAME=1x3x224x224`` as typed on a command line, read into ``{name: [dims]}`` (no numpy here)."""

from __future__ import annotations

import re

from .errors import BadInputError

_SHAPE_ARG = re.compile(r"^\s*([^=\s][^=]*?)\s*=\s*(\d+(?:\s*[xX,]\s*\d+)*)\s*$")


def parse_shape_args(values: list[str] | None) -> dict[str, list[int]]:
    """Parse ``NAME=1x3x224x224`` (also ``1,3,224,224``) pairs into ``{name: [dims]}``."""
    shapes: dict[str, list[int]] = {}
    for raw in values or []:
        m = _SHAPE_ARG.match(raw)
        if not m:
            raise BadInputError(
                f"cannot read --shape {raw!r}",
                hint="write it as NAME=1x3x224x224 (input name, '=', dimensions separated by 'x')",
            )
        name, dims = m.group(1), [int(d) for d in re.split(r"\s*[xX,]\s*", m.group(2))]
        if any(d <= 0 for d in dims):
            raise BadInputError(f"--shape {raw!r} has a zero dimension", hint="every dimension must be at least 1")
        if name in shapes:
            raise BadInputError(f"--shape given twice for input {name!r}", hint="pass one --shape per input")
        shapes[name] = dims
    return shapes
