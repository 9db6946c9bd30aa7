// The floors of the house (docs/ARCHITECTURE.md) hold: every `#include "..."` of a source file
// under kernels/, quant/, engine/, server/ and clients/ names a file of a floor that file may use.
//
//   kernels/common   value types of every backend          -> kernels/common
//   kernels/cpu      CPU kernels                            -> kernels/common, kernels/cpu
//   kernels/cuda     CUDA kernels                           -> kernels/common, kernels/cuda
//   quant/           quantization, load-time weight math    -> kernels/*, quant
//   engine/          graph, ops, loaders, models, runtime   -> kernels/*, quant, engine
//                    (loaders and models also proto/formats, the model-file schemas)
//   server/, clients/  front-ends and tools                 -> engine, proto, their own floor
//
// Inside engine/, only the code that runs kernels may name a backend's kernels: the ops
// (engine/ops), the executor and thread pool it runs on (engine/graph/executor.*,
// engine/core), the device sampler (engine/runtime/device_sampler.cc) and the CPU sampler's
// vector passes over the logits (engine/runtime/sampler.cc). Model builders,
// loaders, passes, the runtime and the C API are device-neutral: kernels/common only.
// server/main.cc, the one place that registers every subcommand, may also name clients/.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct Violation {
  std::string file;
  int line = 0;
  std::string include;
};

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

bool any_prefix(const std::string& s, const std::vector<std::string>& prefixes) {
  for (const std::string& p : prefixes) {
    if (starts_with(s, p)) return true;
  }
  return false;
}

// The floors `file` (a path relative to the source root) may include from.
std::vector<std::string> allowed_for(const std::string& file) {
  if (starts_with(file, "kernels/common/")) return {"kernels/common/"};
  if (starts_with(file, "kernels/cpu/")) return {"kernels/common/", "kernels/cpu/"};
  if (starts_with(file, "kernels/cuda/")) return {"kernels/common/", "kernels/cuda/"};
  if (starts_with(file, "quant/")) return {"kernels/", "quant/"};
  if (starts_with(file, "engine/")) {
    const bool runs_kernels =
        starts_with(file, "engine/ops/") || starts_with(file, "engine/core/") ||
        starts_with(file, "engine/graph/executor.") ||
        file == "engine/runtime/device_sampler.cc" || file == "engine/runtime/sampler.cc";
    if (runs_kernels) return {"kernels/", "quant/", "engine/"};
    // Model-file readers parse the format schemas Sampan declares (proto/formats: messages
    // only, no services); nothing else in the engine knows protobuf.
    const bool reads_files = starts_with(file, "engine/loaders/") || starts_with(file, "engine/models/");
    if (reads_files) return {"kernels/common/", "quant/", "engine/", "proto/formats/"};
    return {"kernels/common/", "quant/", "engine/"};
  }
  if (file == "server/main.cc") return {"engine/", "proto/", "server/", "clients/"};
  if (starts_with(file, "server/")) return {"engine/", "proto/", "server/"};
  if (starts_with(file, "clients/")) return {"engine/", "proto/", "clients/"};
  return {};
}

std::vector<Violation> scan(const fs::path& root) {
  static const std::regex include_re(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::vector<Violation> out;
  for (const char* floor : {"kernels", "quant", "engine", "server", "clients"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / floor)) {
      if (!entry.is_regular_file()) continue;
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cc" && ext != ".cu" && ext != ".cuh") continue;
      const std::string rel = fs::relative(entry.path(), root).generic_string();
      const std::vector<std::string> allowed = allowed_for(rel);
      std::ifstream in(entry.path());
      std::string line;
      int n = 0;
      while (std::getline(in, line)) {
        ++n;
        std::smatch m;
        if (!std::regex_search(line, m, include_re)) continue;
        const std::string inc = m[1].str();
        // A project header always names its floor ("engine/core/tensor.h"); anything else
        // (a generated protobuf header is "proto/x.pb.h") is checked against the same list.
        if (inc.find('/') == std::string::npos) continue;  // a system or sibling-less header
        if (!any_prefix(inc, allowed)) out.push_back({rel, n, inc});
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("every include respects the floors", "[layers]") {
  const fs::path root = SAMPAN_SOURCE_DIR;
  const std::vector<Violation> bad = scan(root);
  for (const Violation& v : bad) {
    UNSCOPED_INFO(v.file << ":" << v.line << ": includes \"" << v.include << "\"");
  }
  CHECK(bad.empty());
}

TEST_CASE("the floor rule itself", "[layers]") {
  // The checker must see a break where there is one: what the rule allows and refuses.
  CHECK(allowed_for("kernels/cpu/gemm_cpu.h") ==
        std::vector<std::string>{"kernels/common/", "kernels/cpu/"});
  CHECK_FALSE(any_prefix("engine/core/tensor.h", allowed_for("quant/quantize.h")));
  CHECK_FALSE(any_prefix("kernels/cpu/attention_cpu.h", allowed_for("engine/models/llama.cc")));
  CHECK(any_prefix("kernels/cpu/gemm_cpu.h", allowed_for("engine/ops/linear.cc")));
  CHECK_FALSE(any_prefix("kernels/cuda/gemm.cuh", allowed_for("kernels/cpu/gemm_cpu.cc")));
  CHECK_FALSE(any_prefix("server/commands.h", allowed_for("clients/bench_serve/cmd_bench_serve.cc")));
  CHECK_FALSE(any_prefix("quant/quantize.h", allowed_for("server/cmd_quantize.cc")));
  CHECK(any_prefix("clients/bench_serve/bench_serve_cli.h", allowed_for("server/main.cc")));
  CHECK(any_prefix("proto/formats/onnx.pb.h", allowed_for("engine/loaders/onnx_file.cc")));
  CHECK_FALSE(any_prefix("proto/formats/onnx.pb.h", allowed_for("engine/runtime/engine.cc")));
  CHECK_FALSE(any_prefix("proto/grpc_service.pb.h", allowed_for("engine/models/model.cc")));
  // Files the scan covers exist (a moved tree would make the first test vacuous).
  const fs::path root = SAMPAN_SOURCE_DIR;
  CHECK(fs::exists(root / "engine/models/llama.cc"));
  CHECK(fs::exists(root / "quant/quantize.cc"));
  CHECK(fs::exists(root / "kernels/common/kv_format.h"));
}
