"""Model inputs: load them from an ``.npz`` (or an MNN test dir), or make seeded, realistic data of the declared shapes.

Every run of a comparison must see the *same* bytes, so whatever we use is saved next to the baseline
(``inputs.npz``) and hashed into each run's ``run.json``. Bad input files are the most common user
mistake, so each problem (missing file, corrupt archive, missing/extra names, wrong dtype or shape,
dynamic dimensions without ``--shape``) gets its own message and a hint.

QNN needs static shapes, so the resolved shapes are also written back into the ONNX model
(:func:`fix_input_shapes`) before any target sees it.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import fs
from .errors import BadInputError
from .runstore import InputInfo, TensorSpec, sha256_arrays
from .shape_args import parse_shape_args  # noqa: F401  (re-exported)

DUMP_MIN_EXTRA = 3  # extra tensors that make an inputs .npz a tensor dump (fewer: an unknown key is an error)
MAX_INPUT_BYTES = 256 << 20  # one input array of a model with dynamic shapes; static ones get their exact size

if TYPE_CHECKING:
    import numpy as np
    import onnx

@dataclass
class PreparedInputs:
    """The arrays a run is fed, the concrete shape of every input and where they came from."""

    arrays: dict[str, np.ndarray]
    shapes: dict[str, list[int]]
    info: InputInfo
    warnings: list[str] = field(default_factory=list)


def resolve_shapes(specs: list[TensorSpec], shapes: dict[str, list[int]] | None = None) -> dict[str, list[int]]:
    """Concrete shape of every input: declared static dims, overridden or completed by ``shapes``.

    Raises for names the model does not have, rank or static-dim conflicts, and dynamic dims that
    nobody filled in.
    """
    shapes = dict(shapes or {})
    known = {s.name for s in specs}
    unknown = sorted(set(shapes) - known)
    if unknown:
        raise BadInputError(
            f"--shape names input(s) the model does not have: {', '.join(unknown)}",
            hint=f"the model's inputs are: {', '.join(sorted(known))}",
        )
    out: dict[str, list[int]] = {}
    for spec in specs:
        given = shapes.get(spec.name)
        if given is None:
            dynamic = [i for i, d in enumerate(spec.shape) if not isinstance(d, int)]
            if dynamic:
                example = "x".join(str(d) if isinstance(d, int) else "N" for d in spec.shape)
                raise BadInputError(
                    f"input {spec.name!r} has dynamic dimension(s) {_fmt_dims(spec.shape)}",
                    hint=f"fix them with --shape {spec.name}={example} (QNN needs static shapes), or pass --inputs FILE.npz",
                )
            out[spec.name] = [int(d) for d in spec.shape if isinstance(d, int)]
            continue
        _check_compatible(spec, given, "--shape")
        out[spec.name] = list(given)
    return out


def _fmt_dims(dims: list[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _check_compatible(spec: TensorSpec, shape: list[int], where: str) -> None:
    if spec.shape and len(shape) != len(spec.shape):
        raise BadInputError(
            f"{where} gives input {spec.name!r} rank {len(shape)} {list(shape)}, the model declares {_fmt_dims(spec.shape)}",
            hint="give one dimension per declared dimension",
        )
    for i, (want, got) in enumerate(zip(spec.shape, shape, strict=False)):
        if isinstance(want, int) and want != got:
            raise BadInputError(
                f"{where} gives input {spec.name!r} shape {list(shape)}, but dimension {i} is fixed to {want} "
                f"in the model ({_fmt_dims(spec.shape)})",
                hint="only dynamic dimensions can be chosen",
            )


def random_inputs(specs: list[TensorSpec], shapes: dict[str, list[int]], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded data that looks like a real input rather than white noise.

    White noise drives detectors to an all-zero output (PP-OCR det's map stays below 2e-6), which
    makes every later comparison meaningless. So image-shaped float inputs (rank 4, 1-4 channels,
    at least 16x16) get a synthetic text page in [0, 1] (dark glyph strokes in rows on a light,
    slightly noisy background: PP-OCR det then marks 17-25% of pixels as text), other float inputs
    smooth blocky data in about [0, 1]. Integer inputs get small non-negative values (valid ids and
    indices for most embeddings), booleans a fair coin.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        shape = shapes[spec.name]
        dtype = np.dtype(spec.dtype) if not spec.dtype.startswith("onnx:") else np.dtype("float32")
        if dtype.kind == "f":
            image = len(shape) == 4 and 1 <= shape[1] <= 4 and min(shape[2], shape[3]) >= 16
            out[spec.name] = (_text_page(rng, shape) if image else _blocky(rng, shape)).astype(dtype)
        elif dtype.kind in "iu":
            out[spec.name] = rng.integers(0, 100, size=shape).astype(dtype)
        elif dtype.kind == "b":
            out[spec.name] = rng.random(shape) < 0.5
        else:
            raise BadInputError(
                f"cannot make random data for input {spec.name!r} of type {spec.dtype}",
                hint="pass --inputs FILE.npz with real data",
            )
    return out


def _text_page(rng: np.random.Generator, shape: list[int]) -> np.ndarray:
    """[N, C, H, W] pages of random 7x5 bitmap glyphs in rows, dark on light, channels nearly equal."""
    import numpy as np

    n, c, h, w = shape
    pages = np.empty(shape)
    glyph_h = max(7, h // 12)
    glyph_w = max(5, glyph_h * 5 // 7)
    cell_h, cell_w = max(1, glyph_h // 7), max(1, glyph_w // 5)
    for i in range(n):
        page = np.full((h, w), 0.92) + rng.standard_normal((h, w)) * 0.02
        for top in range(glyph_h // 2 + 2, h - glyph_h - 1, glyph_h * 2):
            left = 3
            while left + glyph_w < w - 3:
                if rng.random() < 0.85:
                    glyph = np.kron(rng.random((7, 5)) < 0.45, np.ones((cell_h, cell_w)))
                    page[top : top + glyph.shape[0], left : left + glyph.shape[1]] -= 0.8 * glyph
                left += glyph_w + max(1, glyph_w // 4)
        tint = 1.0 + rng.standard_normal(c)[:, None, None] * 0.02
        pages[i] = page[None] * tint
    return np.asarray(np.clip(pages, 0.0, 1.0))


def _blocky(rng: np.random.Generator, shape: list[int]) -> np.ndarray:
    """Blocky structure on the last two axes (edges, flat regions) plus small noise, in about [0, 1]."""
    import numpy as np

    if len(shape) < 2:
        return rng.random(shape) * 0.8 + 0.1
    h, w = shape[-2], shape[-1]
    bh, bw = max(1, h // 8), max(1, w // 8)
    coarse = rng.random((*shape[:-2], -(-h // bh), -(-w // bw)))
    blocks = np.repeat(np.repeat(coarse, bh, axis=-2), bw, axis=-1)[..., :h, :w]
    noise = rng.standard_normal(shape) * 0.05
    return np.asarray(np.clip(0.85 * blocks + 0.1 + noise, 0.0, 1.0))


def load_npz(path: str | os.PathLike[str], specs: list[TensorSpec], shapes: dict[str, list[int]] | None = None,
             ) -> tuple[dict[str, np.ndarray], list[str]]:
    """Read an ``.npz`` keyed by input name (or an MNN test dir's ``<input>.txt`` files) and check it against
    the model; returns (arrays, warnings).

    Float data of another float width (e.g. float64 for a float32 input) is converted with a warning;
    any other dtype mismatch is an error, as are missing or unknown names and wrong shapes.
    """
    import numpy as np

    p = fs.check(path, what="inputs", must_exist=False)
    if not p.exists():
        raise BadInputError(f"input file {p} does not exist", hint="pass an .npz written by numpy.savez (keys = input names)")
    dump_note = None
    if p.is_dir():
        if not is_testdir(p):
            raise BadInputError(f"input path {p} is a directory",
                                hint="pass the .npz file itself, or an MNN test dir (input.json + <input name>.txt)")
        data = _read_testdir(p, specs)
    else:
        data, dump_note = _read_npz(p, specs)
    want = {s.name for s in specs}
    missing = [s.name for s in specs if s.name not in data]
    extra = sorted(set(data) - want)
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if extra:
            parts.append(f"unknown {', '.join(extra)}")
        raise BadInputError(
            f"{p} does not match the model's inputs: {'; '.join(parts)}",
            hint=f"the .npz keys must be exactly the model's input names: {', '.join(s.name for s in specs)}",
        )
    warnings: list[str] = [dump_note] if dump_note else []
    out: dict[str, np.ndarray] = {}
    for spec in specs:
        arr = data[spec.name]
        if not spec.dtype.startswith("onnx:") and arr.dtype != np.dtype(spec.dtype):
            want_dt = np.dtype(spec.dtype)
            if arr.dtype.kind == "f" and want_dt.kind == "f":
                warnings.append(f"input {spec.name!r}: converted {arr.dtype} to {want_dt}")
                arr = arr.astype(want_dt)
            else:
                raise BadInputError(
                    f"input {spec.name!r} in {p} has dtype {arr.dtype}, the model expects {spec.dtype}",
                    hint=f"save it as {spec.dtype} (e.g. array.astype(numpy.{spec.dtype}))",
                )
        _check_compatible(spec, list(arr.shape), f"{p.name}")
        given = (shapes or {}).get(spec.name)
        if given is not None and list(given) != list(arr.shape):
            raise BadInputError(
                f"--shape {spec.name}={'x'.join(map(str, given))} disagrees with the array in {p} ({list(arr.shape)})",
                hint="drop --shape when you pass --inputs, or fix the file",
            )
        out[spec.name] = np.ascontiguousarray(arr)
    return out, warnings


def is_testdir(path: str | os.PathLike[str]) -> bool:
    """True for an MNN test dir (``input.json`` + ``<input>.txt``), which ``--inputs`` also accepts."""
    p = Path(path)
    return p.is_dir() and (p / "input.json").is_file()


def _input_bytes(spec: TensorSpec) -> int | None:
    """The most data a static input can hold (8 bytes an element: float64 is converted with a warning)."""
    dims = [d for d in spec.shape if isinstance(d, int) and d > 0]
    if len(dims) != len(spec.shape):
        return None
    n = 8
    for d in dims:
        n *= d
    return n


def _read_npz(p: Path, specs: list[TensorSpec]) -> tuple[dict[str, np.ndarray], str | None]:
    """The arrays of an inputs ``.npz``, each checked against the model's input size before decompression.

    A plain tensor dump (every input of the model and other tensors, keyed by ONNX names) gives its inputs: the run
    sees what the dumped one saw, and the note says how its other tensors are compared (``qnn-debug compare``)."""
    expected = {s.name: b for s in specs if (b := _input_bytes(s)) is not None}

    from .npz_safe import check_npz, kind_of, open_npz
    from .npz_safe import load_npz as load_checked

    kind = kind_of(p)
    if kind != "npz":
        raise BadInputError(f"{p} is a single .npy array, not an .npz archive" if kind == "npy"
                            else f"{p} is not a readable .npz file", hint="save with numpy.savez(path, **{input_name: array})")
    names = [s.name for s in specs]
    members = check_npz(p, expected_bytes=expected)  # headers only: a dump's other tensors are not read
    extra = len(members) - len(names)
    # a dump holds many tensors beyond the inputs; one or two extra keys are more likely a misspelt input: refused
    if set(names) <= set(members) and extra >= max(DUMP_MIN_EXTRA, len(names)):
        big = [n for n in names if members[n].nbytes > MAX_INPUT_BYTES]
        if big:
            raise BadInputError(f"{p}: input {big[0]} holds {members[big[0]].nbytes} bytes, over {MAX_INPUT_BYTES}",
                                hint="pass inputs of the model's own shapes")
        with open_npz(p, expected_bytes=expected) as npz:
            data = {n: npz[n] for n in names}
        note = (f"{p.name} is a tensor dump ({extra} tensors besides the model's {len(names)} "
                f"inputs): only its inputs are used here; to compare its tensors with the CPU reference, run "
                f"`qnn-debug baseline MODEL --inputs {p}` then `qnn-debug compare BASELINE {p}`")
        return data, note
    return dict(load_checked(p, max_member_bytes=MAX_INPUT_BYTES, expected_bytes=expected)), None


def _read_testdir(p: Path, specs: list[TensorSpec]) -> dict[str, np.ndarray]:
    """The inputs of an MNN test dir as the model expects them: the same ``<input>.txt`` values ModuleBasic
    feeds (read as numbers, so a device dump and the baseline see the same data), reshaped to the model's
    static shape when ``input.json`` gives none, and cast to integer types when the values are integral."""
    import numpy as np

    from .mnn.testdir import load_inputs

    data = load_inputs(p)
    by_name = {s.name: s for s in specs}
    for name, arr in list(data.items()):
        spec = by_name.get(name)
        if spec is None:
            continue
        static = [d for d in spec.shape if isinstance(d, int)]
        if arr.ndim == 1 and len(spec.shape) != 1 and len(static) == len(spec.shape) and int(np.prod(static)) == arr.size:
            arr = arr.reshape(static)
        if not spec.dtype.startswith("onnx:"):
            want = np.dtype(spec.dtype)
            if want.kind in "iub" and arr.dtype.kind == "f":
                if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
                    raise BadInputError(f"{p}/{name}.txt holds non-integer values for the {spec.dtype} input {name!r}",
                                        hint="regenerate the test dir with the model's integer inputs")
                arr = arr.astype(want)
        data[name] = arr
    return data


def prepare_inputs(specs: list[TensorSpec], *, inputs: str | os.PathLike[str] | None = None,
                   shapes: dict[str, list[int]] | None = None, seed: int = 0,
                   model: onnx.ModelProto | None = None) -> PreparedInputs:
    """The one entry point targets use: load ``inputs`` or make seeded data, with shapes resolved.

    Given the ONNX ``model``, generated data follows the range its first operations expect (raw pixels for a
    model that divides by 255, see :mod:`qnn_debug.input_scale`) and the record says what generated data cannot show.
    """
    if not specs:
        raise BadInputError("the model has no inputs", hint="qnn-debug needs a model that takes at least one input")
    note = None
    if inputs is not None:
        arrays, warnings = load_npz(inputs, specs, shapes)
        source = f"{'testdir' if is_testdir(inputs) else 'npz'}:{Path(inputs).name}"
    else:
        resolved = resolve_shapes(specs, shapes)
        arrays, warnings = random_inputs(specs, resolved, seed), []
        source = f"random:seed={seed}"
        if model is not None:
            arrays, note = _follow_model_range(model, specs, arrays)
    concrete = {k: [int(d) for d in v.shape] for k, v in arrays.items()}
    info = InputInfo(sha256=sha256_arrays(arrays), source=source, names=[s.name for s in specs], shapes=concrete,
                     note=note)
    return PreparedInputs(arrays=arrays, shapes=concrete, info=info, warnings=warnings)


def _follow_model_range(model: onnx.ModelProto, specs: list[TensorSpec], arrays: dict[str, np.ndarray],
                        ) -> tuple[dict[str, np.ndarray], str | None]:
    """Scale generated float inputs the model takes as raw pixels to 0..255 (whole values); say what was done."""
    import numpy as np

    from .input_scale import generated_note, pixel_scales

    scales = pixel_scales(model)
    out = dict(arrays)
    for name, scale in scales.items():
        if name in out:
            out[name] = np.round(out[name] * scale.scale).astype(out[name].dtype)
    floats = [s.name for s in specs if np.asarray(out[s.name]).dtype.kind == "f"]
    return out, generated_note([s.name for s in specs], scales, floats)


def save_npz(path: str | os.PathLike[str], arrays: dict[str, np.ndarray]) -> Path:
    """Write ``arrays`` as an ``.npz`` atomically (a reader never sees half a file)."""
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return fs.atomic_write_bytes(path, buf.getvalue(), what="inputs file")


def fix_input_shapes(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph inputs have the given static shapes (QNN refuses dynamic ones).

    Intermediate ``value_info`` entries lose their shapes (they may still carry the old symbolic
    dims; ONNX Runtime re-infers them from the now static inputs) but keep their element types, which
    ONNX shape inference cannot recover for com.microsoft ops.
    """
    import copy

    from onnx import TensorShapeProto

    m = copy.deepcopy(model)
    for inp in m.graph.input:
        dims = shapes.get(inp.name)
        if dims is None:
            continue
        shape = inp.type.tensor_type.shape
        del shape.dim[:]
        for d in dims:
            dim = TensorShapeProto.Dimension()
            dim.dim_value = int(d)
            shape.dim.append(dim)
    for info in m.graph.value_info:
        if info.type.HasField("tensor_type"):
            info.type.tensor_type.ClearField("shape")
    return m
