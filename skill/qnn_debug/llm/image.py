"""An image for ``llm-text`` on a vision-language export: checked here, decoded by MNN in the worker.

Why the split: the reference must see the pixels the phone's ``llm_demo`` sees, and ``llm_demo`` reads an
``<img>path</img>`` with MNN's own decoder (``MNN::CV::imread``, stb_image). The worker therefore decodes the
bytes with the wheel's ``MNN.cv.imdecode`` — but MNN answers an undecodable file with a null image that
crashes on first use, so the file is read here (through :mod:`..fs`, so it stays inside the roots) and fully
decoded with Pillow first; only formats MNN's decoder reads get through. The bytes are then copied into the
run folder, which is what the worker and the phone get.

The export side: MNN's runtime only takes images when ``llm_config.json`` says ``is_visual`` (else the
prompt's ``<img>`` tag is tokenized as plain text), it loads ``visual_model`` (default ``visual.mnn``) beside
the config, and it marks the image with ``vision_start`` / ``image_pad`` … / ``vision_end`` token ids (its
defaults are Qwen-VL 1's ids, wrong for any other model).
"""

from __future__ import annotations

import hashlib
import io
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .. import fs
from ..errors import BadInputError

MAX_IMAGE_BYTES = 64 << 20
MAX_IMAGE_PIXELS = 40_000_000
# Pillow format names of the files MNN::CV::imread / imdecode decode: MNN builds stb_image with JPEG, PNG and BMP only
MNN_DECODABLE = {"PNG": ".png", "JPEG": ".jpg", "BMP": ".bmp"}
PLACEHOLDER = "<img>image_0</img>"
_MEDIA_TAG = re.compile(r"<(img|audio|video)>(.*?)</\1>", re.S)
TOKEN_KEYS = ("vision_start", "image_pad", "vision_end")


class ImageInput(BaseModel):
    """The image a run was given: what it is and where its copy sits in the run folder."""

    source: str
    stored: str = Field(description="the bytes the reference (and the phone) were given, inside the run folder")
    format: str
    width: int
    height: int
    mode: str
    sha256: str


class VisionSettings(BaseModel):
    """What the export's configs say about the vision side (read before MNN is started)."""

    visual_model: str
    image_size: int | None = None
    image_pad: int
    vision_start: int
    vision_end: int
    has_deepstack: bool = False


def _merged(config: dict[str, Any] | None, llm_config: dict[str, Any] | None) -> dict[str, Any]:
    """MNN's LlmConfig reads both files as one: keys of ``llm_config.json`` and ``config.json``."""
    return {**(llm_config or {}), **(config or {})}


def vision_settings(export_dir: str, config: dict[str, Any] | None, llm_config: dict[str, Any] | None) -> VisionSettings:
    """The export's vision settings, or a typed error saying why MNN's runtime cannot take an image."""
    cfg = _merged(config, llm_config)
    if not cfg.get("is_visual"):
        raise BadInputError(f"{export_dir} is not a vision-language export: its llm_config.json has no \"is_visual\": true, "
                            "so MNN's runtime would read the image tag as plain text",
                            hint="drop --image, or point at the folder llmexport.py wrote for the VL model (with visual.mnn)")
    name = str(cfg.get("visual_model", "visual.mnn"))
    visual = Path(export_dir) / name
    if not visual.is_file():
        raise BadInputError(f"{export_dir} has no {name}: MNN's runtime loads the vision encoder from it and stops without it",
                            hint="copy visual.mnn from llmexport.py's output into the folder (or set visual_model in config.json)")
    missing = [k for k in TOKEN_KEYS if not isinstance(cfg.get(k), int)]
    if missing:
        raise BadInputError(f"llm_config.json of {export_dir} lacks {', '.join(missing)}: MNN's runtime would mark the image "
                            "with its built-in Qwen-VL 1 token ids, which are wrong for this model",
                            hint="re-export with llmexport.py, which writes them from the model's config")
    size = cfg.get("image_size")
    return VisionSettings(visual_model=str(visual), image_size=int(size) if isinstance(size, int) else None,
                          image_pad=int(cfg["image_pad"]), vision_start=int(cfg["vision_start"]),
                          vision_end=int(cfg["vision_end"]), has_deepstack=bool(cfg.get("has_deepstack")))


def refuse_media_tags(prompt: str, *, allow_placeholder: bool) -> None:
    """MNN's multimodal runtime opens whatever path an ``<img>``/``<audio>``/``<video>`` tag names (or fetches a URL):
    outside the folders this tool may read. Only our own placeholder for ``--image`` may appear."""
    for m in _MEDIA_TAG.finditer(prompt):
        if allow_placeholder and m.group(0) == PLACEHOLDER:
            continue
        raise BadInputError(f"the prompt holds a media tag {m.group(0)[:80]!r}: MNN's runtime would open that path itself",
                            hint=f"give the image with --image FILE; put {PLACEHOLDER} in the prompt where it belongs "
                            "(default: before the text)")


def place_image(prompt: str) -> str:
    """The prompt with the image placeholder where the user put it, else before the text (Qwen-VL's order)."""
    n = prompt.count(PLACEHOLDER)
    if n > 1:
        raise BadInputError(f"the prompt holds {PLACEHOLDER} {n} times", hint="one image per run: keep one placeholder")
    return prompt if n == 1 else PLACEHOLDER + prompt


class _Decoded(BaseModel):
    fmt: str
    width: int
    height: int
    mode: str


def check_image(path: str) -> tuple[bytes, _Decoded]:
    """Read and fully decode the image; a typed error for anything MNN's decoder could not take."""
    from PIL import Image, UnidentifiedImageError

    data = fs.read_bytes(path, what="--image", max_bytes=MAX_IMAGE_BYTES)
    try:
        with Image.open(io.BytesIO(data)) as img:
            fmt, (w, h), mode = str(img.format), img.size, img.mode
            if w * h > MAX_IMAGE_PIXELS:
                raise BadInputError(f"--image {path} is {w}x{h} pixels, over the {MAX_IMAGE_PIXELS} limit",
                                    hint="scale it down; MNN resizes it to the export's image_size anyway")
            if fmt not in MNN_DECODABLE:
                raise BadInputError(f"--image {path} is {fmt}, which MNN's image decoder (the one llm_demo's <img> tag "
                                    "uses) does not read", hint="convert it to PNG")
            if mode == "CMYK" or (mode.startswith("I;16") and fmt != "PNG"):
                raise BadInputError(f"--image {path} is a {mode} {fmt}, which MNN's image decoder does not read",
                                    hint="convert it to an 8-bit RGB PNG")
            img.load()  # the whole file: a truncated or corrupt one fails here, not inside MNN
    except BadInputError:
        raise
    except (UnidentifiedImageError, Image.DecompressionBombError):
        raise BadInputError(f"--image {path} is not an image file (no known image header)",
                            hint="pass a PNG or JPEG file") from None
    except (OSError, ValueError, SyntaxError) as e:
        raise BadInputError(f"--image {path} cannot be decoded ({e})", hint="the file is damaged or truncated; export it again") from None
    return data, _Decoded(fmt=fmt, width=w, height=h, mode=mode)


def store_image(path: str, data: bytes, info: _Decoded, out_dir: Path) -> ImageInput:
    """Copy the checked bytes into the run folder: what the worker and the phone are given."""
    copy = fs.atomic_write_bytes(out_dir / ("image" + MNN_DECODABLE[info.fmt]), data, what="image copy")
    return ImageInput(source=str(path), stored=str(copy), format=info.fmt, width=info.width, height=info.height,
                      mode=info.mode, sha256=hashlib.sha256(data).hexdigest())
