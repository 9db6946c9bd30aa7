// sampan infer --model PATH --input [NAME=]FILE.npy ... --output-dir DIR: runs a classic model
// (ONNX today) once on .npy inputs and writes every output as DIR/<output name>.npy.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/npy.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/models/model.h"
#include "server/commands.h"
#include "server/op_profile.h"

namespace sampan::cli {
namespace {

namespace fs = std::filesystem;

// Output file names: characters outside [A-Za-z0-9._-] become '_' (a name like "logits:0" or
// "a/b" must not leave the directory or need quoting); "." and ".." become "_".
std::string file_stem(const std::string& name) {
  std::string s = name;
  for (char& c : s) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  if (s.empty() || s == "." || s == "..") s = "_" + s;
  return s;
}

// The .npy array as the model's input dtype: identical types pass; between i32 and i64 and
// between bool and u8 the values are converted (checked for range), since numpy's default
// integer type rarely matches a model's. Anything else is an error naming the input.
Tensor as_input_dtype(const Tensor& t, DType want, const std::string& name, const std::string& file) {
  if (t.dtype() == want) return t;
  const DType have = t.dtype();
  Tensor out = Tensor::empty(t.shape(), want);
  const int64_t n = t.numel();
  if (have == DType::kI64 && want == DType::kI32) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = t.data<int64_t>()[i];
      SAMPAN_CHECK(v >= INT32_MIN && v <= INT32_MAX, ErrorCode::kInvalidArgument,
                   "{}: input '{}': value {} at index {} does not fit i32", file, name, v, i);
      out.data<int32_t>()[i] = static_cast<int32_t>(v);
    }
    return out;
  }
  if (have == DType::kI32 && want == DType::kI64) {
    for (int64_t i = 0; i < n; ++i) out.data<int64_t>()[i] = t.data<int32_t>()[i];
    return out;
  }
  if ((have == DType::kBool && want == DType::kU8) || (have == DType::kU8 && want == DType::kBool)) {
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t v = t.data<uint8_t>()[i];
      out.data<uint8_t>()[i] = want == DType::kBool ? (v != 0) : v;
    }
    return out;
  }
  fail(ErrorCode::kInvalidArgument, "{}: input '{}' takes {}, the file holds {}", file, name,
       dtype_name(want), dtype_name(have));
}

// Checks the array's rank and fixed dimensions against the signature, naming the input.
void check_shape(const models::TensorSpec& spec, const Tensor& t, const std::string& file) {
  std::vector<std::string> want;
  bool ok = static_cast<size_t>(t.rank()) == spec.shape.size();
  for (size_t d = 0; d < spec.shape.size(); ++d) {
    const graph::Dim& dim = spec.shape[d];
    want.push_back(dim.symbolic() ? dim.symbol : std::to_string(dim.size));
    if (ok && !dim.symbolic() && t.shape()[d] != dim.size) ok = false;
  }
  SAMPAN_CHECK(ok, ErrorCode::kInvalidArgument, "{}: input '{}' has shape {}, the model takes [{}]",
               file, spec.api_name, shape_str(t.shape()), fmt::join(want, ", "));
}

}  // namespace

Runner add_infer(CLI::App& app) {
  auto* cmd = app.add_subcommand("infer", "Run a classic model (ONNX) on .npy inputs");
  struct Opts {
    std::string model, output_dir, precision = "f32";
    std::vector<std::string> inputs;
    int threads = 0, repeat = 1;
    bool profile = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "model file (.onnx) or a directory holding one")->required();
  cmd->add_option("--input", o->inputs, "[NAME=]FILE.npy, once per model input (NAME may be left "
                                        "out when the model has one input)")->required();
  cmd->add_option("--output-dir", o->output_dir, "where DIR/<output name>.npy are written")->required();
  cmd->add_option("--threads", o->threads, "CPU threads (default: one per core)")->check(CLI::Range(0, 1024));
  cmd->add_option("--precision", o->precision,
                  "f32 (default), or bf16: convs and matmuls by a constant weight on "
                  "bf16-rounded inputs with f32 sums (AMX tiles where the CPU has AMX-BF16, "
                  "else vdpbf16ps where it has AVX512-BF16)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_flag("--profile", o->profile, "print the time spent per op type and the slowest nodes");
  cmd->add_option("--repeat", o->repeat, "runs; with more than one, prints the median latency")
      ->check(CLI::Range(1, 100000));
  return [o] {
    models::LoadOptions load;
    SAMPAN_CHECK(models::parse_precision(o->precision, &load.precision),
                 ErrorCode::kInvalidArgument, "--precision {}: expected f32 or bf16", o->precision);
    auto model = models::load_model(o->model, load);
    SAMPAN_CHECK(!models::is_decoder_format(model->format), ErrorCode::kInvalidArgument,
                 "{}: a {} language model; `sampan infer` runs classic models (ONNX), use "
                 "`sampan run` or `sampan logits`", o->model, model->architecture);
    const auto& sig = model->signature;

    std::map<std::string, Tensor> feeds;
    for (const std::string& arg : o->inputs) {
      const models::TensorSpec* spec = nullptr;
      std::string file = arg;
      const size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        for (const auto& s : sig.inputs) {
          if (s.api_name == arg.substr(0, eq)) spec = &s;
        }
        if (spec) file = arg.substr(eq + 1);
      }
      if (!spec) {
        if (sig.inputs.size() != 1) {
          std::vector<std::string> names;
          for (const auto& s : sig.inputs) names.push_back(s.api_name);
          fail(ErrorCode::kInvalidArgument,
               "--input '{}': the model has {} inputs ({}); name each as NAME=FILE.npy", arg,
               sig.inputs.size(), fmt::join(names, ", "));
        }
        spec = &sig.inputs[0];
      }
      SAMPAN_CHECK(!feeds.count(spec->name), ErrorCode::kInvalidArgument,
                   "--input: input '{}' is given twice", spec->api_name);
      Tensor t = as_input_dtype(read_npy(file), spec->dtype, spec->api_name, file);
      check_shape(*spec, t, file);
      feeds[spec->name] = t;
    }
    for (const auto& s : sig.inputs) {
      SAMPAN_CHECK(feeds.count(s.name), ErrorCode::kInvalidArgument,
                   "--input: the model's input '{}' ({}) is not given", s.api_name, dtype_name(s.dtype));
    }

    ThreadPool pool(o->threads);
    graph::Executor exec(model->graph, pool);
    exec.set_profiling(o->profile);
    std::vector<double> ms;
    std::vector<Tensor> outputs;
    for (int r = 0; r < o->repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        outputs = exec.run(feeds);
      } catch (const Error& e) {
        fail(e.code(), "{}: {}", model->path, e.what());  // the node is named; add the file
      }
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::error_code ec;
    fs::create_directories(o->output_dir, ec);
    SAMPAN_CHECK(fs::is_directory(o->output_dir), ErrorCode::kIo,
                 "--output-dir {}: cannot create the directory: {}", o->output_dir, ec.message());
    std::set<std::string> written;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::string& name = sig.outputs[i].api_name;
      const std::string path = (fs::path(o->output_dir) / (file_stem(name) + ".npy")).string();
      SAMPAN_CHECK(written.insert(path).second, ErrorCode::kInvalidArgument,
                   "outputs '{}' and another output both map to {}", name, path);
      write_npy(path, outputs[i].contiguous());
      fmt::print("{} {}{} -> {}\n", name, dtype_name(outputs[i].dtype()), shape_str(outputs[i].shape()), path);
    }
    if (o->profile) print_op_profile(stdout, model->graph, exec.node_seconds(), o->repeat, "run");
    if (o->repeat > 1) {
      std::sort(ms.begin(), ms.end());
      fmt::print("latency: median {:.3f} ms over {} runs (min {:.3f}, max {:.3f}), {} threads\n",
                 ms[ms.size() / 2], ms.size(), ms.front(), ms.back(), pool.concurrency());
    }
    return 0;
  };
}

}  // namespace sampan::cli
