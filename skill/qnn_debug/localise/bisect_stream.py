"""``bisect`` of a model too large for one simulator session: the cuts run as a chain of pieces.

Why it stays a bisection of the whole model: a probe still judges the target's values at a cut as the whole
model (from the graph inputs up to the cut) computes them — the pieces before the cut's piece run once, in
order, each fed what the pieces before it produced on the target, and their boundary values are kept (a few MB:
the hidden state, rotary tables, mask); the cut's own piece is truncated at the cut. The first probe (the last
cut) runs the chain once; every later probe is one truncated piece. One piece's weights are in a session at a
time (the pieces are sized by :mod:`.budget`), and the pieces point into the original data file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BadInputError
from .external import LazyModel, open_lazy
from .pieces import Chain, fits_whole, plan_chain, save_pieces
from .stream_baseline import BOUNDARY_SHAPES, hidden_bytes


def streams(model: Path, budget: int) -> bool:
    """Whether ``model`` must run piece by piece: its weights are external and one session of all of it would not
    fit ``budget``."""
    if model.suffix.lower() != ".onnx":
        return False
    lazy = open_lazy(model)
    return lazy.external and not fits_whole(lazy, budget)


def boundary_shapes(reference: Any, feeds: dict[str, np.ndarray]) -> dict[str, tuple[list[int], int]]:
    """(dims, ONNX element type) of every tensor crossing a unit boundary, as the streamed baseline recorded them."""
    from .pieces import shape_of

    saved = reference.record.extra.get(BOUNDARY_SHAPES)
    if not isinstance(saved, dict):
        raise BadInputError("this baseline was not built piece by piece, so it lacks the shapes of the tensors "
                            "between the model's pieces",
                            hint="leave --baseline out: bisect builds the baseline it needs for a model this large")
    shapes = {str(n): (list(v[0]), int(v[1])) for n, v in saved.items()}
    shapes.update({n: shape_of(v, None) for n, v in feeds.items()})
    return shapes


def chain_job(lazy: LazyModel, reference: Any, feeds: dict[str, np.ndarray], budget: int,
              work: Path) -> tuple[dict[str, Any], Chain, list[str]]:
    """The worker's job for a chained bisection of ``lazy`` (shape-fixed, no weights): its pieces saved in ``work``;
    returns the job, the chain and the lowering warnings."""
    chain = plan_chain(lazy.model, budget, hidden_bytes(feeds))
    pieces = save_pieces(lazy, chain, boundary_shapes(reference, feeds), work, "piece")
    lowered = [w for p in pieces for w in p.pop("lowered")]
    return {"job": "bisect_chain", "pieces": pieces, "external_dir": str(lazy.base)}, chain, lowered
