"""Builders of hostile and damaged files for the confinement tests (no tests here).

Each builder writes a real file the way an attacker or a broken tool would: zip bombs, lying zip
directories, damaged deflate streams, FIFOs, symlink loops. All are small on disk and quick to make.
"""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile
from pathlib import Path

import numpy as np


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def zip_bomb(path: Path, name: str, shape: tuple[int, ...], dtype: str = "float32") -> Path:
    """A deflated member whose npy header is honest but whose data is ``prod(shape)`` zero bytes (tiny on disk)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape})
    total = int(np.prod(shape)) * np.dtype(dtype).itemsize
    chunk = bytes(1 << 20)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf, \
            zf.open(f"{name}.npy", "w", force_zip64=True) as member:
        member.write(header.getvalue())
        left = total
        while left > 0:
            member.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
    return path


def lying_size(path: Path, name: str, arr: np.ndarray, declared: int = 0xFFFFFFFF) -> Path:
    """An archive whose central directory declares ``declared`` bytes for a small member."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{name}.npy", npy_bytes(arr))
    data = bytearray(path.read_bytes())
    at = data.rfind(b"PK\x01\x02")
    struct.pack_into("<I", data, at + 24, declared)  # uncompressed size in the central directory entry
    path.write_bytes(bytes(data))
    return path


def broken_deflate(path: Path, name: str, arr: np.ndarray) -> Path:
    """A deflated member whose compressed bytes were damaged (zlib fails while reading the header)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{name}.npy", npy_bytes(arr))
    data = bytearray(path.read_bytes())
    start = 30 + len(f"{name}.npy")  # local header + file name, no extra field
    for i in range(start, start + 12):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def duplicate_members(path: Path, name: str, arr: np.ndarray) -> Path:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr(f"{name}.npy", npy_bytes(arr))
            zf.writestr(f"{name}.npy", npy_bytes(arr * 2))
    return path


def complex_npz(path: Path, name: str, shape: tuple[int, ...]) -> Path:
    np.savez(path, **{name: np.zeros(shape, np.complex64)})
    return path


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def spoil_first_tensor(run: Path, label: str) -> Path:
    """Replace a run's first tensor file by a FIFO, a directory, or an .npy of strings of the right shape and size
    (only the type is wrong); returns the spoiled path."""
    victim = sorted((run / "tensors").iterdir())[0]
    shape = np.load(victim).shape
    victim.unlink()
    if label == "fifo":
        fifo(victim)
    elif label == "directory":
        victim.mkdir()
    else:
        np.save(victim, np.full(shape, "ab"))
    return victim


def loop(path: Path) -> Path:
    """A symlink pointing at itself."""
    path.symlink_to(path)
    return path


def manifest(d: Path, rows: list[tuple[str, str, int, str, int, str, str]], number: int = 0) -> Path:
    """A QNN dump manifest: rows of (name, file, data_type, dims, encoding, scale, offset)."""
    d.mkdir(parents=True, exist_ok=True)
    lines = ["index\tname\tfile\tdata_type\tdimensions\tquant_encoding\tscale\toffset"]
    lines += [f"{i}\t{n}\t{f}\t{t}\t{dims}\t{e}\t{s}\t{o}" for i, (n, f, t, dims, e, s, o) in enumerate(rows)]
    path = d / f"manifest_{number:06d}.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes | None]]:
    """Every entry under ``folder``: (mtime_ns, size, content for small regular files); links not followed."""
    out: dict[str, tuple[int, int, bytes | None]] = {}
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in [*dirs, *files]:
            p = Path(root, name)
            st = p.lstat()
            small = p.is_file() and not p.is_symlink() and st.st_size < 1 << 20
            out[str(p.relative_to(folder))] = (st.st_mtime_ns, st.st_size, p.read_bytes() if small else None)
    return out


def testdir(d: Path, doc: object) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "input.json").write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return d
