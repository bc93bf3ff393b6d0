"""TEST DOUBLE for MNN's ``ModuleBasic.out`` — a fake, not MNN's tool. It runs where the real one would
(on the fake phone of ``fake_adb.py``, or as a host build's binary) and prints what the real one prints.

The numbers are real: the model runs on MNN's CPU backend through the pip ``MNN`` package. What is faked
is the NPU: for forward type 5 (QNN) or an offline QNN wrapper, values are rounded through fp16 the way
HTP stores them, and a wrapper made with ``--dump_intermediate_outputs`` writes a QNN dump in MNN's exact
format (manifest + raw, ``t<N>`` names, fp16, NC4HW4 tensors channel-last, fp16 cast stages).
Double-only convention: the fake ``MNN2QNNModel`` stores the source ``.mnn`` as the ``.bin``.

``FAKE_MB_ENV_LOG`` (host runs) records CWD, argv, library path and QNN_SDK_ROOT. ``FAKE_MB_MODE`` switches failure modes: ``crash`` (SIGSEGV after the first ``Run for``), ``qnn6000``
(graphExecute fails with error code 6000 and outputs stay zero, like the shapeMutable bug).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from mnn_formats import nchw_to_qnn, write_dump  # noqa: E402

from qnn_debug.mnn.model_reader import read_mnn_model  # noqa: E402

USAGE = ("Usage: ./ModuleBasic.out ${test.mnn} ${Dir} [runMask] [forwardType] [runLoops] [numberThread] "
         "[precision | memory] [cacheFile] [cpuIds] [enableKleidiAI]")


def out(text: str) -> None:
    sys.stdout.write(text + "\n")


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        out("=" * 40)
        out(USAGE)
        return 0
    model_path, test_dir = Path(argv[1]), Path(argv[2])
    forward = int(argv[4]) if len(argv) > 4 else 0
    loops = int(argv[5]) if len(argv) > 5 else 0
    mask = int(argv[7]) if len(argv) > 7 else 0
    precision = mask % 4
    out(f"Test {argv[1]} from input info: {argv[2]}")
    try:
        doc = json.loads((test_dir / "input.json").read_text(encoding="utf-8"))
        inputs = [i["name"] for i in doc["inputs"]]
    except (OSError, ValueError, KeyError, TypeError):
        out("Invalid json")
        return 0
    for name in inputs:
        out(name)
    outputs = [str(o) for o in doc.get("outputs", [])]
    for name in outputs:
        out(f"output: {name}")
    out(f"Use extra forward type: {forward}")
    out(f"precision={precision} in main, 260 ")
    mode = os.environ.get("FAKE_MB_MODE", "")
    if os.environ.get("FAKE_MB_ENV_LOG"):  # lets host-target tests see how the tool was started
        Path(os.environ["FAKE_MB_ENV_LOG"]).write_text(json.dumps({
            "cwd": os.getcwd(), "argv": argv, "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH"),
            "MNN_QNN_DUMP_DIR": os.environ.get("MNN_QNN_DUMP_DIR"), "QNN_SDK_ROOT": os.environ.get("QNN_SDK_ROOT")}),
            encoding="utf-8")
    try:
        wrapper = read_mnn_model(model_path)
    except Exception:
        out("Error: can't load module")
        return 0
    plugin = wrapper.plugin
    source = model_path.parent / Path(plugin.binary_path or "").name if plugin else model_path
    on_qnn = plugin is not None or forward == 5
    fp16 = on_qnn and precision != 1
    computed = compute(source, test_dir, inputs)
    if computed is None:
        return 0
    values, formats = computed
    dump_dir = None
    if plugin is not None and plugin.dump_intermediate_outputs:
        dump_dir = Path(os.environ.get("MNN_QNN_DUMP_DIR") or model_path.parent / "qnn_intermediate_outputs")
    out("main, 362, cost time: 0.300000 ms")
    repeat_count = int(doc.get("repeat", 2))
    for repeat in range(repeat_count):
        out(f"Run for {repeat} time")
        if plugin is not None:
            out("stateNumber=0 in init, 1409 ")
        if mode == "crash":
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGSEGV)
        result = {n: v.copy() for n, v in values.items()}
        if fp16:
            result = {n: v.astype(np.float16).astype(np.float32) for n, v in result.items()}
        if mode == "qnn6000":
            out("Error in file /path/to/MNN/source/backend/qnn/backend/QNNBackend.cpp, line 2036: error code 6000")
            out("QNN graphExecute failed!")
            result = {n: np.zeros_like(v) for n, v in result.items()}
        if dump_dir is not None:
            write_qnn_dump(dump_dir, repeat, source, result, formats, fp16)
        for i, name in enumerate(outputs):
            check(test_dir, name, i, result[name], repeat)
        save_outputs(outputs, result, repeat, test_dir, inputs)
        out("memoryInMB=f 0.335022 in main, 507 ")
    if loops > 0:
        out("Avg= 0.194000 ms, min= 0.194000 ms, max= 0.194000 ms")
    return 0


def compute(source: Path, test_dir: Path, inputs: list[str]) -> tuple[dict[str, np.ndarray], dict[str, str]] | None:
    """Every tensor of ``source`` in NCHW from MNN's CPU backend (pip MNN), and each tensor's MNN format."""
    import MNN

    F = MNN.expr
    var_map = F.load_as_dict(str(source))
    feeds = []
    for name in inputs:
        path = test_dir / f"{name}.txt"
        if not path.is_file():
            out(f"TESTERROR Can't open {path}")
            return None
        var = var_map[name]
        data = np.array(path.read_text(encoding="utf-8").split(), dtype=np.float32).reshape(var.shape)
        fmt = var.data_format
        c = F.const(data, list(data.shape), F.NCHW if fmt == F.NC4HW4 else fmt)
        feeds.append(F.convert(c, F.NC4HW4) if fmt == F.NC4HW4 else c)
    names = [n for n in var_map if n not in inputs and var_map[n].op_type not in ("Const", "Input")]
    module = MNN.nn.load_module_from_file(str(source), inputs, names, precision_mode=F.PrecisionMode.High,
                                          backend=F.Backend.CPU)
    got = module.forward(feeds)
    result: dict[str, np.ndarray] = {}
    for name, var in zip(names, got, strict=True):
        if var.data_format == F.NC4HW4:
            var = F.convert(var, F.NCHW)
        result[name] = np.array(var.read(), dtype=np.float32, copy=True)
    for name, var in zip(inputs, feeds, strict=True):
        result[name] = np.array(F.convert(var, F.NCHW).read() if var.data_format == F.NC4HW4 else var.read(),
                                dtype=np.float32, copy=True)
    formats = {n: ("NC4HW4" if var_map[n].data_format == F.NC4HW4 else "other") for n in var_map}
    return result, formats


def write_qnn_dump(dump_dir: Path, execution: int, source: Path, values: dict[str, np.ndarray], formats: dict[str, str],
                   fp16: bool) -> None:
    """The dump MNN's QNNTensorDumper writes for an offline debug wrapper (fp16 mode)."""
    model = read_mnn_model(source)
    dump_dir.mkdir(parents=True, exist_ok=True)
    code = 534 if fp16 else 562
    dtype = np.float16 if fp16 else np.float32
    rows = []
    input_idx = {i.index for i in model.inputs}
    for op in model.ops:
        for t in op.outputs:
            name = model.tensor_names[t]
            arr = values.get(name)
            if arr is None:
                continue
            qnn = nchw_to_qnn(arr) if formats.get(name) == "NC4HW4" else arr
            if t in input_idx:
                if fp16:
                    rows.append((f"t{t}_cast", qnn.astype(dtype), code))
                continue
            if name in model.output_names:
                if fp16:
                    rows.append((f"t{t}_cast", qnn.astype(dtype), code))
                rows.append((f"t{t}", qnn.astype(np.float32), 562))
            else:
                rows.append((f"t{t}", qnn.astype(dtype), code))
    write_dump(dump_dir, execution, rows)


def check(test_dir: Path, name: str, index: int, value: np.ndarray, repeat: int) -> None:
    ref_path = next((p for p in (test_dir / f"{name}.txt", test_dir / f"{index}.txt") if p.is_file()), None)
    if ref_path is None:
        out(f"Skip check {name}")
        return
    out(f"before compare {name}: (" + "".join(f"{d}, " for d in value.shape) + ")")
    ref = np.array(ref_path.read_text(encoding="utf-8").split(), dtype=np.float64)
    flat = value.reshape(-1).astype(np.float64)
    abs_max = max(0.0, float(ref[: flat.size].max()))  # MNN's running max of the signed values, from 0
    diff = float(np.abs(ref[: flat.size] - flat).max())
    out(f"For {name}, max = {abs_max:f}, diffmax = {diff:f}, diff rate = {diff / max(abs_max, 1e-6):f}")
    if abs_max * 0.01 < diff:
        out(f"TESTERROR {name} value error : absMaxV:{abs_max:f} - DiffMax {diff:f}")
        out(f"{repeat} run Error for output {name}")


def save_outputs(outputs: list[str], values: dict[str, np.ndarray], repeat: int, test_dir: Path, inputs: list[str]) -> None:
    if not Path("output").is_dir():  # the real tool's ofstream silently fails without output/
        return
    for i, name in enumerate(outputs):
        path = Path("output") / f"{repeat}_{i}.txt"
        out(f"Write {name} output to {path}")
        path.write_text("".join(f"{v:g}\n" for v in values[name].reshape(-1)), encoding="utf-8")
    if repeat == 0:
        import MNN

        F = MNN.expr
        saved = []
        for name in outputs:
            v = F.const(values[name].reshape(-1).tolist(), list(values[name].shape), F.NCHW)
            v.name = name
            saved.append(v)
        F.save(saved, "output/output.mnn")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
