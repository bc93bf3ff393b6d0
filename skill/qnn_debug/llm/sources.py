"""Where in MNN each llm-check finding comes from (file:line at the commit the table was read at).

Read against alibaba/MNN at ``4d40bdb``; when a line moves upstream only this table changes.
"""

from __future__ import annotations

from pydantic import BaseModel

MNN_COMMIT = "4d40bdb"


class SourceRef(BaseModel):
    """One place in MNN's source, and what it shows."""

    file: str
    lines: str
    shows: str

    def cite(self) -> str:
        return f"alibaba/MNN@{MNN_COMMIT} {self.file}:{self.lines}"


def _ref(file: str, lines: str, shows: str) -> SourceRef:
    return SourceRef(file=file, lines=lines, shows=shows)


REGISTER_QNN_OPS = _ref("source/backend/qnn/backend/QNNUtils.cpp", "115-160",
                        "registerQNNOps: the only OpTypes with a QNN creator")
NOT_REGISTERED = _ref("source/backend/qnn/backend/QNNBackend.cpp", "1621-1627",
                      "an op without a creator prints 'MNN_QNN: Not registered type N' and runs on CPU")
QNN_BINARY_TYPES = _ref("source/backend/qnn/execution/QNNBinary.cpp", "175-210",
                        "the QNN BinaryOp creator translates 18 operations; any other (e.g. the converter's fused "
                        "MUL_SILU) prints 'MNN_QNN: Not supported Binary type.' and the op runs on CPU")
MUL_SILU_FUSE = _ref("tools/converter/source/optimizer/postconvert/FuseTransformerC4.cpp", "fuseMulSilu",
                     "the converter's transformer C4 pass (on by default, --transformerFuseC4) fuses silu(gate) * up "
                     "into one BinaryOp MUL_SILU")
NO_COPY_IN_CONVERT = _ref("source/core/WrapExecution.cpp", "22",
                          "needWrap is false for backend types >= MNN_CONVERT_QNN: no copy across the boundary")
MAP_MISS_BAKES = _ref("source/backend/qnn/backend/QNNBackend.cpp", "2094-2111",
                      "getTensorIdx map miss: the tensor is baked as a static constant (float via createStaticFloatTensor)")
BREAK_OPS = _ref("tools/cpp/compilefornpu.cpp", "103-115", "isBreakOp: If/While/Where/Segment/Unique/NMS and !_npuSupportOp")
NPU_SUPPORT = _ref("tools/cpp/compilefornpu.cpp", "87-101",
                   "_npuSupportOp: KVCACHE_SIZE_LIMIT > 0 makes every op NPU-eligible; else KV Attention and LinearAttention break")
NO_CONV_STAYS_CPU = _ref("tools/cpp/compilefornpu.cpp", "1732-1742", "a sub-module without a Convolution stays on CPU")
MASK_BREAKS = _ref("tools/cpp/compilefornpu.cpp", "179-307", "ops between attention_mask and a break Attention also break")
C4_OFF_FOR_NPU = _ref("transformers/llm/export/llmexport.py", "1067-1068",
                      "--generate_for_npu forces transformer_c4=False (since alibaba/MNN#4752)")
PROPAGATE_QUANT = _ref("transformers/llm/export/utils/smooth_quantizer.py", "614-698",
                       "_propagate_quant_info copies 16-bit encodings through Cast/Slice/Concat/Reshape/Gather")
BINARY_QUANT = _ref("transformers/llm/export/utils/smooth_quantizer.py", "704-740",
                    "BinaryOp: the output's encoding is pushed back to the inputs (or an input's forward)")
ONACQUIRE_QUANT = _ref("source/backend/qnn/backend/QNNBackend.cpp", "1738-1779",
                       "onAcquire turns any tensor with a quantAttr into SFIXED_8/UFIXED_16, int32 included")
INT16_OFFSET = _ref("source/backend/qnn/backend/QNNBackend.cpp", "1768-1775", "INT16 becomes UFIXED_16 with offset = zero")
SYM_ZERO = _ref("transformers/llm/export/utils/smooth_quantizer.py", "495-500", "16-bit symmetric activations get zero = 0")
ACT_FLAGS = _ref("transformers/llm/export/llmexport.py", "1025-1027, 1034, 1050-1052",
                 "--smooth/--omni exclusive; --sym is for weights, --act_bit/--act_sym for activations")
LAYER_SCOPE = _ref("transformers/llm/export/utils/smooth_quantizer.py", "759-790",
                   "only inputs[0]/outputs[0] of ops named (blocks|layers).N are quantized; lm_head skipped")
MASK_DEFAULT = _ref("transformers/llm/export/npu/generate_llm_qnn.py", "358-373",
                    "the IO config's attention_mask type comes from llm_config.json, default 'int'")
FAMILY_GUESS = _ref("transformers/llm/export/npu/generate_llm_qnn.py", "92-129, 137-166",
                    "the model family is guessed from the --model path string ('Qwen3.5', 'Qwen'+'VL')")
KV_LIMIT_ARG = _ref("transformers/llm/export/npu/generate_llm_qnn.py", "222-231",
                    "--max_history_token becomes KVCACHE_SIZE_LIMIT in qnn.json")
CHUNK_CONFIGS = _ref("transformers/llm/export/npu/generate_llm_qnn.py", "49-91",
                     "two IO configs: prefill [chunk_size] with logits_index 0, decode [1] with -1")
GRAPHS_PER_SEGMENT = _ref("tools/cpp/compilefornpu.cpp", "1755-1776", "graphs = NPU segments x shape configs")
SLICE_INPUTS = _ref("source/backend/qnn/execution/QNNStridedSlice.cpp", "219-234",
                    "the StridedSlice creator declines an ONNX slice without 5 inputs, a TF one without 4")
REFUSED = _ref("source/backend/qnn/backend/QNNBackend.cpp", "1630-1637",
               "a creator that declines: 'MNN_QNN: Don't support type N, <op>.' and no execution")
RESIZE_FAILED = _ref("express/module/StaticModule.cpp", "698",
                     "'StaticModule resize failed before input copy': the forward gives up, the tool goes on")

# --- vision-language exports (Qwen3-VL) ---------------------------------------------------------------------------
VL_LLM_IO = _ref("transformers/llm/export/npu/generate_llm_qnn.py", "107-130",
                 "makeIOJson: with 'Qwen' and 'VL' in --model, position_ids becomes [3, seq] and deepstack_embeds [3, 1, 1] "
                 "is added to both configs")
VL_VISUAL_IO = _ref("transformers/llm/export/npu/generate_llm_qnn.py", "134-180",
                    "makeVLIOJson: one config per --image_sizes WxH; 'Qwen3' in --model: 32-px alignment, 16-px patches, "
                    "inputs patches/position_ids/attention_mask/idx_tensor/weight_tensor, outputs ['image_embeds'] only; "
                    "a name without Qwen2.5-VL/Qwen3/FastVLM raises 'Unsupported visual model'")
VL_CONVERT_VISUAL = _ref("transformers/llm/export/npu/generate_llm_qnn.py", "222-240, 327-356",
                         "convert_visual: --model_name visual.mnn, --image_sizes parsed as WxH; graph_name graphvisual")
GENERATEIO_NAMES = _ref("tools/cpp/generateIO.cpp", "78-125",
                        "generateIO loads the module with exactly the config's input and output names")
VISUAL_MODEL_DEFAULT = _ref("transformers/llm/engine/src/llmconfig.hpp", "134-135",
                            "visual_model defaults to visual.mnn next to the config")
HAS_DEEPSTACK = _ref("transformers/llm/engine/src/llmconfig.hpp", "348-349", "has_deepstack comes from llm_config.json")
LLM_DEEPSTACK_INPUT = _ref("transformers/llm/engine/src/llm.cpp", "398-404",
                           "with has_deepstack the runtime loads llm.mnn with a deepstack_embeds input")
TEXT_DEEPSTACK = _ref("transformers/llm/engine/src/omni.cpp", "511-512",
                      "without an image the runtime feeds deepstack_embeds as zeros [3, 1, 1]")
VISUAL_LOAD = _ref("transformers/llm/engine/src/omni.cpp", "570-580",
                   "is_visual: visual_model is loaded with its own inputs and outputs; a failed load stops the LLM")
QWEN3VL_DETECT = _ref("transformers/llm/engine/src/omni.cpp", "743-744",
                      "the runtime treats the encoder as Qwen3-VL (16-px patches, idx/weight tensors) only when it has 5 "
                      "inputs with idx_tensor 4th")
IMAGE_RESIZE = _ref("transformers/llm/engine/src/omni.cpp", "761-767",
                    "each image is resized to multiples of patch*merge within image_min_pixels..image_max_pixels "
                    "(Qwen3-VL defaults 65536..16777216)")
DEEPSTACK_OUTPUT = _ref("transformers/llm/engine/src/omni.cpp", "950-954",
                        "deepstack features are taken only when the visual model returns two outputs")
