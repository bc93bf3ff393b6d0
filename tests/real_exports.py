"""The real-export test tier: random-weight toy Qwen3 / Qwen3-VL models exported by MNN's own llmexport.

``real_export(kind, model, export)`` returns the folder llmexport wrote for a toy model
(``tests/real_export_build.py`` lists the sizes: models ``a`` and ``b`` of each kind), building it on first use:
the Hugging Face folder comes from a transformers config with random weights and an offline byte-level BPE
tokenizer, then ``llmexport.py`` runs on it. Both steps run in a subprocess of the exporter venv
(``make setup-llmexport`` → ``.venv-llmexport``; torch stays out of the product venv), llmexport with its own
folder on ``PYTHONPATH`` (0.0.5 does not import as a package) and a no-op ``pip`` first on ``PATH`` (MNN's
converter otherwise pip-installs a logging SDK and sends usage logs).

Folders are cached in ``.cache/real-exports/<key>/`` where the key hashes the exporter's pinned requirements,
the installed versions, the builder script and this file: a change rebuilds, older keys are removed.
Builds hold a file lock per model, so pytest-xdist workers share them. A failed build raises
:class:`RealExportError` with the tail of the exporter's log. Exports (``export=``):

- ``onnx``: ``--export onnx`` → ``onnx/llm.onnx`` (+ ``llm.onnx.data``; VL: ``onnx/visual.onnx``);
- ``mnn``: ``--export mnn`` (4-bit weights, block 64, llmexport's default);
- ``mnn8``: ``--export mnn --quant_bit 8 --quant_block 0`` (8-bit, one scale per channel);
- ``mnn_npu``: ``--export mnn --generate_for_npu``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Literal

REPO = Path(__file__).resolve().parents[1]
EXPORT_VENV = Path(os.environ.get("QNN_DEBUG_LLMEXPORT_VENV", REPO / ".venv-llmexport"))
REQUIREMENTS = REPO / "tests" / "requirements-llmexport.txt"
BUILDER = REPO / "tests" / "real_export_build.py"
TORCH_BUILDER = REPO / "tests" / "torch_export_build.py"
CACHE = Path(os.environ.get("QNN_DEBUG_REAL_EXPORT_CACHE", REPO / ".cache" / "real-exports"))

Kind = Literal["qwen3", "qwen3_vl"]
Export = Literal["onnx", "mnn", "mnn8", "mnn_npu"]
TorchFlavour = Literal["ts", "ts_fp16", "dynamo"]
TORCH_FLAVOURS: tuple[TorchFlavour, ...] = ("ts", "ts_fp16", "dynamo")
TORCH_SEQ = 16
KINDS: tuple[Kind, ...] = ("qwen3", "qwen3_vl")
MODELS: tuple[str, ...] = ("a", "b")
EXPORT_ARGS: dict[str, list[str]] = {
    "onnx": ["--export", "onnx"],
    "mnn": ["--export", "mnn"],
    "mnn8": ["--export", "mnn", "--quant_bit", "8", "--quant_block", "0"],
    "mnn_npu": ["--export", "mnn", "--generate_for_npu"],
}
TIMEOUT_S = 900
_NO_OP_PIP = "#!/bin/sh\necho 'pip is disabled while exporting (real-export test tier)' >&2\nexit 0\n"
_VERSIONS = ("torch", "transformers", "llmexport", "MNN", "onnx", "onnxslim", "tokenizers", "accelerate")


class RealExportError(RuntimeError):
    """The exporter venv is missing or a build failed; the message ends with the exporter's log tail."""


def _python() -> Path:
    py = EXPORT_VENV / "bin" / "python"
    if not py.exists():
        raise RealExportError(f"the exporter venv {EXPORT_VENV} is missing: run `make setup-llmexport` "
                              f"(installs {REQUIREMENTS.relative_to(REPO)}; torch CPU, llmexport, transformers)")
    return py


@lru_cache(maxsize=1)
def _exporter() -> tuple[str, str]:
    """(llmexport's folder, the installed versions) as the exporter venv sees them."""
    code = ("import importlib.metadata as m, importlib.util as u, json\n"
            "spec = u.find_spec('llmexport')\n"
            f"print(json.dumps({{'dir': list(spec.submodule_search_locations)[0], "
            f"'versions': {{n: m.version(n) for n in {list(_VERSIONS)!r}}}}}))")
    proc = subprocess.run([str(_python()), "-c", code], capture_output=True, text=True, timeout=120,
                          env=_base_env(), check=False)
    if proc.returncode != 0:
        raise RealExportError(f"the exporter venv {EXPORT_VENV} is incomplete (run `make setup-llmexport`):\n"
                              + _tail(proc.stderr))
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    return str(info["dir"]), json.dumps(info["versions"], sort_keys=True)


def cache_key() -> str:
    """Changes with the pinned requirements, the installed versions, the builder and the export flags."""
    h = hashlib.sha256()
    h.update(REQUIREMENTS.read_bytes())
    h.update(BUILDER.read_bytes())
    h.update(TORCH_BUILDER.read_bytes())
    h.update(Path(__file__).read_bytes())
    h.update(_exporter()[1].encode())
    h.update(json.dumps(EXPORT_ARGS, sort_keys=True).encode())
    return h.hexdigest()[:16]


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false", "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1"})
    return env


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.replace("\r", "\n").splitlines()[-lines:])


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _shim_dir(root: Path) -> Path:
    """A folder whose ``pip``/``pip3`` do nothing, put first on the exporter's PATH."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("pip", "pip3"):
        p = bin_dir / name
        if not p.exists() or p.read_text() != _NO_OP_PIP:
            p.write_text(_NO_OP_PIP)
            p.chmod(0o755)
    return bin_dir


def _run(args: list[str], log: Path, cwd: Path, env: dict[str, str], what: str) -> None:
    with log.open("w") as fh:
        try:
            proc = subprocess.run(args, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=TIMEOUT_S,
                                  check=False)
        except subprocess.TimeoutExpired as exc:
            raise RealExportError(f"{what} took over {TIMEOUT_S} s; log {log}:\n"
                                  + _tail(log.read_text(errors="replace"))) from exc
    if proc.returncode != 0:
        raise RealExportError(f"{what} failed (exit {proc.returncode}); log {log}:\n"
                              + _tail(log.read_text(errors="replace")))


def _prune(key: str) -> None:
    """Remove the folders of other cache keys (older versions): they are never read again."""
    for old in CACHE.iterdir():
        if old.is_dir() and old.name not in (key, "bin") and len(old.name) == 16:
            shutil.rmtree(old, ignore_errors=True)


def folder_name(kind: Kind, model: str) -> str:
    """The cache folder of a toy model: its path names the family as generate_llm_qnn.py guesses it
    ('Qwen' and 'VL' for Qwen-VL, neither 'VL' nor 'Qwen3.5' for a text model), so llm-check's
    family_from_folder_name stays quiet on the clean exports."""
    return f"Qwen3-VL-toy-{model}" if kind == "qwen3_vl" else f"Qwen3-toy-{model}"


def hf_folder(kind: Kind, model: str) -> Path:
    """The random-weight Hugging Face folder of a toy model (config.json, model.safetensors, tokenizer)."""
    if kind not in KINDS or model not in MODELS:
        raise RealExportError(f"no toy model {kind!r}/{model!r}: kinds {KINDS}, models {MODELS}")
    key = cache_key()
    root = CACHE / key / folder_name(kind, model)
    hf = root / "hf"
    with _locked(CACHE / f"{key}.{kind}-{model}.lock"):
        if not (root / ".hf.done").exists():
            with _locked(CACHE / "prune.lock"):
                _prune(key)
            shutil.rmtree(hf, ignore_errors=True)
            root.mkdir(parents=True, exist_ok=True)
            env = {**_base_env(), "PATH": f"{_shim_dir(CACHE)}:{os.environ.get('PATH', '')}"}
            _run([str(_python()), str(BUILDER), kind, model, str(hf)], root / "build-hf.log", root, env,
                 f"building the toy {kind} model {model}")
            (root / ".hf.done").touch()
    return hf


def real_export(kind: Kind, model: str, export: Export) -> Path:
    """The llmexport output folder of toy model ``model`` of ``kind`` (built and cached on first use)."""
    if export not in EXPORT_ARGS:
        raise RealExportError(f"no export {export!r}: one of {sorted(EXPORT_ARGS)}")
    hf = hf_folder(kind, model)
    root = hf.parent
    out = root / export
    with _locked(CACHE / f"{cache_key()}.{kind}-{model}.lock"):
        if (root / f".{export}.done").exists():
            return out
        shutil.rmtree(out, ignore_errors=True)
        work = root / f".{export}.tmp"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        folder, _ = _exporter()
        env = {**_base_env(), "PYTHONPATH": folder,
               "PATH": f"{_shim_dir(CACHE)}:{EXPORT_VENV / 'bin'}:{os.environ.get('PATH', '')}"}
        args = [str(_python()), str(Path(folder) / "llmexport.py"), "--path", str(hf),
                "--dst_path", str(work / "out"), *EXPORT_ARGS[export]]
        _run(args, root / f"export-{export}.log", work, env, f"llmexport {' '.join(EXPORT_ARGS[export])} of {kind}/{model}")
        produced = work / "out"
        expected = "onnx/llm.onnx" if export == "onnx" else "llm.mnn"
        if not (produced / expected).exists():
            raise RealExportError(f"llmexport wrote no {expected} for {kind}/{model} ({export}); log "
                                  f"{root / f'export-{export}.log'}:\n"
                                  + _tail((root / f"export-{export}.log").read_text(errors="replace")))
        produced.rename(out)
        shutil.rmtree(work, ignore_errors=True)
        (root / f".{export}.done").touch()
    return out


def toy_info(kind: Kind, model: str) -> dict[str, object]:
    """The sizes the builder used (``toy_model.json`` of the Hugging Face folder)."""
    info: dict[str, object] = json.loads((hf_folder(kind, model) / "toy_model.json").read_text(encoding="utf-8"))
    return info


def torch_export(kind: Kind, model: str, flavour: TorchFlavour) -> Path:
    """``torch.onnx.export`` of the same toy model (``tests/torch_export_build.py``): TorchScript, TorchScript on
    the fp16 model, or dynamo; static ``[1, TORCH_SEQ]`` int64 ``input_ids`` / ``attention_mask``, ``logits`` out."""
    if kind != "qwen3":
        raise RealExportError("torch.onnx.export is wired for the text model only (qwen3)")
    if flavour not in TORCH_FLAVOURS:
        raise RealExportError(f"no torch export flavour {flavour!r}: one of {TORCH_FLAVOURS}")
    hf = hf_folder(kind, model)
    root = hf.parent
    out = root / "torch" / f"{flavour}.onnx"
    with _locked(CACHE / f"{cache_key()}.{kind}-{model}.lock"):
        if (root / f".torch-{flavour}.done").exists():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp.onnx")
        env = {**_base_env(), "PATH": f"{_shim_dir(CACHE)}:{os.environ.get('PATH', '')}"}
        _run([str(_python()), str(TORCH_BUILDER), str(hf), flavour, str(tmp), str(TORCH_SEQ)],
             root / f"torch-{flavour}.log", out.parent, env, f"torch.onnx.export ({flavour}) of {kind}/{model}")
        tmp.rename(out)
        (root / f".torch-{flavour}.done").touch()
    return out
