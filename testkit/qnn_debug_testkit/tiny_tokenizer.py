"""A byte-level vocabulary for the tiny model, written in MNN's text tokenizer format (``tokenizer.txt``).

Format (MNN ``Tokenizer::createTokenizer``, tiktoken variant): a line ``430 1`` (magic number, type 1 =
tiktoken), a line ``<special count> <stop count> <prefix count>``, a line with those token ids, a line with
the vocabulary size, then one base64 token per line in id order. The runtime encodes by longest match
over the vocabulary. Ids 0–255 are the single bytes, so every string is encodable; then the chat
specials, then a few multi-byte pieces so that encoding is not purely per byte.
"""

from __future__ import annotations

import base64
from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
STOP_IDS = [256, 258]
PIECES = [" the", " and", " of", " to", "ing", "er", "on", "in", "an", " is", "Hello", " world", "的", "是", "中文",
           "\n\n", "  ", "ed", "re", " a", "at", "or", "es", "en", "th"]


def vocab(size: int, extra_specials: tuple[str, ...] = ()) -> list[bytes]:
    """Token bytes by id (length ``size``; unused ids get unique filler pieces); ``extra_specials`` (a VL model's
    vision tokens) follow the chat specials."""
    tokens = [bytes([i]) for i in range(256)] + [s.encode() for s in (*SPECIALS, *extra_specials)]
    for piece in PIECES:
        if len(tokens) >= size:
            break
        tokens.append(piece.encode("utf-8"))
    k = 0
    while len(tokens) < size:
        tokens.append(f"<|reserved_{k}|>".encode())
        k += 1
    return tokens[:size]


def write_tokenizer(path: Path, size: int, extra_specials: tuple[str, ...] = ()) -> Path:
    toks = vocab(size, extra_specials)
    specials = list(range(256, 256 + len(SPECIALS) + len(extra_specials)))
    lines = ["430 1", f"{len(specials)} {len(STOP_IDS)} 0", " ".join(str(i) for i in specials + STOP_IDS), str(len(toks))]
    lines += [base64.b64encode(t).decode("ascii") for t in toks]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    return path


def encode(text: str, size: int) -> list[int]:
    """Longest-match encoding over the vocabulary (what the runtime's tiktoken path does)."""
    toks = vocab(size)
    by_bytes = {t: i for i, t in enumerate(toks)}
    longest = max(len(t) for t in toks)
    data = text.encode("utf-8")
    ids: list[int] = []
    i = 0
    while i < len(data):
        for n in range(min(longest, len(data) - i), 0, -1):
            tid = by_bytes.get(data[i : i + n])
            if tid is not None:
                ids.append(tid)
                i += n
                break
    return ids


def decode(ids: list[int], size: int) -> str:
    toks = vocab(size)
    return b"".join(toks[i] for i in ids if 0 <= i < len(toks)).decode("utf-8", errors="replace")
