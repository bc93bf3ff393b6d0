"""Read an llmexport folder (and, optionally, what ``generate_llm_qnn.py`` left behind) into one model.

Folder files: ``config.json`` (runtime config; ``llm_model`` names the graph, default ``llm.mnn``),
``llm_config.json`` (model facts: hidden size, layers, attention-mask dtype, family), ``export_args.json``
(llmexport's own arguments, when present), ``llm.mnn`` + ``llm.mnn.weight``. The generate_llm_qnn side:
its cache dir (``qnn.json`` with ``KVCACHE_SIZE_LIMIT``, ``input.json``, ``testdir/<n>/{input,output}.mnn``,
``npu_postreat.json``) survives a failed run; a finished run leaves ``qnn/`` (compiled ``llm.mnn`` with one
QNN plugin op per NPU graph, ``graphllm<n>.bin``) and ``config_qnn.json`` in the model folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .. import fs
from ..errors import BadInputError


class TestDirInfo(BaseModel):
    """One ``testdir/<n>`` of generateIO: the shapes it feeds compilefornpu."""

    name: str
    has_input: bool
    has_output: bool
    inputs: dict[str, list[int]] = Field(default_factory=dict)
    input_dtypes: dict[str, str] = Field(default_factory=dict)
    problem: str | None = None


class QnnOutputs(BaseModel):
    """What a generate_llm_qnn.py run left in ``--qnn-dir`` (any of these may be missing)."""

    dir: str
    qnn_json: dict[str, Any] | None = None
    input_json: dict[str, Any] | None = None
    postreat: dict[str, Any] | None = None
    testdirs: list[TestDirInfo] = Field(default_factory=list)
    compiled_model: str | None = None
    compiled_problem: str | None = Field(default=None, description="why the compiled model holds no graph (empty, no ops)")
    plugin_ops: int = 0
    plugin_binaries: list[str] = Field(default_factory=list)
    missing_binaries: list[str] = Field(default_factory=list)
    bins: list[str] = Field(default_factory=list)


class ExportFolder(BaseModel):
    dir: str  # the real folder (links resolved): what is read
    given_dir: str = Field(default="", description=(
        "the folder as given, made absolute with its links kept: generate_llm_qnn.py guesses the model family from "
        "its --model string, so a folder linked under the right name is read under that name"))
    files: list[str]
    config: dict[str, Any] | None = None
    llm_config: dict[str, Any] | None = None
    export_args: dict[str, Any] | None = None
    config_qnn: dict[str, Any] | None = None
    model_path: str
    weight_present: bool


def _json(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        data = fs.read_json(path, what=path.name, max_bytes=64 << 20)
    except BadInputError as e:
        raise BadInputError(e.message, hint=f"fix or re-create {path.name} (re-run the export)") from None
    if not isinstance(data, dict):
        raise BadInputError(f"{path} does not hold a JSON object", hint=f"re-create {path.name} (re-run the export)")
    return data


def _inside(root: Path, rel: str, what: str) -> Path:
    p = fs.real_path(root / rel, what=what)
    if root.resolve() not in (p, *p.parents):
        raise BadInputError(f"{what} {rel!r} points outside {root}", hint="keep the model files inside the export folder")
    return p


def read_export(export_dir: str | Path) -> ExportFolder:
    """The folder's configs and model path; typed errors for a missing or non-export folder."""
    if not Path(export_dir).exists():
        raise BadInputError(f"export folder {export_dir} does not exist", hint="pass the --dst_path folder of llmexport.py")
    root = fs.check(export_dir, what="export folder", kind="dir")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".build" not in p.parts)[:500]
    config = _json(root / "config.json")
    llm_config = _json(root / "llm_config.json")
    model_rel = str((config or {}).get("llm_model", "llm.mnn"))
    model = _inside(root, model_rel, "llm_model")
    if not model.is_file():
        raise BadInputError(f"{root} has no {model_rel}", hint="pass the folder llmexport.py --export mnn wrote (it holds llm.mnn and llm_config.json)")
    weight_rel = str((config or {}).get("llm_weight", model_rel + ".weight"))
    return ExportFolder(dir=str(root), given_dir=os.path.abspath(export_dir), files=files, config=config, llm_config=llm_config,
                        export_args=_json(root / "export_args.json"), config_qnn=_json(root / "config_qnn.json"),
                        model_path=str(model), weight_present=_inside(root, weight_rel, "llm_weight").is_file())


def read_qnn_outputs(qnn_dir: str | Path) -> QnnOutputs:
    """generate_llm_qnn.py's cache dir or ``qnn/`` output folder."""
    from ..mnn.model_reader import read_mnn_constants, read_mnn_model

    if not Path(qnn_dir).exists():
        raise BadInputError(f"--qnn-dir {qnn_dir} does not exist", hint="pass generate_llm_qnn.py's --cache_path dir or the model's qnn/ folder")
    root = fs.check(qnn_dir, what="--qnn-dir", kind="dir")
    out = QnnOutputs(dir=str(root), qnn_json=_json(root / "qnn.json"), input_json=_json(root / "input.json"),
                     postreat=_json(root / "npu_postreat.json"))
    testdir = root / "testdir"
    if testdir.is_dir():
        for d in sorted((p for p in testdir.iterdir() if p.is_dir()), key=lambda p: p.name):
            info = TestDirInfo(name=d.name, has_input=(d / "input.mnn").is_file(), has_output=(d / "output.mnn").is_file())
            if info.has_input:
                try:
                    for name, arr in read_mnn_constants(d / "input.mnn").items():
                        info.inputs[name] = list(arr.shape)
                        info.input_dtypes[name] = str(arr.dtype)
                except BadInputError as e:
                    info.problem = e.message
            out.testdirs.append(info)
    compiled = next((p for p in (root / "llm.mnn", root / "qnn" / "llm.mnn") if p.is_file()), None)
    if compiled is not None:
        out.compiled_model = str(compiled)
        try:  # compilefornpu exits 0 after a refused op and leaves a small file without a graph
            m = read_mnn_model(compiled)
        except BadInputError as e:
            out.compiled_problem = f"{compiled.stat().st_size} bytes, not a readable MNN graph ({e.message})"
        else:
            if all(op.type_name == "Input" for op in m.ops):
                out.compiled_problem = f"{compiled.stat().st_size} bytes, only input op(s): no graph"
            out.plugin_ops = sum(op.type_name == "Plugin" for op in m.ops)
            if m.plugin and m.plugin.binary_path:
                out.plugin_binaries.append(m.plugin.binary_path)
    bin_dirs = [root, root / "qnn"]
    out.bins = sorted({p.name for d in bin_dirs if d.is_dir() for p in d.glob("graph*.bin")})
    return out
