"""``MNN2QNNModel``: MNN's offline QNN converter (x86_64 Linux host only), driven so its quirks cannot bite.

Command line (``tools/cpp/MNN2QNNModel.cpp``)::

    MNN2QNNModel <qnnSDK> <socId> <hexagonArch> <src.mnn> <outputDir> [K shape_1 … shape_K] [--dump_intermediate_outputs]

Quirks handled here:
- outputs are ``<outputDir>/<base>_<soc>_<arch>.mnn`` (wrapper with one QNN plugin op) and ``.bin``
  (context binary); both are predicted and checked, since the tool's exit status says little;
- ``<base>_<k>`` becomes a C identifier in generated code: a model named ``my-model.mnn`` or
  ``1net.mnn`` is converted from a renamed copy;
- the arch is a bare integer (``v75`` aborts the tool);
- it builds shell commands with ``system()`` and unquoted paths (the ``tar`` step), so every path it
  sees is checked to be shell-inert, and the work happens in a fresh directory whose path is;
- with ``--dump_intermediate_outputs`` the conversion itself writes a meaningless
  ``qnn_intermediate_outputs/`` into its CWD: that CWD is our scratch directory, never the user's.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from .. import process
from ..errors import BadInputError, TargetError, UnsupportedOnTargetError
from .refusals import read_tool_output, refusal_hint, refusal_message
from .soc import resolve

_C_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SHELL_INERT = re.compile(r"^[A-Za-z0-9_./+=,-]+$")
_SHAPE = re.compile(r"^\d+(x\d+)*(_\d+(x\d+)*)*$")
DUMP_FLAG = "--dump_intermediate_outputs"


class Mnn2QnnResult(BaseModel):
    command: list[str]
    returncode: int
    passed: bool
    mnn: str | None = None
    bin: str | None = None
    base: str
    renamed_from: str | None = None
    dump_intermediate_outputs: bool = False
    shapes: list[str] = Field(default_factory=list)
    messages: list[str] = Field(default_factory=list)  # [Pass]/[Error]/[Warning] lines
    log: str | None = None


def c_identifier(stem: str) -> str:
    """A C identifier close to ``stem``: invalid characters → ``_``, a leading digit gets ``m_``."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", stem) or "model"
    return base if not base[0].isdigit() else f"m_{base}"


def output_names(base: str, soc_id: int, htp_arch: int) -> tuple[str, str]:
    """The wrapper model and the context binary MNN2QNNModel writes."""
    return f"{base}_{soc_id}_{htp_arch}.mnn", f"{base}_{soc_id}_{htp_arch}.bin"


def shape_string(shapes: Mapping[str, Sequence[int]], order: Sequence[str]) -> str:
    """One shape configuration in MNN2QNNModel's syntax: ``1x3x224x224_1x10`` (inputs in model order)."""
    missing = [n for n in order if n not in shapes]
    if missing:
        raise BadInputError(f"no shape for input(s) {', '.join(missing)}", hint="give a shape for every model input")
    text = "_".join("x".join(str(int(d)) for d in shapes[n]) for n in order)
    check_shape(text)
    return text


def check_shape(text: str) -> str:
    if not _SHAPE.match(text):
        raise BadInputError(f"invalid MNN2QNNModel shape {text!r}",
                            hint="write dims with 'x' and separate inputs with '_', e.g. 1x3x512x512_1x256")
    return text


def build_command(executable: str, qnn_sdk: str, soc_id: int, htp_arch: int, source: str, output_dir: str,
                  shapes: Sequence[str] = (), *, dump: bool = False) -> list[str]:
    cmd = [executable, qnn_sdk, str(soc_id), str(htp_arch), source, output_dir]
    if shapes:
        cmd += [str(len(shapes)), *(check_shape(s) for s in shapes)]
    if dump:
        cmd.append(DUMP_FLAG)
    return cmd


def _inert(path: str, what: str) -> str:
    if not _SHELL_INERT.match(path):
        raise BadInputError(f"{what} {path!r} contains characters MNN2QNNModel's shell commands would misread",
                            hint="MNN2QNNModel passes paths to system() unquoted; use a path of letters, digits, '_', '-', '.', '/'")
    return path


def run_mnn2qnn(
    executable: str | os.PathLike[str],
    *,
    qnn_sdk: str | os.PathLike[str],
    source: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    soc_id: int,
    htp_arch: int | str | None = None,
    shapes: Sequence[str] = (),
    dump: bool = False,
    timeout: float = 3600.0,
    env: Mapping[str, str] | None = None,
    scratch: str | os.PathLike[str] | None = None,
) -> Mnn2QnnResult:
    """Convert ``source`` into ``<output_dir>/<base>_<soc>_<arch>.mnn/.bin``; raises when they do not appear."""
    exe = Path(executable)
    if not exe.is_file():
        raise BadInputError(f"MNN2QNNModel not found at {exe}", hint="build MNN with -DMNN_QNN=ON -DMNN_QNN_CONVERT_MODE=ON "
                            "-DMNN_BUILD_TOOLS=ON and pass its path")
    src = Path(source)
    if not src.is_file():
        raise BadInputError(f"model {src} does not exist", hint="pass the source .mnn")
    sdk = Path(qnn_sdk).absolute()
    if not (sdk / "bin" / "x86_64-linux-clang").is_dir():
        raise BadInputError(f"{sdk} does not look like a QNN SDK (no bin/x86_64-linux-clang)",
                            hint="pass the QNN/QAIRT SDK root (QNN_SDK_ROOT)")
    _inert(str(sdk), "QNN SDK path")
    soc, arch = resolve(soc_id, htp_arch)
    base = c_identifier(src.stem)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="qnn_debug_m2q_", dir=scratch))
    try:
        _inert(str(work), "scratch directory")
        local_src = work / f"{base}.mnn"
        shutil.copyfile(src, local_src)
        conv_out = work / "out"
        cmd = build_command(str(exe.absolute()), str(sdk), soc, arch, str(local_src), str(conv_out), shapes, dump=dump)
        base_env = process.environ() if env is None else dict(env)
        run_env = {**base_env, **process.qnn_sdk_env(sdk, base_env)}  # its generated Makefile reads QNN_SDK_ROOT
        argv, buffered_note = process.unbuffered(cmd)
        try:
            proc = process.run(argv, cwd=work, timeout=timeout, env=run_env, merge_stderr=True)
        except process.ChildTimeout:
            raise TargetError(f"MNN2QNNModel did not finish within {timeout:.0f} s", hint="raise --timeout") from None
        except OSError as e:
            raise TargetError(f"cannot start MNN2QNNModel ({e.strerror})",
                              hint="is it an x86_64 executable built for this machine?") from None
        log = proc.text
        mnn_name, bin_name = output_names(base, soc, arch)
        messages = [ln.strip() for ln in log.splitlines() if ln.strip().startswith(("[Pass]", "[Error]", "[Warning]", "[All passed]"))
                    or "Failed to" in ln or "parse error" in ln or "Unknown option" in ln or "must be run on a x86_64" in ln]
        made = {n: conv_out / n for n in (mnn_name, bin_name)}
        ok = all(p.is_file() and p.stat().st_size > 0 for p in made.values())
        result = Mnn2QnnResult(command=cmd, returncode=proc.returncode, passed=ok and "[All passed]" in log, base=base,
                               renamed_from=src.name if base != src.stem else None, dump_intermediate_outputs=dump,
                               shapes=list(shapes), messages=messages, log=log[-20000:])
        if not ok:
            missing = [n for n, p in made.items() if not p.is_file() or p.stat().st_size == 0]
            facts = read_tool_output(log)
            refused = refusal_message(facts, "MNN2QNNModel")
            if refused:  # the SDK step's failure follows from it: say the cause, not the SDK
                raise UnsupportedOnTargetError(
                    f"{refused}; so it did not produce {', '.join(missing)} (exit status {proc.returncode})",
                    hint=refusal_hint(facts),
                    details={"refusals": [r.model_dump() for r in facts.refusals], "log_tail": log[-3000:],
                             "command": cmd, **({"note": buffered_note} if buffered_note else {})})
            raise TargetError(
                f"MNN2QNNModel did not produce {', '.join(missing)} (exit status {proc.returncode})",
                hint=(messages[-1] if messages else "see details.log_tail") + "; check the QNN SDK and the soc/arch pair",
                details={"log_tail": log[-3000:], "command": cmd, **({"note": buffered_note} if buffered_note else {})},
            )
        for name, p in made.items():
            dst = out / name
            if dst.exists():  # a previous conversion's output is kept, not overwritten
                os.replace(dst, dst.with_name(dst.name + ".previous"))
            shutil.move(str(p), dst)
        result.mnn, result.bin = str(out / mnn_name), str(out / bin_name)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)
