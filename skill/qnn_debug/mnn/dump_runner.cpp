// qnn-debug's own runner for the host target: one forward pass of an .mnn model on MNN's QNN backend (online
// graph) with QNN's intermediate-tensor dump switched on, which ModuleBasic cannot do.
//
// Usage: qnn-debug-mnn-runner MODEL.mnn SPEC OUT_DIR [FORWARD_TYPE] [PRECISION] [DUMP]
//   SPEC: tab-separated lines written by qnn_debug.mnn.host_runner:
//     input<TAB>name<TAB>file<TAB>rank<TAB>d0<TAB>d1...   (file: raw little-endian float32, row-major)
//     output<TAB>name
//   OUT_DIR: gets <index>.f32 per output and outputs.tsv (name, file, rank, dims), written after the forward.
//   The dump folder is MNN_QNN_DUMP_DIR (set by the caller). FORWARD_TYPE defaults to 5 (MNN_FORWARD_NN),
//   PRECISION to 2 (Precision_Low), DUMP to 1 (BackendConfig.flags = MNN_QNN_DUMP_INTERMEDIATE_OUTPUTS).
// Exit codes: 0 done, 2 bad arguments or spec, 3 the module did not load, 4 the forward pass returned nothing,
//   5 an output could not be written. Every line of ours starts with "qnn-debug-runner:"; MNN prints its own.
// Written for qnn-debug against MNN's public Module API (include/MNN/expr/Module.hpp).

#include <MNN/MNNForwardType.h>
#include <MNN/expr/Executor.hpp>
#include <MNN/expr/ExecutorScope.hpp>
#include <MNN/expr/ExprCreator.hpp>
#include <MNN/expr/Module.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace MNN;
using namespace MNN::Express;

namespace {

struct InputSpec {
    std::string name;
    std::string file;
    std::vector<int> dims;
};

std::vector<std::string> splitTabs(const std::string& line) {
    std::vector<std::string> parts;
    std::string part;
    std::istringstream in(line);
    while (std::getline(in, part, '\t')) {
        parts.push_back(part);
    }
    return parts;
}

bool readSpec(const char* path, std::vector<InputSpec>& inputs, std::vector<std::string>& outputs) {
    std::ifstream in(path);
    if (!in) {
        std::printf("qnn-debug-runner: cannot open spec %s\n", path);
        return false;
    }
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) {
            continue;
        }
        auto parts = splitTabs(line);
        if (parts[0] == "output" && parts.size() == 2) {
            outputs.push_back(parts[1]);
        } else if (parts[0] == "input" && parts.size() >= 4) {
            InputSpec spec{parts[1], parts[2], {}};
            int rank = std::atoi(parts[3].c_str());
            if (rank < 0 || static_cast<size_t>(rank) + 4 != parts.size()) {
                std::printf("qnn-debug-runner: bad input line in spec: %s\n", line.c_str());
                return false;
            }
            for (int i = 0; i < rank; ++i) {
                spec.dims.push_back(std::atoi(parts[4 + i].c_str()));
            }
            inputs.push_back(spec);
        } else {
            std::printf("qnn-debug-runner: bad spec line: %s\n", line.c_str());
            return false;
        }
    }
    return !inputs.empty() && !outputs.empty();
}

bool readFloats(const std::string& file, float* dst, size_t count) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
        return false;
    }
    in.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(count * sizeof(float)));
    return static_cast<size_t>(in.gcount()) == count * sizeof(float);
}

}  // namespace

int main(int argc, char* argv[]) {
    std::setvbuf(stdout, nullptr, _IONBF, 0);  // a crash must not take MNN's last lines with it
    std::setvbuf(stderr, nullptr, _IONBF, 0);
    if (argc < 4) {
        std::printf("qnn-debug-runner: usage: %s MODEL.mnn SPEC OUT_DIR [FORWARD_TYPE] [PRECISION] [DUMP]\n", argv[0]);
        return 2;
    }
    const std::string model = argv[1];
    const std::string outDir = argv[3];
    const int forward = argc > 4 ? std::atoi(argv[4]) : static_cast<int>(MNN_FORWARD_NN);
    const int precision = argc > 5 ? std::atoi(argv[5]) : static_cast<int>(BackendConfig::Precision_Low);
    const bool dump = argc > 6 ? std::atoi(argv[6]) != 0 : true;
    std::vector<InputSpec> specs;
    std::vector<std::string> outputNames;
    if (!readSpec(argv[2], specs, outputNames)) {
        std::printf("qnn-debug-runner: the spec names no inputs or no outputs\n");
        return 2;
    }

    BackendConfig cpuConfig;
    auto executor = Executor::newExecutor(MNN_FORWARD_CPU, cpuConfig, 1);
    ExecutorScope scope(executor);

    ScheduleConfig config;
    config.type = static_cast<MNNForwardType>(forward);
    config.backupType = config.type;  // no silent fallback: a refused backend must fail, not run on CPU
    config.numThread = 1;
    BackendConfig backendConfig;
    backendConfig.precision = static_cast<BackendConfig::PrecisionMode>(precision);
    if (dump) {
        backendConfig.flags = MNN_QNN_DUMP_INTERMEDIATE_OUTPUTS;
    }
    config.backendConfig = &backendConfig;
    std::shared_ptr<Executor::RuntimeManager> runtime(Executor::RuntimeManager::createRuntimeManager(config));
    if (runtime == nullptr) {
        std::printf("qnn-debug-runner: no runtime for forward type %d\n", forward);
        return 3;
    }

    Module::Config moduleConfig;
    moduleConfig.shapeMutable = false;  // QNN online needs the inputs copied into its buffers
    std::vector<std::string> inputNames;
    for (auto& s : specs) {
        inputNames.push_back(s.name);
    }
    std::shared_ptr<Module> net(Module::load(inputNames, outputNames, model.c_str(), runtime, &moduleConfig));
    if (net == nullptr) {
        std::printf("qnn-debug-runner: the module did not load: %s\n", model.c_str());
        return 3;
    }
    auto info = net->getInfo();
    std::vector<VARP> inputs(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
        auto order = NCHW;
        halide_type_t type = halide_type_of<float>();
        if (info != nullptr && i < info->inputs.size()) {
            order = info->inputs[i].order == NC4HW4 ? NCHW : info->inputs[i].order;
            type = info->inputs[i].type;
        }
        auto floats = _Input(specs[i].dims, order, halide_type_of<float>());
        auto floatInfo = floats->getInfo();
        if (!readFloats(specs[i].file, floats->writeMap<float>(), floatInfo->size)) {
            std::printf("qnn-debug-runner: input %s: %s holds fewer than %zu float32 values\n", specs[i].name.c_str(),
                        specs[i].file.c_str(), static_cast<size_t>(floatInfo->size));
            return 2;
        }
        inputs[i] = type == halide_type_of<float>() ? floats : _Cast(floats, type);
        if (info != nullptr && i < info->inputs.size() && info->inputs[i].order == NC4HW4) {
            inputs[i] = _Convert(inputs[i], NC4HW4);
        }
    }
    std::printf("qnn-debug-runner: forward type %d, precision %d, dump %d, %zu input(s)\n", forward, precision,
                dump ? 1 : 0, inputs.size());
    auto outputs = net->onForward(inputs);
    if (outputs.empty()) {
        std::printf("qnn-debug-runner: the forward pass returned no outputs\n");
        return 4;
    }
    std::ofstream table(outDir + "/outputs.tsv");
    for (size_t i = 0; i < outputs.size() && i < outputNames.size(); ++i) {
        auto v = outputs[i];
        auto vInfo = v->getInfo();
        if (vInfo == nullptr) {
            std::printf("qnn-debug-runner: output %s has no value\n", outputNames[i].c_str());
            continue;
        }
        if (vInfo->order == NC4HW4 && vInfo->dim.size() > 1) {
            v = _Convert(v, info != nullptr ? info->defaultFormat : NCHW);
        }
        if (vInfo->type.code != halide_type_float || vInfo->type.bits != 32) {
            v = _Cast<float>(v);
        }
        auto outInfo = v->getInfo();
        const float* data = v->readMap<float>();
        if (outInfo == nullptr || data == nullptr) {
            std::printf("qnn-debug-runner: output %s could not be read\n", outputNames[i].c_str());
            continue;
        }
        const std::string file = std::to_string(i) + ".f32";
        std::ofstream out(outDir + "/" + file, std::ios::binary);
        out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(outInfo->size * sizeof(float)));
        if (!out) {
            std::printf("qnn-debug-runner: cannot write %s/%s\n", outDir.c_str(), file.c_str());
            return 5;
        }
        table << outputNames[i] << '\t' << file << '\t' << outInfo->dim.size();
        for (auto d : outInfo->dim) {
            table << '\t' << d;
        }
        table << '\n';
    }
    table.close();
    if (!table) {
        std::printf("qnn-debug-runner: cannot write %s/outputs.tsv\n", outDir.c_str());
        return 5;
    }
    std::printf("qnn-debug-runner: done\n");
    return 0;
}
