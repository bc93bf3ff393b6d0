"""Worker: greedy generation and per-step logits with the MNN wheel's LLM runtime (``MNN.llm``) on CPU.

In a worker because ``import MNN`` prints to fd 1 and a broken model can crash the runtime. The prompt goes
through the folder's own chat template and tokenizer (``apply_chat_template`` + ``tokenizer_encode``), as
``llm_demo`` does; decoding is greedy over ``forward`` calls, so every step's logits are kept. With
``follow`` (token ids another run produced) the same model is also teacher-forced along that path instead: at
each step the reference's logits given the *other* run's prefix.

With ``image`` (a vision-language export) the image's bytes are decoded by ``MNN.cv.imdecode`` — the decoder
``llm_demo``'s ``<img>path</img>`` uses — and handed to ``tokenizer_encode`` as the binding's multimodal prompt
(``{"text", "images": [{"data", "width": 0, "height": 0}]}``; a zero size keeps the export's ``image_size``, as
a path tag does). That call runs ``visual.mnn`` and returns the ids with the image's pad tokens; the first
``forward`` puts the image embeddings (and deepstack features) at those tokens. MNN's runtime drops an image it
cannot process and goes on with the text, so a prompt without pad tokens is refused here. Encoding any other
text afterwards would reset the runtime's M-RoPE positions, so ``follow_text`` is encoded first.

Request: ``{"config", "prompt", "max_new_tokens", "out", "stop_ids", "follow": [ids] | null,
"follow_text": str | null, "image": {"file", "pad_id"} | null}``. Greedy result: ``{"prompt_ids", "tokens",
"pieces" (None = not UTF-8 alone), "undecodable", "text", "logits": "greedy_logits.npy"}``; with
``follow``/``follow_text`` (a fresh context, no greedy run): ``{"prompt_ids", "follow_tokens", "follow_logits",
"follow_pieces", "follow_top1_pieces"}``; both add ``"mnn_version"`` and, with an image, ``"image_tokens"``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import TargetError
from ..progress import Progress


def _logits(llm: Any, ids: list[int]) -> Any:
    import numpy as np

    var = llm.forward(ids)
    if var is None:
        raise TargetError("MNN's LLM runtime returned no logits", hint="see the worker log; the model may not run on MNN CPU")
    return np.array(var.read(), dtype=np.float32, copy=True).reshape(-1)  # the runtime reuses the buffer


def _piece(llm: Any, token: int) -> str | None:
    """The token's text; None when it is not valid UTF-8 on its own (part of a multi-token character)."""
    try:
        return str(llm.tokenizer_decode(token))
    except UnicodeDecodeError:
        return None


def _encode_prompt(llm: Any, prompt: str, image: dict[str, Any] | None) -> tuple[list[int], int | None]:
    """The chat-templated prompt's ids (running ``visual.mnn`` when there is an image) and its image token count."""
    templated = llm.apply_chat_template(prompt)
    if image is None:
        return list(llm.tokenizer_encode(templated)), None
    import MNN.cv as cv
    import numpy as np

    from .. import fs

    data = fs.read_bytes(image["file"], what="image copy")
    pixels = cv.imdecode(np.frombuffer(data, np.uint8), cv.IMREAD_COLOR)  # BGR HWC uint8, as MNN::CV::imread
    ids = list(llm.tokenizer_encode({"text": templated, "images": [{"data": pixels, "width": 0, "height": 0}]}))
    count = sum(1 for t in ids if t == int(image["pad_id"]))
    if count == 0:
        raise TargetError("MNN's runtime put no image tokens into the prompt: it dropped the image and would answer "
                          "from the text alone", hint="check image_size in llm_config.json "
                          "(too small for visual.mnn's patch size gives an empty image), that visual.mnn matches llm.mnn, "
                          "and that this MNN was built with vision support (LLM_SUPPORT_VISION)")
    return ids, count


def main(request: dict[str, Any], progress: Progress) -> dict[str, Any]:
    import MNN
    import MNN.llm as mnn_llm
    import numpy as np

    out = Path(request["out"])
    out.mkdir(parents=True, exist_ok=True)
    llm = mnn_llm.create(request["config"])
    llm.set_config(json.dumps({"sampler_type": "greedy", "thread_num": 1, "async": False}))
    with progress.stage("mnn-llm: load", total=None):
        llm.load()
    follow = request.get("follow")
    if follow is None and request.get("follow_text") is not None:
        follow = list(llm.tokenizer_encode(request["follow_text"]))  # before the prompt: it resets M-RoPE positions
    prompt_ids, image_tokens = _encode_prompt(llm, request["prompt"], request.get("image"))
    if not prompt_ids:
        raise TargetError("the tokenizer produced no tokens for the prompt", hint="check tokenizer_file in config.json")
    extra: dict[str, Any] = {"mnn_version": str(MNN.version()), "image_tokens": image_tokens}
    if follow is not None:
        return {**_follow(llm, prompt_ids, [int(t) for t in follow], out), **extra}
    stop = set(int(i) for i in request.get("stop_ids") or [])
    steps = int(request["max_new_tokens"])
    tokens: list[int] = []
    rows = []
    with progress.stage("mnn-llm: greedy", total=steps) as advance:
        x = prompt_ids
        for _ in range(steps):
            row = _logits(llm, x)
            rows.append(row)
            tok = int(row.argmax())
            tokens.append(tok)
            advance()
            if tok in stop:
                break
            x = [tok]
    np.save(out / "greedy_logits.npy", np.stack(rows))
    pieces = [_piece(llm, t) for t in tokens]
    result: dict[str, Any] = {"prompt_ids": prompt_ids, "tokens": tokens, "pieces": pieces,
                              "undecodable": sum(p is None for p in pieces), "logits": "greedy_logits.npy", **extra}
    result["text"] = "".join(p or "" for p, t in zip(pieces, tokens, strict=True) if t not in stop)
    return result


def _follow(llm: Any, prompt_ids: list[int], follow: list[int], out: Path) -> dict[str, Any]:
    """Teacher forcing on a fresh context: the logits before each token of ``follow``."""
    import numpy as np

    if not follow:
        raise TargetError("the target produced no tokens to compare", hint="check the target's text or run")
    rows = [_logits(llm, prompt_ids)]
    for tok in follow[:-1]:
        rows.append(_logits(llm, [tok]))
    np.save(out / "follow_logits.npy", np.stack(rows))
    return {"prompt_ids": prompt_ids, "follow_tokens": follow, "follow_logits": "follow_logits.npy",
            "follow_pieces": [_piece(llm, t) for t in follow],
            "follow_top1_pieces": [_piece(llm, int(r.argmax())) for r in rows]}
