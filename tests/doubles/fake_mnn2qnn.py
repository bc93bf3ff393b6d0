"""TEST DOUBLE for MNN's ``MNN2QNNModel`` — a fake, not MNN's converter (which needs the QNN SDK's tools).

Copies the real tool's command line, messages and exit codes (usage → 1, bad args → 255, ``v75`` as the
arch aborts like ``std::stoi``), refuses a model name that is not a C identifier, writes the meaningless
``qnn_intermediate_outputs/`` into its CWD when dumping (as the real convert mode does), and leaves
``<base>_<soc>_<arch>.mnn`` (a real-format wrapper with one QNN plugin op, made with the flatbuffers
builder) plus ``<base>_<soc>_<arch>.bin``. Double-only convention: the ``.bin`` is a copy of the source
``.mnn``, which the fake ModuleBasic runs. Every invocation is appended to ``$FAKE_M2Q_LOG`` if set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from mnn_formats import build_plugin_model  # noqa: E402

from qnn_debug.mnn.model_reader import read_mnn_model  # noqa: E402


def main(argv: list[str]) -> int:
    if os.environ.get("FAKE_M2Q_LOG"):
        with open(os.environ["FAKE_M2Q_LOG"], "a", encoding="utf-8") as f:
            f.write(json.dumps({"argv": argv, "cwd": os.getcwd()}) + "\n")
    args = argv[1:]
    dump = "--dump_intermediate_outputs" in args
    args = [a for a in args if a != "--dump_intermediate_outputs"]
    for a in args:
        if a.startswith("--"):
            print(f"Unknown option: {a}")
            return 255
    if len(args) < 5:
        print("Usage: ./MNN2QNNModel <qnnSDKPath> <socId> <hexagonArch> <srcMNNPath> <outputDir> ...", end="")
        return 1
    sdk, soc_txt, arch_txt, src_txt, out_txt = args[:5]
    try:
        soc, arch = int(soc_txt), int(arch_txt)
    except ValueError:
        print("terminate called after throwing an instance of 'std::invalid_argument'\n  what():  stoi")
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGABRT)
        return 134
    shapes = args[6: 6 + int(args[5])] if len(args) > 5 else []
    for s in shapes:
        print(f"param dims: {s}")
        if not re.fullmatch(r"\d+(x\d+)*(_\d+(x\d+)*)*", s):
            print(f"{s} parse error, format should be like 1x3x512x512_1x256")
            return 255
    src, out = Path(src_txt), Path(out_txt)
    base = src.stem
    if not os.path.isdir(os.path.join(sdk, "bin", "x86_64-linux-clang")):
        print("[Error]: qnn-model-lib-generator error!")
        return 255
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", base):
        print(f"MNN_QNN: Invalid cache path. result path: {out}/{base}_0")
        print("[Error]: qnn-model-lib-generator error!")
        return 255
    try:
        out.mkdir()
    except FileExistsError:
        pass
    except OSError:
        print(f"Failed to create output directory: {out}")
        return 255
    print(f"Total input shape type size:{max(1, len(shapes))}")
    if dump:  # the real convert mode dumps meaningless buffers into its CWD
        Path("qnn_intermediate_outputs").mkdir(exist_ok=True)
        Path("qnn_intermediate_outputs", "manifest_000000.tsv").write_text("garbage\n", encoding="utf-8")
    model = read_mnn_model(src)
    name = f"{base}_{soc}_{arch}"
    shutil.copyfile(src, out / f"{name}.bin")
    build_plugin_model(
        out / f"{name}.mnn",
        inputs={i.name: list(i.shape) for i in model.inputs},
        outputs=list(model.output_names),
        source_indexes={n: model.tensor_names.index(n) for n in [*(i.name for i in model.inputs), *model.output_names]},
        binary=f"{name}.bin",
        graph=f"{base}_0",
        dump=dump,
    )
    print("[Pass]: qnn-model-lib-generator success!")
    print("[Pass]: qnn-context-binary-generator success!")
    print("[All passed]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
