"""The inputs MNN feeds a Qwen3-VL export: ``visual.mnn``'s five and ``llm.mnn``'s with an image in the prompt.

Vision (``Qwen2Vision.vision_reshape`` / ``vision_position_ids`` / ``vision_attention_mask`` and
``Qwen3Vision.get_idx_weight`` in MNN's export; the runtime's ``Omni::qwen2VisionProcess`` computes the same):
- ``patches``: frames normalised with mean/std 0.5, each temporal group of ``temporal_patch_size`` frames cut
  into 16x16 patches, ordered by 2x2 merge block (so the merger's 4 consecutive rows are spatial neighbours);
- ``position_ids`` ``[2, seq]``: the patch's row and column, in the same merge-block order;
- ``attention_mask`` ``[1, seq, seq]``: 0 within one temporal group, lowest float across groups (all 0 for a
  single image — a mask that was never written is then invisible; two groups make it block-diagonal);
- ``idx_tensor``/``weight_tensor`` ``[4, seq]``: the four grid corners and bilinear weights of each patch's place
  in the ``num_grid_per_side``² learned position table.

Decoder (``Qwen2Vision.get_position_ids``, ``Qwen3Vision.embed``): text tokens count 0, 1, 2, … on all three
rows; the image's merged tokens take (t, h, w) + the running offset, which then grows by max(t, h, w);
``deepstack_embeds`` ``[k, seq, hidden]`` holds the deepstack features at the image tokens and zeros elsewhere.
"""

from __future__ import annotations

import numpy as np

from .sized import LazyWeights
from .tiny_tokenizer import SPECIALS, encode
from .vl_sizes import VISION_TOKENS, VisionSizes

MEAN = STD = 0.5  # Qwen3Vision's norm_mean / norm_std (llm_config image_mean 127.5, image_norm 1/127.5)


def vision_token_ids() -> dict[str, int]:
    """Ids of the vision tokens in the builder's tokenizer (after the chat specials)."""
    base = 256 + len(SPECIALS)
    return {"vision_start": base, "vision_end": base + 1, "image_pad": base + 2}


def synthetic_frames(frames: int, height: int, width: int, seed: int = 0) -> np.ndarray:
    """``[frames, 3, H, W]`` uint8-range images: smooth gradients and a disc per frame (deterministic)."""
    rng = np.random.default_rng(seed + 7)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    out = np.empty((frames, 3, height, width), np.float32)
    for f in range(frames):
        cy, cx = rng.uniform(0.3, 0.7) * height, rng.uniform(0.3, 0.7) * width
        disc = ((yy - cy) ** 2 + (xx - cx) ** 2 < (0.25 * min(height, width)) ** 2).astype(np.float32)
        out[f, 0] = 255 * (yy / height)
        out[f, 1] = 255 * (xx / width)
        out[f, 2] = 255 * disc
    return out


def vision_inputs(v: VisionSizes, pixels: np.ndarray) -> dict[str, np.ndarray]:
    """The five ``visual.mnn`` inputs for ``pixels`` ``[frames, 3, H, W]`` (0..255; frames a multiple of the
    temporal patch, H and W multiples of patch*merge)."""
    T, P, m = v.temporal_patch_size, v.patch_size, v.merge_size
    frames, channels, height, width = pixels.shape
    if frames % T or height % (P * m) or width % (P * m):
        raise ValueError(f"pixels {pixels.shape}: frames must be a multiple of {T}, sides of {P * m}")
    gt, gh, gw = frames // T, height // P, width // P
    x = ((pixels / 255.0 - MEAN) / STD).astype(np.float32)
    x = x.reshape(gt, T, channels, gh // m, m, P, gw // m, m, P).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    patches = np.ascontiguousarray(x.reshape(gt * gh * gw, channels * T * P * P))

    def merge_order(a: np.ndarray) -> np.ndarray:  # [gh, gw] → merge-block order, repeated per temporal group
        return np.tile(a.reshape(gh // m, m, gw // m, m).transpose(0, 2, 1, 3).reshape(-1), gt)

    hpos = merge_order(np.repeat(np.arange(gh)[:, None], gw, axis=1))
    wpos = merge_order(np.repeat(np.arange(gw)[None, :], gh, axis=0))
    seq = gt * gh * gw
    mask = np.full((1, seq, seq), np.finfo(np.float32).min, np.float32)
    for t in range(gt):
        mask[:, t * gh * gw:(t + 1) * gh * gw, t * gh * gw:(t + 1) * gh * gw] = 0
    g = v.num_grid_per_side
    hi = np.linspace(0, g - 1, gh, dtype=np.float32)
    wi = np.linspace(0, g - 1, gw, dtype=np.float32)
    hf, wf = hi.astype(np.int64), wi.astype(np.int64)
    hc, wc = np.minimum(hf + 1, g - 1), np.minimum(wf + 1, g - 1)
    dh, dw = (hi - hf)[:, None], (wi - wf)[None, :]
    corners = [(hf, wf), (hf, wc), (hc, wf), (hc, wc)]
    weights = [(1 - dh) * (1 - dw), (1 - dh) * dw, dh * (1 - dw), dh * dw]
    idx = np.stack([merge_order(a[:, None] * g + b[None, :]) for a, b in corners]).astype(np.int32)
    wts = np.stack([merge_order(np.broadcast_to(wt, (gh, gw))) for wt in weights]).astype(np.float32)
    return {"patches": patches, "position_ids": np.stack([hpos, wpos]).astype(np.int32), "attention_mask": mask,
            "idx_tensor": idx, "weight_tensor": wts}


def prompt_ids(image_tokens: int, vocab: int, question: str = "Describe the picture.") -> list[int]:
    """A ChatML user turn holding one image, then the assistant's opening, in the builder's tokenizer."""
    ids = vision_token_ids()
    start, end = 257, 258  # <|im_start|>, <|im_end|>
    return ([start, *encode("user\n", vocab), ids["vision_start"], *([ids["image_pad"]] * image_tokens),
             ids["vision_end"], *encode(question, vocab), end, *encode("\n", vocab), start, *encode("assistant\n", vocab)])


def mrope_positions(tokens: list[int], grid_thw: tuple[int, int, int], merge: int) -> np.ndarray:
    """``[3, seq]`` int32 M-RoPE positions for a prompt with one image of ``grid_thw`` patches."""
    ids = vision_token_ids()
    t, h, w = grid_thw[0], grid_thw[1] // merge, grid_thw[2] // merge
    rows: list[np.ndarray] = []
    cur = 0
    text = 0
    for tok in tokens:
        if tok != ids["image_pad"]:
            text += 1
        if tok == ids["vision_start"]:
            rows.append(np.repeat(np.arange(cur, cur + text)[None, :], 3, axis=0))
            cur += text
            text = 0
        elif tok == ids["vision_end"]:
            ti = np.repeat(np.arange(t), h * w)
            hi = np.tile(np.repeat(np.arange(h), w), t)
            wi = np.tile(np.arange(w), t * h)
            rows.append(np.stack([ti, hi, wi]) + cur)
            cur += max(t, h, w)
    if text:
        rows.append(np.repeat(np.arange(cur, cur + text)[None, :], 3, axis=0))
    return np.concatenate(rows, axis=1).astype(np.int32)


def decoder_inputs(tokens: list[int], text_weights: LazyWeights, image_embeds: np.ndarray, deepstack: np.ndarray,
                   grid_thw: tuple[int, int, int], merge: int) -> dict[str, np.ndarray]:
    """``llm.onnx`` inputs for a prefill of ``tokens`` (image rows from the vision encoder's outputs)."""
    ids = np.asarray(tokens, np.int64)
    pad = ids == vision_token_ids()["image_pad"]
    if int(pad.sum()) != image_embeds.shape[0]:
        raise ValueError(f"{int(pad.sum())} image pads for {image_embeds.shape[0]} image embeddings")
    emb = text_weights.embed_rows(ids)
    emb[pad] = image_embeds[:, 0, :]
    ds = np.zeros((deepstack.shape[0], len(ids), emb.shape[1]), np.float32)
    ds[:, pad, :] = deepstack
    n = len(ids)
    mask = np.triu(np.full((n, n), np.finfo(np.float32).min, np.float32), k=1)[None, None]
    return {"input_ids": emb[:, None, :].astype(np.float32), "attention_mask": mask,
            "position_ids": mrope_positions(tokens, grid_thw, merge), "logits_index": np.asarray([-1], np.int32),
            "deepstack_embeds": ds}


__all__ = ["VISION_TOKENS", "decoder_inputs", "mrope_positions", "prompt_ids", "synthetic_frames", "vision_inputs",
           "vision_token_ids"]
