"""Inputs of a Qwen3-VL export's two graphs from the graph alone, built as MNN's runtime builds them (not noise).

:mod:`.vl_inputs` makes the builder's inputs from its sizes, tokenizer and the encoder's outputs; this module
makes them for any user's ``visual.onnx`` / ``llm.onnx`` from the declared input shapes only (what block
localisation needs when no ``--inputs`` are given).

Why not random data: ``idx_tensor`` indexes the bilinear position-embedding table (random ids run off its end),
``position_ids`` carry the 2-D (h, w) or 3-D (t, h, w) rotary positions whose rows a port can swap or whose
sections it can lay out wrongly (with random ids every row looks alike), and a one-image ``attention_mask`` is all
zeros, so a mask the NPU never received would go unseen. So:

- vision encoder (``patches`` [seq, 6·p²], ``position_ids`` [2, seq], ``attention_mask`` [1, seq, seq],
  ``idx_tensor``/``weight_tensor`` [4, seq]): the sequence is split into **two images** when it can be (so the
  mask is block-diagonal and matters); positions, mask, indices and weights as MNN's ``Qwen3Vision``
  (``vision_position_ids``, ``vision_attention_mask``, ``get_idx_weight``) computes them; patches from an image
  file (resized to each image's grid, normalised with mean = std = 0.5, the frame doubled in time, in merge-window
  order) or smooth seeded data;
- decoder (``position_ids`` [3, T], ``deepstack_embeds`` [n, T, hidden]): text positions, then one image of
  ``grid`` merged tokens whose rows differ (t fixed, h and w over the grid), then text again, as the runtime's
  ``get_position_ids``; deepstack features at the image tokens only, zero elsewhere; a causal float mask.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx

from ..errors import BadInputError

MERGE = 2  # spatial merge size of Qwen2/3-VL (2x2 patches -> one token)
# Outside the allowed blocks the export's masks hold float32's lowest value, which the HTP saturates anyway (its fp16
# has no inf). -2^15 masks the same (exp underflows to 0) and leaves the masked scores inside fp16's range, so their
# fp16 floor stays finite: with float32's lowest, a mask the NPU never received would hide behind an infinite floor
# error, and every masked score would be reported as leaving the fp16 range.
MASK_MIN = -32768.0


def _grid_of(tokens: int) -> tuple[int, int]:
    """An (h, w) patch grid with h·w = tokens, both multiples of the merge size, as square as possible."""
    merged = tokens // (MERGE * MERGE)
    if merged * MERGE * MERGE != tokens or merged < 1:
        raise BadInputError(f"{tokens} patches cannot form a grid of {MERGE}x{MERGE} merge windows",
                            hint="give the vision encoder's inputs with --inputs (npz or a generate_llm_qnn.py test dir)")
    a = math.isqrt(merged)
    while merged % a:
        a -= 1
    return a * MERGE, merged // a * MERGE


def image_grids(seq: int) -> list[tuple[int, int]]:
    """Two images when ``seq`` splits into two grids (a block-diagonal mask), else one."""
    half = seq // 2
    if seq % 2 == 0 and half % (MERGE * MERGE) == 0:
        return [_grid_of(half), _grid_of(half)]
    return [_grid_of(seq)]


def _merge_order(a: np.ndarray, h: int, w: int) -> np.ndarray:
    """Row-major (h, w) values reordered into merge windows, as the export's permute(0, 2, 1, 3) does."""
    lead = a.shape[:-1]
    return a.reshape(*lead, h // MERGE, MERGE, w // MERGE, MERGE).swapaxes(-3, -2).reshape(*lead, h * w)


def vision_position_ids(grids: list[tuple[int, int]]) -> np.ndarray:
    rows = []
    for h, w in grids:
        hpos = np.repeat(np.arange(h)[:, None], w, axis=1).reshape(-1)
        wpos = np.repeat(np.arange(w)[None, :], h, axis=0).reshape(-1)
        rows.append(np.stack([_merge_order(hpos, h, w), _merge_order(wpos, h, w)]))
    return np.concatenate(rows, axis=1).astype(np.int32)


def vision_attention_mask(grids: list[tuple[int, int]]) -> np.ndarray:
    seq = sum(h * w for h, w in grids)
    mask = np.full((1, seq, seq), MASK_MIN, np.float32)
    start = 0
    for h, w in grids:
        mask[:, start:start + h * w, start:start + h * w] = 0.0
        start += h * w
    return mask


def idx_weight(grids: list[tuple[int, int]], side: int) -> tuple[np.ndarray, np.ndarray]:
    """Bilinear interpolation of a ``side`` x ``side`` position-embedding grid: 4 corner indices and weights per patch."""
    idx_all, wt_all = [], []
    for h, w in grids:
        hs, ws = np.linspace(0, side - 1, h), np.linspace(0, side - 1, w)
        hf, wf = hs.astype(np.int64), ws.astype(np.int64)
        hc, wc = np.minimum(hf + 1, side - 1), np.minimum(wf + 1, side - 1)
        dh, dw = hs - hf, ws - wf
        idx = [(hf[:, None] * side + wf[None]), (hf[:, None] * side + wc[None]),
               (hc[:, None] * side + wf[None]), (hc[:, None] * side + wc[None])]
        wt = [(1 - dh)[:, None] * (1 - dw)[None], (1 - dh)[:, None] * dw[None], dh[:, None] * (1 - dw)[None],
              dh[:, None] * dw[None]]
        idx_all.append(_merge_order(np.stack([i.reshape(-1) for i in idx]), h, w))
        wt_all.append(_merge_order(np.stack([x.reshape(-1) for x in wt]), h, w))
    return np.concatenate(idx_all, axis=1).astype(np.int32), np.concatenate(wt_all, axis=1).astype(np.float32)


def patches_from_image(image: Path, grids: list[tuple[int, int]], patch_dim: int) -> np.ndarray:
    """The image resized to each grid, normalised like Qwen3-VL's processor, cut into patches of ``patch_dim``
    (3 channels x 2 frames x p x p) in merge-window order."""
    from PIL import Image, UnidentifiedImageError

    from .. import fs

    p = round(math.sqrt(patch_dim / 6))
    if 6 * p * p != patch_dim:
        raise BadInputError(f"patches of {patch_dim} values are not 3 channels x 2 frames x p x p",
                            hint="give the vision encoder's inputs with --inputs instead of --image")
    with fs.open_read(image, what="--image") as f:
        try:
            img = Image.open(f)
            img.load()
        except (UnidentifiedImageError, OSError) as e:
            raise BadInputError(f"--image {image} is not an image Pillow can read ({e})",
                                hint="pass a PNG or JPEG file") from None
        rgb = img.convert("RGB")
    out = []
    for h, w in grids:
        a = np.asarray(rgb.resize((w * p, h * p), Image.Resampling.BICUBIC), np.float32) / 255.0
        a = (a - 0.5) / 0.5  # [H, W, 3]
        x = a.reshape(h, p, w, p, 3).transpose(0, 2, 4, 1, 3)  # [h, w, 3, p, p]
        x = np.repeat(x[:, :, :, None], 2, axis=3)  # two identical frames: [h, w, 3, 2, p, p]
        flat = x.reshape(h * w, patch_dim)
        out.append(_merge_order(flat.T, h, w).T)
    return np.concatenate(out, axis=0).astype(np.float32)


def vision_inputs(seq: int, patch_dim: int, side: int, image: Path | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """The five inputs of a Qwen3-VL ``visual`` graph for ``seq`` patches."""
    grids = image_grids(seq)
    idx, wt = idx_weight(grids, side)
    if image is not None:
        patches = patches_from_image(image, grids, patch_dim)
    else:
        rng = np.random.default_rng(seed)
        patches = np.tanh(np.cumsum(rng.standard_normal((seq, patch_dim)), axis=1) / 8).astype(np.float32)
    return {"patches": patches, "position_ids": vision_position_ids(grids),
            "attention_mask": vision_attention_mask(grids), "idx_tensor": idx, "weight_tensor": wt}


def decoder_position_ids(tokens: int, grid: tuple[int, int] | None = None, start: int = 2) -> np.ndarray:
    """[3, T]: text positions, one image of ``grid`` merged tokens from ``start`` (t fixed, h and w over the grid),
    then text continuing after the image's largest position (the runtime's ``get_position_ids``)."""
    gh, gw = grid or _default_grid(tokens, start)
    if start + gh * gw > tokens:
        raise BadInputError(f"an image of {gh}x{gw} tokens from position {start} does not fit {tokens} tokens",
                            hint="use a smaller image grid or a longer prefill")
    ids = np.zeros((3, tokens), np.int64)
    ids[:, :start] = np.arange(start)
    base = start
    hh, ww = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    n = gh * gw
    ids[0, start:start + n] = base
    ids[1, start:start + n] = base + hh.reshape(-1)
    ids[2, start:start + n] = base + ww.reshape(-1)
    nxt = base + max(gh, gw)
    rest = tokens - start - n
    ids[:, start + n:] = nxt + np.arange(rest)
    return ids.astype(np.int32)


def _default_grid(tokens: int, start: int) -> tuple[int, int]:
    """A 2 x w image (w up to 4) that leaves at least one text token after it."""
    gw = max(1, min(4, (tokens - start - 1) // 2))
    return (2, gw) if start + 2 * gw <= tokens else (1, max(0, tokens - start))


def image_token_span(tokens: int, start: int = 2) -> slice:
    gh, gw = _default_grid(tokens, start)
    return slice(start, start + gh * gw)


def decoder_inputs(tokens: int, hidden: int, deepstack: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``input_ids`` (embeddings [T, 1, hidden]), causal ``attention_mask``, ``position_ids`` [3, T] and
    ``deepstack_embeds`` [deepstack, T, hidden] (zero but at the image tokens)."""
    rng = np.random.default_rng(seed)
    emb = (rng.standard_normal((tokens, 1, hidden)) * 0.5).astype(np.float32)
    mask = np.triu(np.full((tokens, tokens), MASK_MIN, np.float32), k=1)[None, None]
    out = {"input_ids": emb, "attention_mask": mask, "position_ids": decoder_position_ids(tokens)}
    if deepstack:
        ds = np.zeros((deepstack, tokens, hidden), np.float32)
        span = image_token_span(tokens)
        ds[:, span] = rng.standard_normal((deepstack, span.stop - span.start, hidden)) * 0.5
        out["deepstack_embeds"] = ds
    return out


def _dims(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> dict[str, list[int | None]]:
    out: dict[str, list[int | None]] = {}
    for i in model.graph.input:
        declared: list[int | None] = [d.dim_value if d.HasField("dim_value") else None
                                      for d in i.type.tensor_type.shape.dim]
        out[i.name] = list(shapes[i.name]) if i.name in shapes else declared
    return out


def _need(dims: dict[str, list[int | None]], name: str, axis: int) -> int:
    value = dims[name][axis] if len(dims[name]) > axis else None
    if not value:
        raise BadInputError(f"input {name!r} has no fixed size on axis {axis}",
                            hint=f"give it with --shape {name}=... or pass --inputs (npz or a generate_llm_qnn.py test dir)")
    return value


def _grid_side(model: onnx.ModelProto) -> int:
    """Side of the bilinear position-embedding grid: the rows of the table the ``idx_tensor`` Gather reads."""

    inits = {t.name: t for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == "idx_tensor" and n.input[0] in inits:
            rows = int(inits[n.input[0]].dims[0])
            side = math.isqrt(rows)
            if side * side == rows:
                return side
    raise BadInputError("the vision encoder has no Gather of a square position-embedding table on idx_tensor",
                        hint="pass its inputs with --inputs (npz or a generate_llm_qnn.py test dir)")


def vl_feeds(model: onnx.ModelProto, shapes: dict[str, list[int]] | None = None, image: Path | None = None,
             seed: int = 0) -> dict[str, np.ndarray] | None:
    """The inputs of a Qwen3-VL vision encoder or M-RoPE decoder as the runtime builds them; None for other graphs."""
    dims = _dims(model, shapes or {})
    if {"patches", "position_ids", "idx_tensor", "weight_tensor"} <= set(dims):
        seq = _need(dims, "patches", 0)
        return vision_inputs(seq, _need(dims, "patches", 1), _grid_side(model), image=image, seed=seed)
    if image is not None:
        raise BadInputError("--image applies to a VL export's vision encoder (visual.onnx: patches, idx_tensor, ...)",
                            hint="point the command at visual.onnx, or drop --image for the decoder")
    pos = dims.get("position_ids") or []
    if "input_ids" in dims and len(pos) == 2 and pos[0] == 3:
        tokens = _need(dims, "input_ids", 0)
        deepstack = _need(dims, "deepstack_embeds", 0) if "deepstack_embeds" in dims else 0
        feeds = decoder_inputs(tokens, _need(dims, "input_ids", 2), deepstack, seed=seed)
        feeds["logits_index"] = np.asarray([-1], np.int32)  # the last token's logits, as the runtime asks in prefill
        return {k: v for k, v in feeds.items() if k in dims}
    return None
