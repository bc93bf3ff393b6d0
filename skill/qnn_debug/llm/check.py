"""``llm-check``: a static check of an llmexport folder for the faults that break MNN's QNN LLM path.

The stock LLM path (llmexport → generate_llm_qnn.py → compilefornpu → llm_demo) has no tensor dump, so
what can be known before a device run is read from the files: which ops compilefornpu would send to QNN
that QNN does not implement, which integer tensors carry activation quantization, which Mul outputs reuse
an operand's encoding, and the export settings that decide all three. Every finding carries its evidence
(tensor and op names from the file) and the MNN source lines the reasoning rests on.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..mnn.model_reader import MnnModel, read_mnn_model
from ..mnn.optypes import qnn_mappings
from ..next_step import command_line
from . import sources as S
from .check_models import (
    STEPS,
    ExportSettings,
    Finding,
    IoRow,
    LlmCheckRequest,
    LlmCheckResult,
    SegmentSummary,
    VisualSummary,
)
from .check_vl import (
    DEFAULT_IMAGE_SIZES,
    is_vl,
    parse_image_sizes,
    script_path,
    visual_missing,
    visual_model_path,
    vl_findings,
)
from .export_reader import ExportFolder, QnnOutputs, read_export, read_qnn_outputs
from .mnn_extras import MnnExtras, OpExtras, TensorEncoding, read_mnn_extras
from .segments import NOT_EXECUTED, Partition, dead_ops, integer_tensors, partition

C4_FUSED = {305: "LinearAttention", 306: "RoPE", 307: "FusedLinear", 308: "GatedRMSNorm"}
# The BinaryOp operations MNN's QNN creator translates (sources.QNN_BINARY_TYPES); a BinaryOp of any other kind is
# refused like an unregistered op. MUL_SILU comes from the converter's C4 fusion, so it goes with the C4 remedy.
QNN_BINARY = {"ADD", "SUB", "MUL", "DIV", "POW", "REALDIV", "MINIMUM", "MAXIMUM", "GREATER", "GREATER_EQUAL", "LESS",
              "FLOORDIV", "LESS_EQUAL", "FLOORMOD", "EQUAL", "MOD", "LOGICALOR", "NOTEQUAL"}
C4_FUSED_BINARY = {"MUL_SILU"}


def _registered() -> set[str]:
    return {m.optype for m in qnn_mappings()}


def _kv_limit(req: LlmCheckRequest, qnn: QnnOutputs | None) -> tuple[int, str]:
    if req.max_history_token is not None:
        return req.max_history_token, "--max-history-token"
    if qnn is not None and qnn.qnn_json is not None and "KVCACHE_SIZE_LIMIT" in qnn.qnn_json:
        try:
            return int(qnn.qnn_json["KVCACHE_SIZE_LIMIT"]), "qnn.json KVCACHE_SIZE_LIMIT"
        except (TypeError, ValueError):
            pass
    return 0, "assumed 0 (generate_llm_qnn.py's default; pass --max-history-token if you used another value)"


def _settings(folder: ExportFolder, model: MnnModel, extras: MnnExtras, kv: tuple[int, str]) -> ExportSettings:
    args = folder.export_args or {}
    llm = folder.llm_config or {}
    enc = list(extras.encodings.values())
    inferred_bits = 16 if any(e.dtype == "int16" for e in enc) else 8 if enc else None
    mask_in = next((i.dtype for i in model.inputs if i.name == "attention_mask"), None)
    calib = "smooth" if args.get("smooth") else "omni" if args.get("omni") else None
    fused = sorted({C4_FUSED[op.type_id] for op in model.ops if op.type_id in C4_FUSED})
    c4 = True if fused else args.get("transformer_c4")
    c4_why = (f"llm.mnn holds C4-fused op(s): {', '.join(fused)}" if fused
              else "export_args.json" if "transformer_c4" in args else None)
    return ExportSettings(
        source="export_args.json" if folder.export_args else "inferred from llm.mnn (no export_args.json)",
        model_type=llm.get("model_type"), hidden_size=llm.get("hidden_size"), layers=llm.get("layer_nums"),
        generate_for_npu=args.get("generate_for_npu"), transformer_c4=c4, transformer_c4_evidence=c4_why,
        weight_bits=args.get("quant_bit"), weight_symmetric=args.get("sym"),
        calibration=calib if folder.export_args else ("smooth or omni (activation encodings present)" if enc else None),
        activation_bits=(args.get("act_bit") if calib else None) if folder.export_args else inferred_bits,
        activation_symmetric=(args.get("act_sym") if calib else None) if folder.export_args
        else (all(e.zero == 0 for e in enc) if enc else None),
        quantized_tensors=len(enc), attention_mask_config=llm.get("attention_mask"), attention_mask_model=mask_in,
        kv_limit=kv[0], kv_limit_source=kv[1])


def _rerun_hint(folder: ExportFolder) -> str:
    args = folder.export_args or {}
    src = args.get("path")
    flags = " --smooth" if args.get("smooth") else " --omni" if args.get("omni") else ""
    if src:
        return (f"re-export with `python3 llmexport.py --path {src} --export mnn --dst_path {folder.dir} "
                f"--generate_for_npu{flags}` from an MNN checkout that has alibaba/MNN#4752")
    return "re-export with llmexport.py --generate_for_npu from an MNN checkout that has alibaba/MNN#4752"


def _unregistered(model: MnnModel, extras: MnnExtras, part: Partition, folder: ExportFolder,
                  graph: str = "llm.mnn") -> list[Finding]:
    registered = _registered()
    skipped = set(part.folded) | dead_ops(model)  # constant at resize time, or output unused (dropped before QNN)
    hits: list[tuple[int, str]] = []
    fused_binary: set[str] = set()
    for seg in part.npu_segments:
        for p in seg.ops:
            op = model.ops[p]
            x = extras.ops.get(p)
            arith = x.arith if x is not None and op.type_name == "BinaryOp" else None
            refused_binary = arith is not None and arith not in QNN_BINARY
            if p in skipped or op.type_name in NOT_EXECUTED or (op.type_name in registered and not refused_binary):
                continue
            label = op.type_name
            if refused_binary:
                label = f"BinaryOp {arith} (no QNN translation: 'MNN_QNN: Not supported Binary type.')"
                fused_binary.add(str(arith))
            if x is not None and x.extra_type:
                label = f"Extra (custom op {x.extra_type!r} the export did not convert)"
            hits.append((seg.index, f"op {p} {op.name!r}: {label} (OpType {op.type_id}) in NPU segment {seg.index}"))
    if not hits:
        return []
    ids = {model.ops[int(e.split()[1].rstrip(':'))].type_id for _, e in hits}
    c4 = sorted(C4_FUSED[i] for i in ids if i in C4_FUSED) + sorted(fused_binary & C4_FUSED_BINARY)
    kv_note = (f" With KVCACHE_SIZE_LIMIT {part.kv_limit} > 0 every op is NPU-eligible, so KV Attention and "
               "LinearAttention go into the QNN graph; use --max_history_token 0 for generate_llm_qnn.py."
               if part.kv_limit > 0 else "")
    remedy = (f"{_rerun_hint(folder)} (it forces transformer_c4 off, so no {'/'.join(c4)} is emitted), or pass "
              "--disable_transformer_c4; then run generate_llm_qnn.py with --max_history_token 0." if c4 else
              "keep the op off the NPU: export without it, or list it in compilefornpu's \"skips\" (its outputs "
              "become segment inputs; generate_llm_qnn.py writes \"skips\": [] into qnn.json)") + kv_note
    return [Finding(
        id="unregistered_op_in_npu_segment", graph=graph, step=2, severity="error",
        title=f"{graph}: {len(hits)} op(s) without a QNN implementation inside NPU segments" + (f" (C4-fused: {', '.join(c4)})" if c4 else ""),
        evidence=[e for _, e in hits[:20]] + ([f"… {len(hits) - 20} more"] if len(hits) > 20 else []),
        consequence=("compilefornpu prints 'MNN_QNN: Not registered type N' (for a BinaryOp of an untranslated kind: "
                     "'Not supported Binary type.') and runs the op on CPU, but no copy is "
                     "inserted across the boundary; the next QNN op misses the tensor map and bakes that tensor as a "
                     "constant: SIGSEGV in QnnFloatToHalf when its host buffer is null (alibaba/MNN#4716), silently "
                     "wrong constants otherwise."),
        remedy=remedy,
        how_to_see=f"`{command_line(['llm-check', folder.dir])}` lists them; in a compilefornpu log look for 'Not registered type' "
                   "and 'Tensor usage is 0.' just before the crash",
        sources=[r.cite() for r in (S.REGISTER_QNN_OPS, S.NOT_REGISTERED, S.NO_COPY_IN_CONVERT, S.MAP_MISS_BAKES, S.BREAK_OPS,
                                    S.NPU_SUPPORT, S.C4_OFF_FOR_NPU)]
        + ([r.cite() for r in (S.QNN_BINARY_TYPES, S.MUL_SILU_FUSE)] if fused_binary else []))]


def slice_refused(op_inputs: int, extra: OpExtras | None) -> str | None:
    """Why MNN's QNN StridedSlice creator declines this op (QNNStridedSlice.cpp:219-234), or None when it accepts it."""
    if extra is None or extra.slice_from is None:
        return None
    if extra.slice_from == 1 and op_inputs != 5:
        return f"an ONNX slice (fromType 1) with {op_inputs} inputs: MNN's QNN StridedSlice takes it only with 5 (steps given)"
    if extra.slice_from == 0 and (op_inputs != 4 or extra.slice_masks):
        return (f"a TF strided slice (fromType 0) with {op_inputs} inputs" + (" and a new-axis/ellipsis mask" if extra.slice_masks else "")
                + ": MNN's QNN StridedSlice takes it only with 4 inputs and neither mask")
    return None


def _refused(model: MnnModel, extras: MnnExtras, part: Partition, folder: ExportFolder,
             graph: str = "llm.mnn") -> list[Finding]:
    """Ops that have a QNN creator which declines their form: compilefornpu's silent failed conversion."""
    skipped = set(part.folded) | dead_ops(model)
    hits: list[str] = []
    for seg in part.npu_segments:
        for p in seg.ops:
            op = model.ops[p]
            if p in skipped or op.type_name != "StridedSlice":
                continue
            why = slice_refused(len(op.inputs), extras.ops.get(p))
            if why:
                out = model.tensor_names[op.outputs[0]] if op.outputs and 0 <= op.outputs[0] < len(model.tensor_names) else op.name
                hits.append(f"op {p} {op.name!r} (output {out!r}): StridedSlice (OpType {op.type_id}), {why}; NPU segment {seg.index}")
    if not hits:
        return []
    return [Finding(
        id="qnn_refused_op_in_npu_segment", graph=graph, step=2, severity="error",
        title=f"{graph}: {len(hits)} op(s) MNN's QNN backend refuses in the form the export wrote them",
        evidence=hits[:20] + ([f"… {len(hits) - 20} more"] if len(hits) > 20 else []),
        consequence=("compilefornpu prints \"MNN_QNN: Don't support type 91, <op>.\" and 'StaticModule resize failed', "
                     f"yet exits 0 and writes a qnn/{graph} with no graph: the conversion failed silently (MNN2QNNModel "
                     "fails later, in qnn-model-lib-generator)"),
        remedy=("export the ONNX Slices with their steps input (torch.onnx writes data, starts, ends, axes, steps; add a "
                f"constant steps of ones to 4-input Slices), convert to {graph} again and re-run generate_llm_qnn.py"),
        how_to_see=f"`{command_line(['llm-check', folder.dir])}` lists them; in a compilefornpu log look for "
                   "\"Don't support type\" and 'StaticModule resize failed'",
        sources=[r.cite() for r in (S.SLICE_INPUTS, S.REFUSED, S.RESIZE_FAILED)])]


def _int_quant(model: MnnModel, extras: MnnExtras, folder: ExportFolder, graph: str = "llm.mnn") -> list[Finding]:
    ints = integer_tensors(model, extras)
    hits = [(i, ints[i], e) for i, e in extras.encodings.items() if i in ints]
    if not hits:
        return []
    consumers: dict[int, list[str]] = {}
    for op in model.ops:
        for i in op.inputs:
            consumers.setdefault(i, []).append(f"{op.type_name} {op.name}")
    ev = [f"{model.tensor_name(i)!r} ({why}) has a {e.dtype} encoding scale={e.scale:g} zero={e.zero:g}; read by "
          f"{', '.join(consumers.get(i, ['nothing'])[:2])}" for i, why, e in hits[:20]]
    return [Finding(
        id="quant_on_integer_tensor", graph=graph, step=3, severity="error",
        title=f"{graph}: activation quantization on {len(hits)} integer tensor(s) (position ids / Gather indices / shapes)",
        evidence=ev,
        consequence=("the QNN backend turns any tensor with a quant attribute into a quantized type whatever its dtype "
                     "(int32 index tensors become UFIXED_16/SFIXED_8); QNN rejects that on Gather/rotary inputs at "
                     "context-binary generation: 'validateOpConfig failed 3110' / 0xc26."),
        remedy=("re-run the smooth/omni export with the fix of alibaba/MNN#4765 (keeps integer index/shape tensors and "
                "Gather indices outside activation quantization; pending upstream), or drop these entries from "
                "extraTensorDescribe in the model's JSON and convert it back"),
        how_to_see=(f"`{command_line(['llm-check', folder.dir])}`; with an MNN build, MNNDump2Json on {graph} shows them as "
                    "extraTensorDescribe entries with a quantInfo on these tensor indexes"),
        sources=[r.cite() for r in (S.PROPAGATE_QUANT, S.ONACQUIRE_QUANT)])]


def _mul_encoding(model: MnnModel, extras: MnnExtras, folder: ExportFolder) -> list[Finding]:
    out: list[Finding] = []
    ev: list[str] = []
    for op in model.ops:
        x = extras.ops.get(op.position)
        if x is None or x.arith not in ("MUL", "PROD") or not op.outputs or op.outputs[0] not in extras.encodings:
            continue
        oenc = extras.encodings[op.outputs[0]]
        for k, i in enumerate(op.inputs):
            ienc: TensorEncoding | None = extras.encodings.get(i)
            if ienc is not None and ienc.same_as(oenc):
                kind = "SwiGLU gate*up" if re.search(r"mlp|ffn|feed_forward", op.name) else "Mul"
                ev.append(f"{kind} {op.name!r}: output {model.tensor_name(op.outputs[0])!r} reuses input {k} "
                          f"{model.tensor_name(i)!r}'s encoding (scale={oenc.scale:g}, zero={oenc.zero:g}, "
                          f"{oenc.dtype}: represents [{(oenc.min - oenc.zero) * oenc.scale:.3g}, {(oenc.max - oenc.zero) * oenc.scale:.3g}])")
                break
    if ev:
        out.append(Finding(
            id="mul_output_shares_operand_encoding", step=4, severity="error",
            title=f"{len(ev)} Mul output(s) quantized with an operand's encoding",
            evidence=ev[:20],
            consequence=("a product spans roughly the product of its operands' ranges; with one operand's scale the "
                         "output saturates INT16/UINT16 and the hidden states are clipped every layer: fluent-looking "
                         "but wrong or garbled text on the phone, while CPU is fine."),
            remedy=("re-export with the fix of alibaba/MNN#4765 (gives the Mul output its own calibrated encoding), or "
                    "remove the output's quantInfo so the Mul runs in float"),
            how_to_see=(f"`{command_line(['llm-check', folder.dir])}`; on the phone it shows as text that diverges from the CPU "
                        "reference (the llm-text command gives the first divergent token)"),
            sources=[r.cite() for r in (S.BINARY_QUANT, S.ONACQUIRE_QUANT)]))
    return out


def _settings_findings(st: ExportSettings, folder: ExportFolder, model: MnnModel, extras: MnnExtras) -> list[Finding]:
    out: list[Finding] = []
    if st.generate_for_npu is False:
        out.append(Finding(id="export_not_for_npu", step=2, severity="warning",
                           title="export_args.json says the folder was exported without --generate_for_npu",
                           evidence=["export_args.json: generate_for_npu = false"],
                           consequence=("C4 fusion stays on (RoPE/FusedLinear/GatedRMSNorm ops QNN lacks) and smooth quant "
                                        "encodes Convolution ops only"),
                           remedy=_rerun_hint(folder), sources=[S.C4_OFF_FOR_NPU.cite(), S.LAYER_SCOPE.cite()]))
    sym16 = [e for e in extras.encodings.values() if e.dtype == "int16" and e.zero == 0]
    if sym16 and len(sym16) == len(extras.encodings):
        out.append(Finding(id="symmetric_int16_activations", step=4, severity="warning",
                           title=f"all {len(sym16)} 16-bit activation encodings are symmetric (zero = 0)",
                           evidence=[f"export_args act_sym = {folder.export_args.get('act_sym')}" if folder.export_args
                                     else "every quantInfo has zero = 0"],
                           consequence=("MNN maps INT16 to unsigned UFIXED_16 with offset = zero, so the range is "
                                        "[0, 65535*scale] and negative activations would clip (inferred from source, "
                                        "not measured on a device)"),
                           remedy="export without --act_sym (asymmetric activations are llmexport's default)",
                           sources=[S.SYM_ZERO.cite(), S.INT16_OFFSET.cite()]))
    cfg_mask, model_mask = st.attention_mask_config, st.attention_mask_model
    if model_mask is not None:
        used = cfg_mask or "int"
        model_kind = "float" if model_mask.startswith("float") else "int"
        if used != model_kind:
            out.append(Finding(
                id="attention_mask_dtype", step=1, severity="error",
                title=f"generate_llm_qnn.py would feed a {used} attention_mask to a model whose input is {model_mask}",
                evidence=[f"llm_config.json attention_mask = {cfg_mask!r}" if cfg_mask else "llm_config.json has no attention_mask (default 'int')",
                          f"llm.mnn input attention_mask dtype = {model_mask}"],
                consequence=("generateIO writes test inputs of the wrong type: measured on a host MNN build, it keeps the "
                             "model's float mask and writes the int mask's bit patterns into it (e.g. 7e-45 where a float "
                             "mask holds 0.0), and compilefornpu still builds the graphs: nothing fails, but "
                             "compilefornpu's NPU-vs-CPU check runs on that mask and says nothing about the real one"),
                remedy=f"set \"attention_mask\": \"{model_kind}\" in {Path(folder.dir) / 'llm_config.json'}",
                sources=[S.MASK_DEFAULT.cite(), S.CHUNK_CONFIGS.cite()]))
    if st.kv_limit > 0:
        has_lin = any(op.type_name == "LinearAttention" for op in model.ops)
        cfg = folder.config_qnn or folder.config or {}
        max_all = int(cfg.get("max_all_tokens", 2048)) if str(cfg.get("max_all_tokens", 2048)).isdigit() else 2048
        short = max_all > st.kv_limit
        out.append(Finding(
            id="kv_limit", step=2 if has_lin else 4, severity="warning" if has_lin or short else "info",
            title=f"KVCACHE_SIZE_LIMIT = {st.kv_limit} ({st.kv_limit_source}): KV Attention runs inside the QNN graph",
            evidence=[f"{sum(op.type_name == 'Attention' for op in model.ops)} Attention op(s)"]
            + (["LinearAttention present (no QNN creator)"] if has_lin else [])
            + ([f"the runtime allows max_all_tokens = {max_all} (> the limit): longer contexts stop with 'KV length "
                f"<n> larger than max size = {st.kv_limit}'"] if short else []),
            consequence=("every op becomes NPU-eligible, KV caches become QNN graph state with max_length = the limit; "
                         "LinearAttention then sits in an NPU segment without a QNN creator"),
            remedy="use --max_history_token 0 (KV Attention and LinearAttention stay on CPU as break ops)",
            sources=[S.NPU_SUPPORT.cite(), S.KV_LIMIT_ARG.cite()]))
    out += _family_findings(st, folder)
    return out


def _family_findings(st: ExportSettings, folder: ExportFolder) -> list[Finding]:
    path = script_path(folder)
    mt = (st.model_type or "").lower()
    is_35 = mt.startswith("qwen3_5")
    is_vl = mt in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")
    name_35 = "Qwen3.5" in path
    name_vl = "Qwen" in path and "VL" in path
    problems = []
    if is_35 != name_35:
        problems.append(f"model_type {st.model_type!r} but the path {'contains' if name_35 else 'lacks'} 'Qwen3.5'")
    if is_vl != name_vl and not is_35:
        problems.append(f"model_type {st.model_type!r} but the path {'contains' if name_vl else 'lacks'} both 'Qwen' and 'VL'")
    if not problems or not mt:
        return []
    return [Finding(
        id="family_from_folder_name", step=1, severity="error",
        title="generate_llm_qnn.py would guess the wrong model family from this folder's path",
        evidence=[*problems, f"path: {path}" + (f" (a link to {folder.dir})" if path != folder.dir else "")],
        consequence=("the IO config gets the wrong position_ids / attention_mask shapes (3-row M-RoPE ids, deepstack "
                     "input, 5-D masks): generateIO or compilefornpu fails, or the graphs are built for the wrong shapes"),
        remedy=("rename (or symlink) the folder so its path states the family as generate_llm_qnn.py expects "
                "('Qwen3.5' for qwen3_5, 'Qwen' and 'VL' for Qwen-VL), or make sure it contains neither for a text-only model; "
                "the script reads its --model string as typed, so pass it that path (a relative '.' names nothing)"),
        sources=[S.FAMILY_GUESS.cite()])]


def _qnn_findings(q: QnnOutputs, st: ExportSettings, part: Partition) -> list[Finding]:
    out: list[Finding] = []
    bad = [t for t in q.testdirs if not (t.has_input and t.has_output) or t.problem]
    if bad:
        out.append(Finding(id="testdir_incomplete", step=2, severity="error",
                           title=f"{len(bad)} generateIO test dir(s) lack input.mnn/output.mnn",
                           evidence=[f"testdir/{t.name}: input.mnn {'ok' if t.has_input else 'missing'}, output.mnn "
                                     f"{'ok' if t.has_output else 'missing'}" + (f" ({t.problem})" if t.problem else "") for t in bad],
                           consequence="compilefornpu stops with 'Failed to load test inputs/outputs' (exit 1): 'compilefornpu failed'",
                           remedy="re-run generate_llm_qnn.py; Step1 (generateIO) must finish first",
                           sources=[S.CHUNK_CONFIGS.cite()]))
    for t in q.testdirs:
        shape = t.inputs.get("input_ids")
        if shape and st.hidden_size and shape[-1] != st.hidden_size:
            out.append(Finding(id="testdir_hidden_mismatch", step=2, severity="error",
                               title=f"testdir/{t.name} input_ids width {shape[-1]} ≠ hidden_size {st.hidden_size}",
                               evidence=[f"testdir/{t.name}/input.mnn input_ids {shape}"],
                               consequence="the QNN graphs are compiled for another model's shapes",
                               remedy="delete the cache dir and re-run generate_llm_qnn.py against this folder",
                               sources=[S.CHUNK_CONFIGS.cite()]))
        mask = t.input_dtypes.get("attention_mask")
        if mask and st.attention_mask_model and (mask.startswith("float") != st.attention_mask_model.startswith("float")):
            out.append(Finding(id="testdir_mask_dtype", step=2, severity="error",
                               title=f"testdir/{t.name} attention_mask is {mask}, the model expects {st.attention_mask_model}",
                               evidence=[f"testdir/{t.name}/input.mnn attention_mask dtype {mask}"],
                               consequence="the mask baked into or fed to the QNN graphs has the wrong type",
                               remedy="set attention_mask in llm_config.json to the model's type and re-run",
                               sources=[S.MASK_DEFAULT.cite()]))
    merges = list(((q.postreat or {}).get("merge") or {}).keys())
    missing = [m for m in merges if Path(m).name not in q.bins]
    if merges and missing and q.bins:
        out.append(Finding(id="context_binaries_missing", step=3, severity="error",
                           title=f"{len(missing)} of {len(merges)} QNN context binaries were not produced",
                           evidence=[f"npu_postreat.json expects {Path(m).name}" for m in missing[:10]],
                           consequence="Step3 (npu_convert.py / qnn-context-binary-generator) failed for these graphs — look for 3110/0xc26",
                           remedy="run llm-check's quantization checks above; fix them and re-run generate_llm_qnn.py",
                           sources=[S.GRAPHS_PER_SEGMENT.cite()]))
    if q.compiled_problem:
        out.append(Finding(id="compiled_model_empty", step=2, severity="error",
                           title=f"compilefornpu's {Path(q.compiled_model or 'llm.mnn').name} holds no graph: the conversion failed",
                           evidence=[f"{q.compiled_model}: {q.compiled_problem}"],
                           consequence=("compilefornpu exits 0 even when MNN's QNN backend refused an op ('Don't support type N', "
                                        "then 'StaticModule resize failed'): nothing was converted and llm_demo has no model to run"),
                           remedy=("read compilefornpu's output for \"Don't support type\" (`qnn-debug triage` on it names the op); "
                                   "fix the refused op (see the findings above) and re-run generate_llm_qnn.py"),
                           sources=[S.REFUSED.cite(), S.RESIZE_FAILED.cite()]))
    if not (q.compiled_model or q.testdirs or q.bins or q.qnn_json or q.input_json or q.postreat):
        out.append(Finding(id="qnn_dir_unrecognised", severity="warning",
                           title=f"{q.dir} holds none of generate_llm_qnn.py's outputs",
                           evidence=["no qnn.json, testdir/, npu_postreat.json, llm.mnn or qnn/llm.mnn"],
                           remedy="pass its --cache_path folder (kept after a failure) or the model's qnn/ folder"))
    npu = len(part.npu_segments)
    if merges and npu and len(merges) != npu:
        out.append(Finding(id="segment_count_differs", severity="info",
                           title=f"compilefornpu made {len(merges)} NPU graph(s), this check predicts {npu}",
                           evidence=[f"npu_postreat.json merge keys: {len(merges)}", f"predicted NPU segments: {npu}"],
                           consequence="the KV limit or MNN version used differs from what this check assumed",
                           remedy="pass --max-history-token with the value you used",
                           sources=[S.GRAPHS_PER_SEGMENT.cite(), S.BREAK_OPS.cite()]))
    return out


def _config_qnn_findings(folder: ExportFolder) -> list[Finding]:
    """config_qnn.json (written by generate_llm_qnn.py Step 4) must point at files that exist."""
    cq = folder.config_qnn
    if cq is None:
        return []
    root = Path(folder.dir)
    missing = [f"{key} = {cq[key]!r}" for key in ("llm_model", "llm_weight")
               if isinstance(cq.get(key), str) and not (root / cq[key]).exists()]
    bins = sorted(p.name for p in (root / "qnn").glob("graph*.bin")) if (root / "qnn").is_dir() else []
    if (root / "qnn").is_dir() and not bins:
        missing.append("qnn/ holds no graph*.bin context binaries")
    limits = cq.get("chunk_limits")
    ev = list(missing)
    if isinstance(limits, list) and len(limits) == 2 and limits[1] != 1:
        ev.append(f"chunk_limits = {limits} (generate_llm_qnn.py writes [chunk_size, 1])")
    if not ev:
        return []
    return [Finding(id="config_qnn_inconsistent", step=4, severity="error",
                    title="config_qnn.json points at files or shapes the folder does not have",
                    evidence=ev, consequence="llm_demo config_qnn.json fails to load or runs graphs of other shapes",
                    remedy="re-run generate_llm_qnn.py Step 4 (it moves qnn/ into the model folder and writes config_qnn.json)",
                    sources=[S.CHUNK_CONFIGS.cite(), S.GRAPHS_PER_SEGMENT.cite()])]


def check_llm_export(request: LlmCheckRequest) -> LlmCheckResult:
    """Read the folder, model the NPU partition, and return every finding (errors first)."""
    folder = read_export(request.export_dir)
    model = read_mnn_model(folder.model_path)
    extras = read_mnn_extras(folder.model_path)
    qnn = read_qnn_outputs(request.qnn_dir) if request.qnn_dir else None
    kv = _kv_limit(request, qnn)
    part = partition(model, extras, kv[0])
    st = _settings(folder, model, extras, kv)
    findings = (_unregistered(model, extras, part, folder) + _refused(model, extras, part, folder) + _int_quant(model, extras, folder)
                + _mul_encoding(model, extras, folder) + _settings_findings(st, folder, model, extras))
    if not folder.weight_present and extras.external_refs:
        findings.append(Finding(id="weight_file_missing", step=1, severity="error", title="llm.mnn.weight is missing",
                                evidence=[f"{extras.external_refs} op(s) of llm.mnn keep their weights in the external "
                                          "weight file", f"files: {', '.join(folder.files[:12])}"],
                                consequence="the LLM runtime refuses to load ('LLM weight file not found') and generateIO has no weights",
                                remedy="copy the export's llm.mnn.weight next to llm.mnn (re-export if lost)"))
    visual: VisualSummary | None = None
    io_rows: list[IoRow] = []
    if is_vl(folder):
        visual, io_rows, vl_found = _check_visual(folder, model, request, kv[0])
        findings += vl_found
    if qnn is not None:
        findings += _qnn_findings(qnn, st, part)
    findings += _config_qnn_findings(folder)
    order = {"error": 0, "warning": 1, "info": 2}
    findings.sort(key=lambda f: (f.step if f.step is not None else len(STEPS) + 1, order[f.severity]))
    segs = [SegmentSummary(index=s.index, npu=s.npu, ops=len(s.ops), first_op=model.ops[s.ops[0]].name,
                           last_op=model.ops[s.ops[-1]].name, first_op_index=s.ops[0], last_op_index=s.ops[-1])
            for s in part.segments if s.ops]
    return LlmCheckResult(export_dir=folder.dir, model=folder.model_path, ops=len(model.ops), settings=st,
                          segments=segs, findings=findings, qnn_outputs=qnn, visual=visual, io_config=io_rows)


def _check_visual(folder: ExportFolder, llm: MnnModel, request: LlmCheckRequest,
                  kv_limit: int) -> tuple[VisualSummary | None, list[IoRow], list[Finding]]:
    """A VL export's encoder through the same op and encoding checks as llm.mnn, then the VL-only checks."""
    sizes = parse_image_sizes(request.image_sizes) if request.image_sizes else []
    path = visual_model_path(folder)
    if not path.is_file():
        rows, _, found = vl_findings(folder, llm, None, sizes)
        return None, rows, [visual_missing(folder, path), *found]
    visual = read_mnn_model(path)
    extras = read_mnn_extras(path)
    part = partition(visual, extras, kv_limit)
    found = (_unregistered(visual, extras, part, folder, path.name) + _refused(visual, extras, part, folder, path.name)
             + _int_quant(visual, extras, folder, path.name))
    rows, seqs, vl_found = vl_findings(folder, llm, visual, sizes)
    summary = VisualSummary(model=str(path), ops=len(visual.ops), inputs={i.name: list(i.shape) for i in visual.inputs},
                            outputs=list(visual.output_names), npu_segments=len(part.npu_segments),
                            segments=len(part.segments), image_sizes=sizes or DEFAULT_IMAGE_SIZES, vision_seq=seqs)
    return summary, rows, found + vl_found
