// Whole-model decode and prefill on one GPU: a Llama-3-8B-shaped model (hidden 4096, 32 layers,
// 32 heads / 8 KV heads of 128, intermediate 14336, vocab 128256, rope theta 500000, untied head)
// with random weights written on the device in their final format (bf16; fp8 codes with per-row
// scales; packed int4 with g128 f16 scales; GGUF Q8_0, Q4_K or Q6_K blocks of random bytes with
// sane f16 scales, as a .gguf file of that type loads: every linear of one type, lm_head too),
// driven through graph::Executor with the engine's passes, as the runtime runs it. Measures,
// each run median of --reps:
//   - decode tokens/s at every --batches size after a --context-token prefill, over --steps
//     timed steps (each sequence has its own block table and writes its own KV rows);
//   - the bytes one decode step streams (every byte the linear nodes read: weights and scales,
//     the lm_head included; one embedding row per token; the K and V rows attention reads) as a
//     fraction of a device-to-device cudaMemcpy measured in the same run (2 x bytes / time:
//     a copy reads and writes every byte);
//   - prefill tokens/s for 1 and 4 prompts of --prompt tokens in one forward.
// Decode steps are replayed as CUDA graphs, as the runtimes run them (graph/executor.h);
// --no-cuda-graphs launches them node by node. With graphs on, batches up to 8 are also timed
// without them ("tokens_per_s_no_graphs"): what the graphs save there is the launch overhead.
// A configuration whose weights, KV pools or activations do not fit in device memory is skipped
// and reported as such. --device cpu runs the same driving code on the CPU backend (for checking
// the bench where no GPU is; its figures say nothing about a GPU).
//
// Usage: bench_cuda_decode [--quick] [--json FILE] [--formats bf16,fp8,int4,q8_0,q4_k,q6_k]
//                          [--kv bf16,int4]
//                          [--batches 1,8,32,128] [--context N] [--steps N] [--prompt N]
//                          [--reps N] [--device cuda|cpu] [--no-cuda-graphs]
// Exits 77 with "no CUDA device visible" when there is none, 1 when a configuration failed for
// a reason other than memory, 2 on bad usage.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/bench_args.h"
#include "bench/bench_cuda_decode.h"
#include "engine/core/cuda_stream.h"
#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/core/tensor.h"
#include "engine/graph/executor.h"
#include "engine/graph/passes/passes.h"
#include "engine/loaders/hf_config.h"
#include "engine/models/llama.h"
#include "engine/ops/op_registry.h"
#include "kernels/common/ggml_type.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
constexpr int64_t kBlockSize = 16;        // the engine's default (runtime/engine.h)
constexpr int64_t kMaxChunkTokens = 2048;  // the largest prefill forward of the decode runs
constexpr int64_t kInt4Group = 128;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Left free beyond the sums we can compute: cuBLASLt workspaces, the int4 prefill's bf16 chunks,
// attention scratch, the CUDA context's own growth.
constexpr double kHeadroomBytes = 2 * kGiB;

// The GGUF block type of a --formats name (q8_0, q4_k, q6_k), if it is one.
std::optional<GgmlType> ggml_format(const std::string& f) {
  if (f == "q8_0") return GgmlType::kQ8_0;
  if (f == "q4_k") return GgmlType::kQ4_K;
  if (f == "q6_k") return GgmlType::kQ6_K;
  return std::nullopt;
}

struct Options {
  bool quick = false;
  std::string json_path;
  std::vector<std::string> formats = {"bf16", "fp8", "int4"};
  std::vector<std::string> kv = {"bf16", "int4"};
  std::vector<int64_t> batches = {1, 8, 32, 128};
  int64_t context = 128;
  int64_t steps = 64;
  int64_t prompt = 2048;
  int reps = 3;
  Device device = Device::cuda(0);
  bool cuda_graphs = true;
};

// false on a bad argument (message printed).
bool parse_options(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      // The smoke shape's run lengths; flags given explicitly below still win.
      o->quick = true;
      o->batches = {1, 8};
      o->context = 32;
      o->steps = 16;
      o->prompt = 256;
    }
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    try {
      if (a == "--quick") continue;
      if (a == "--no-cuda-graphs") {
        o->cuda_graphs = false;
        continue;
      }
      if (a == "--json" && has_value) o->json_path = argv[++i];
      else if (a == "--formats" && has_value) o->formats = split_list(argv[++i]);
      else if (a == "--kv" && has_value) o->kv = split_list(argv[++i]);
      else if (a == "--batches" && has_value) {
        o->batches.clear();
        for (const std::string& b : split_list(argv[++i])) o->batches.push_back(std::stoll(b));
      } else if (a == "--context" && has_value) o->context = std::stoll(argv[++i]);
      else if (a == "--steps" && has_value) o->steps = std::stoll(argv[++i]);
      else if (a == "--prompt" && has_value) o->prompt = std::stoll(argv[++i]);
      else if (a == "--reps" && has_value) o->reps = std::stoi(argv[++i]);
      else if (a == "--device" && has_value) {
        const std::string d = argv[++i];
        if (d != "cuda" && d != "cpu") throw std::invalid_argument(d);
        o->device = d == "cpu" ? Device::cpu() : Device::cuda(0);
      } else {
        std::fprintf(stderr, "bench_cuda_decode: unknown or incomplete argument '%s'\n", a.c_str());
        return false;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "bench_cuda_decode: bad value for %s\n", a.c_str());
      return false;
    }
  }
  for (const std::string& f : o->formats) {
    if (f != "bf16" && f != "fp8" && f != "int4" && !ggml_format(f)) {
      std::fprintf(stderr,
                   "bench_cuda_decode: unknown weight format '%s' (bf16, fp8, int4, q8_0, q4_k, "
                   "q6_k)\n",
                   f.c_str());
      return false;
    }
  }
  for (const std::string& k : o->kv) {
    KvDtype d;
    if (!parse_kv_dtype(k.c_str(), &d)) {
      std::fprintf(stderr, "bench_cuda_decode: unknown KV format '%s'\n", k.c_str());
      return false;
    }
  }
  const bool bad_batch = std::any_of(o->batches.begin(), o->batches.end(),
                                     [](int64_t b) { return b < 1; });
  if (o->formats.empty() || o->kv.empty() || bad_batch || o->context < 1 || o->steps < 1 ||
      o->prompt < 1 || o->reps < 1) {
    std::fprintf(stderr, "bench_cuda_decode: lists must be non-empty and sizes positive\n");
    return false;
  }
  return true;
}

HfConfig model_config(bool quick) {
  // The quick shape keeps every ratio of the real one (GQA 4:1, head_dim 64+, untied head) so
  // the same kernels and paths run, small enough to build and run in seconds.
  const char* text = quick ? R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 512,
      "intermediate_size": 1792, "num_hidden_layers": 4, "num_attention_heads": 8,
      "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 8192,
      "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
      "hidden_act": "silu", "tie_word_embeddings": false})"
                           : R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
      "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
      "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
      "hidden_act": "silu", "tie_word_embeddings": false})";
  return parse_hf_config(text, quick ? "bench:quick-llama" : "bench:llama-3-8b-shaped");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- device memory and random fills ---------------------------------------------------------

double free_device_bytes(Device device) {
  if (device.type != DeviceType::kCUDA) return 1e30;  // the CPU path checks nothing
  size_t free = 0, total = 0;
  check_cuda(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return static_cast<double>(free);
}

// Fills a freshly made tensor. On the GPU the kernels of bench_cuda_decode.cu (queued on the
// legacy stream; make_model synchronises before any executor runs); on the CPU a host loop.
class Filler {
 public:
  explicit Filler(Device device) : device_(device) {}

  // t: any shape; bf16 uniform in [-a, a].
  void bf16(const Tensor& t, float a) {
    if (cuda()) return check(fill_bf16_uniform(t.raw(), n(t), a, next_seed(), nullptr));
    std::uniform_real_distribution<float> u(-a, a);
    auto* p = t.data<uint16_t>();
    for (size_t i = 0; i < n(t); ++i) {
      const float f = u(rng_);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      p[i] = static_cast<uint16_t>(bits >> 16);  // truncation: any nearby value will do
    }
  }
  // t: FP8 E4M3 codes spanning the format's range.
  void fp8(const Tensor& t) {
    if (cuda()) return check(fill_fp8_e4m3_uniform(t.raw(), n(t), next_seed(), nullptr));
    bytes(t);
    auto* p = t.data<uint8_t>();
    for (size_t i = 0; i < n(t); ++i) {
      if ((p[i] & 0x7f) == 0x7f) p[i] ^= 1;  // 0x7f / 0xff are NaN in E4M3
    }
  }
  // t: raw bytes (packed int4 codes) uniform.
  void bytes(const Tensor& t) {
    const size_t nb = static_cast<size_t>(t.nbytes());
    if (cuda()) return check(fill_random_bytes(t.raw(), nb, next_seed(), nullptr));
    auto* p = t.data<uint8_t>();
    for (size_t i = 0; i < nb; ++i) p[i] = static_cast<uint8_t>(rng_());
  }
  // t: u8 blocks of `stride` bytes: the f16 at byte `offset` of each set to about `value`.
  void f16_field(const Tensor& t, int64_t stride, int64_t offset, float value) {
    const size_t count = static_cast<size_t>(t.nbytes() / stride);
    if (cuda()) {
      return check(fill_f16_strided(t.raw(), count, static_cast<size_t>(stride),
                                    static_cast<size_t>(offset), value, nullptr));
    }
    const uint16_t bits = pow2_f16(value);
    for (size_t i = 0; i < count; ++i) std::memcpy(t.data<uint8_t>() + i * stride + offset, &bits, 2);
  }
  // t: f32 or f16, every element `value`.
  void constant(const Tensor& t, float value) {
    if (t.dtype() == DType::kF32) {
      if (cuda()) return check(fill_f32(t.raw(), n(t), value, nullptr));
      std::fill_n(t.data<float>(), n(t), value);
      return;
    }
    if (cuda()) return check(fill_f16(t.raw(), n(t), value, nullptr));
    // Only the f16 scales of int4 reach here.
    std::fill_n(t.data<uint16_t>(), n(t), pow2_f16(value));
  }
  // The f16 bits of the power of two at or below `value` (a normal f16): exact, and any nearby
  // value will do.
  static uint16_t pow2_f16(float value) {
    const int e = static_cast<int>(std::floor(std::log2(value)));
    return static_cast<uint16_t>((e + 15) << 10);
  }

 private:
  bool cuda() const { return device_.type == DeviceType::kCUDA; }
  static size_t n(const Tensor& t) { return static_cast<size_t>(t.numel()); }
  static void check(cudaError_t e) { check_cuda(e, "random weight fill"); }
  uint64_t next_seed() { return ++seed_ * 0x9e3779b97f4a7c15ull; }

  Device device_;
  uint64_t seed_ = 0;
  std::mt19937 rng_{1234};
};

// ---- the model ------------------------------------------------------------------------------

struct Model {
  models::LlamaWeights weights;
  std::string format;
  double linear_bytes = 0;         // every byte the linear nodes read per forward
  double embedding_row_bytes = 0;  // what one token's embedding lookup reads
};

// Bytes of one linear of the format (weight and scales), for the memory check and the roofline.
double linear_bytes(const std::string& format, int64_t out, int64_t in) {
  const double n = static_cast<double>(out) * static_cast<double>(in);
  if (const auto t = ggml_format(format)) {
    return static_cast<double>(out) * static_cast<double>(ggml_row_bytes(*t, in));
  }
  if (format == "bf16") return 2 * n;
  if (format == "fp8") return n + 4.0 * static_cast<double>(out);
  return n / 2 + 2.0 * static_cast<double>(out) * static_cast<double>(in / kInt4Group);
}

double model_bytes(const HfConfig& c, const std::string& format) {
  const int64_t d = c.hidden_size, f = c.intermediate_size;
  const double layer = linear_bytes(format, c.q_dim(), d) + 2 * linear_bytes(format, c.kv_dim(), d) +
                       linear_bytes(format, d, c.q_dim()) + 2 * linear_bytes(format, f, d) +
                       linear_bytes(format, d, f);
  return static_cast<double>(c.n_layer) * layer + linear_bytes(format, c.vocab_size, d) +
         2.0 * static_cast<double>(c.vocab_size * d);  // + the bf16 embedding table
}

models::Linear make_linear(Filler& fill, const std::string& format, int64_t out, int64_t in,
                           Device device, double* bytes) {
  // Uniform weights of variance 1 / in keep each linear's output near its input's size, so
  // every value stays finite through 32 layers (timing does not depend on the values).
  const float a = std::sqrt(3.0f / static_cast<float>(in));
  models::Linear l;
  if (format == "bf16") {
    l.weight = Tensor::empty({out, in}, DType::kBF16, device);
    fill.bf16(l.weight, a);
  } else if (format == "fp8") {
    l.weight = Tensor::empty({out, in}, DType::kF8E4M3, device);
    fill.fp8(l.weight);
    l.scales = Tensor::empty({out}, DType::kF32, device);
    fill.constant(l.scales, a / 448.0f);
  } else if (const auto t = ggml_format(format)) {
    // Random codes (and Q4_K's 6-bit sub-block scales and mins, Q6_K's int8 ones); the f16
    // super-block scales set so that weights stay near +-a.
    const int64_t block = ggml_type_size(*t);
    l.weight = Tensor::empty({out, ggml_row_bytes(*t, in)}, DType::kU8, device);
    l.ggml_type = *t;
    fill.bytes(l.weight);
    if (*t == GgmlType::kQ8_0) {
      fill.f16_field(l.weight, block, 0, a / 127.0f);  // d
    } else if (*t == GgmlType::kQ4_K) {
      fill.f16_field(l.weight, block, 0, a / (63.0f * 15.0f));  // d
      fill.f16_field(l.weight, block, 2, a / (63.0f * 15.0f));  // dmin
    } else {
      fill.f16_field(l.weight, block, 208, a / (127.0f * 32.0f));  // Q6_K d
    }
  } else {
    l.weight = Tensor::empty({out, in}, DType::kI4, device);
    fill.bytes(l.weight);
    l.scales = Tensor::empty({out, in / kInt4Group}, DType::kF16, device);
    fill.constant(l.scales, std::exp2(std::round(std::log2(a / 8.0f))));
    l.group_size = kInt4Group;
  }
  *bytes += static_cast<double>(l.weight.nbytes() + (l.scales.defined() ? l.scales.nbytes() : 0));
  return l;
}

Model make_model(const HfConfig& c, const std::string& format, Device device) {
  Filler fill(device);
  Model m;
  m.format = format;
  const int64_t d = c.hidden_size, f = c.intermediate_size;
  models::LlamaWeights& w = m.weights;
  w.tok_embd = Tensor::empty({c.vocab_size, d}, DType::kBF16, device);
  fill.bf16(w.tok_embd, 0.05f);
  m.embedding_row_bytes = 2.0 * static_cast<double>(d);
  // Norm weights are small f32 vectors on the host: the executor uploads each distinct one once.
  const Tensor ones = Tensor::from_f32({d}, std::vector<float>(static_cast<size_t>(d), 1.0f));
  w.output_norm = ones;
  w.layers.resize(static_cast<size_t>(c.n_layer));
  for (models::LlamaLayerWeights& l : w.layers) {
    l.attn_norm = ones;
    l.ffn_norm = ones;
    l.attn.q = make_linear(fill, format, c.q_dim(), d, device, &m.linear_bytes);
    l.attn.k = make_linear(fill, format, c.kv_dim(), d, device, &m.linear_bytes);
    l.attn.v = make_linear(fill, format, c.kv_dim(), d, device, &m.linear_bytes);
    l.attn.o = make_linear(fill, format, d, c.q_dim(), device, &m.linear_bytes);
    l.gate = make_linear(fill, format, f, d, device, &m.linear_bytes);
    l.up = make_linear(fill, format, f, d, device, &m.linear_bytes);
    l.down = make_linear(fill, format, d, f, device, &m.linear_bytes);
  }
  // The engine quantizes an untied lm_head with the other linears (models/llama.cc).
  w.output = make_linear(fill, format, c.vocab_size, d, device, &m.linear_bytes);
  // The fills ran on the legacy stream; the executor's stream does not wait for it.
  if (device.type == DeviceType::kCUDA) check_cuda(cudaDeviceSynchronize(), "weight fills");
  return m;
}

// ---- running the graph ----------------------------------------------------------------------

// One graph (weights + KV format) and its executor, with KV pools for a set of sequences.
class ModelRun {
 public:
  ModelRun(const HfConfig& c, const Model& m, KvDtype kv, Device device)
      : config_(c), kv_(kv), device_(device), graph_(build(c, m, kv)),
        executor_(graph_, runner_, device) {
    row_ = kv == KvDtype::kF32 ? c.kv_dim() : sampan::kv_row_bytes(kv, c.n_head_kv, c.head_dim);
    row_bytes_ = kv == KvDtype::kF32 ? 4 * row_ : row_;
  }

  // Bytes of one token's K or V row in one layer.
  int64_t kv_row_bytes() const { return row_bytes_; }

  double pool_bytes(int64_t n_seqs, int64_t max_tokens) const {
    return 2.0 * static_cast<double>(config_.n_layer * n_seqs * blocks_per_seq(max_tokens) *
                                     kBlockSize * row_bytes_);
  }

  // Fresh pools for n_seqs sequences of up to max_tokens tokens each; sequence s owns blocks
  // [s * mb, (s + 1) * mb). The old pools are freed first.
  void reset_cache(int64_t n_seqs, int64_t max_tokens) {
    const int64_t mb = blocks_per_seq(max_tokens);
    const DType pool_type = kv_ == KvDtype::kF32 ? DType::kF32 : DType::kI8;
    for (int64_t l = 0; l < config_.n_layer; ++l) {
      for (const char* which : {"k_cache", "v_cache"}) {
        const std::string name = fmt::format("{}.{}", which, l);
        inputs_.erase(name);
        // Never read before written: attention writes each token's row before reading it.
        inputs_[name] = Tensor::empty({n_seqs * mb, kBlockSize, row_}, pool_type, device_);
      }
    }
    std::vector<int32_t> table(static_cast<size_t>(n_seqs * mb));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    inputs_["block_tables"] = Tensor::from_i32({n_seqs, mb}, table);
  }

  // One forward over the given tokens (sequence, position); logits for `logit_rows`. Seconds.
  // `recurring`: a decode step, replayed as a CUDA graph when graphs are on.
  double forward(const std::vector<int32_t>& seqs, const std::vector<int32_t>& positions,
                 const std::vector<int32_t>& logit_rows, bool recurring = false) {
    const auto t = static_cast<int64_t>(seqs.size());
    std::vector<int32_t> ids(seqs.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      // Any valid token: the weights are random, so is the text.
      ids[i] = static_cast<int32_t>((seqs[i] * 7919LL + positions[i] * 104729LL) % config_.vocab_size);
    }
    inputs_["ids"] = Tensor::from_i32({t}, ids);
    inputs_["positions"] = Tensor::from_i32({t}, positions);
    inputs_["seq_ids"] = Tensor::from_i32({t}, seqs);
    inputs_["logit_rows"] =
        Tensor::from_i32({static_cast<int64_t>(logit_rows.size())}, logit_rows);
    const Clock::time_point t0 = Clock::now();
    executor_.run(inputs_, recurring);  // synchronises the stream: the step is done on return
    return seconds_since(t0);
  }

  // Prefills positions [0, len) of sequences [0, n_seqs), as many sequences per forward as fit
  // in kMaxChunkTokens (at least one). Untimed.
  void prefill(int64_t n_seqs, int64_t len) {
    const int64_t per = std::max<int64_t>(1, kMaxChunkTokens / len);
    for (int64_t s0 = 0; s0 < n_seqs; s0 += per) {
      std::vector<int32_t> seqs, pos, rows;
      for (int64_t s = s0; s < std::min(n_seqs, s0 + per); ++s) {
        for (int64_t p = 0; p < len; ++p) {
          seqs.push_back(static_cast<int32_t>(s));
          pos.push_back(static_cast<int32_t>(p));
        }
        rows.push_back(static_cast<int32_t>(seqs.size() - 1));
      }
      forward(seqs, pos, rows);
    }
  }

  // One decode step: every sequence's token at `position`. Seconds.
  double decode_step(int64_t n_seqs, int64_t position) {
    std::vector<int32_t> seqs(static_cast<size_t>(n_seqs)), pos(seqs.size(), static_cast<int32_t>(position));
    for (size_t s = 0; s < seqs.size(); ++s) seqs[s] = static_cast<int32_t>(s);
    return forward(seqs, pos, seqs, true);  // every sequence samples: rows 0 .. n_seqs-1
  }

  void set_cuda_graphs(bool on) { executor_.set_cuda_graphs(on); }
  const graph::Executor::GraphStats& graph_stats() const { return executor_.graph_stats(); }

  const graph::passes::PassReport& passes() const { return pass_report_; }

 private:
  graph::Graph build(const HfConfig& c, const Model& m, KvDtype kv) {
    models::ModelBuildOptions options;
    options.kv_cache_dtype = kv;
    graph::Graph g = models::build_llama_graph(c, m.weights, options);
    pass_report_ = graph::passes::optimize(g);  // as runtime::CausalLm and Engine do
    return g;
  }

  // A power of two, as the engine pads block tables (runtime/engine.cc).
  static int64_t blocks_per_seq(int64_t max_tokens) {
    int64_t mb = 1;
    while (mb * kBlockSize < max_tokens) mb *= 2;
    return mb;
  }

  const HfConfig& config_;
  KvDtype kv_;
  Device device_;
  graph::passes::PassReport pass_report_;  // set while graph_ is built, so declared first
  graph::Graph graph_;
  cpu::SerialRunner runner_;  // no CPU kernel runs on the GPU path
  graph::Executor executor_;
  std::map<std::string, Tensor> inputs_;
  int64_t row_ = 0, row_bytes_ = 0;
};

// ---- measurements ---------------------------------------------------------------------------

// Median GB/s of a large device-to-device copy, counting 2 x bytes (each byte read and written):
// the bandwidth a kernel that streams its data can expect.
double copy_bandwidth_gbps(Device device, bool quick) {
  const int reps = 10;
  std::vector<double> gbps;
  if (device.type != DeviceType::kCUDA) {
    const size_t bytes = size_t{64} << 20;
    std::vector<char> a(bytes, 1), b(bytes);
    for (int r = 0; r < reps; ++r) {
      const Clock::time_point t0 = Clock::now();
      std::memcpy(b.data(), a.data(), bytes);
      gbps.push_back(2.0 * static_cast<double>(bytes) / seconds_since(t0) / 1e9);
    }
    return median(gbps);
  }
  // Far larger than L2 (50 MB on H100) so the copy streams from HBM.
  const size_t bytes = quick ? size_t{256} << 20 : size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  check_cuda(cudaMalloc(&a, bytes), "copy probe: cudaMalloc");
  check_cuda(cudaMalloc(&b, bytes), "copy probe: cudaMalloc");
  check_cuda(cudaMemset(a, 1, bytes), "copy probe: cudaMemset");
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "copy probe: stream");
  check_cuda(cudaEventCreate(&e0), "copy probe: event");
  check_cuda(cudaEventCreate(&e1), "copy probe: event");
  for (int r = 0; r < reps + 2; ++r) {
    check_cuda(cudaEventRecord(e0, stream), "copy probe: record");
    check_cuda(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream), "copy probe: copy");
    check_cuda(cudaEventRecord(e1, stream), "copy probe: record");
    check_cuda(cudaEventSynchronize(e1), "copy probe: sync");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, e0, e1), "copy probe: elapsed");
    if (r >= 2) gbps.push_back(2.0 * static_cast<double>(bytes) / (ms / 1e3) / 1e9);  // 2 warm-ups
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(stream);
  cudaFree(a);
  cudaFree(b);
  return median(gbps);
}

// A generous bound on the activation bytes per token of a forward (f32 residual, norms, Q/K/V,
// attention output, the SwiGLU intermediate twice), to skip a run that cannot fit before trying.
double activation_bytes_per_token(const HfConfig& c) {
  return 4.0 * static_cast<double>(4 * c.hidden_size + c.q_dim() + 2 * c.kv_dim() +
                                   2 * c.intermediate_size);
}

// Throws Error(kOutOfMemory) with the figures when `need` bytes (plus headroom) are not free.
void require_memory(Device device, double need, const std::string& what) {
  const double free = free_device_bytes(device);
  if (need + kHeadroomBytes > free) {
    fail(ErrorCode::kOutOfMemory, "{} needs about {:.1f} GiB (+{:.0f} GiB headroom), {:.1f} GiB free",
         what, need / kGiB, kHeadroomBytes / kGiB, free / kGiB);
  }
}

json measure_decode(ModelRun& run, const HfConfig& c, const Model& m, const std::string& kv,
                    int64_t batch, const Options& o, double copy_gbps) {
  const int64_t max_tokens = o.context + 1 + o.steps;
  const int64_t chunk = std::max(o.context, std::min(kMaxChunkTokens, batch * o.context));
  require_memory(o.device,
                 run.pool_bytes(batch, max_tokens) +
                     static_cast<double>(chunk) * activation_bytes_per_token(c),
                 fmt::format("decode at batch {}", batch));
  run.reset_cache(batch, max_tokens);
  // Median seconds of o.steps decode steps, over o.reps prefilled runs.
  auto time_steps = [&](bool graphs) {
    run.set_cuda_graphs(graphs);
    std::vector<double> secs;
    for (int r = 0; r < o.reps; ++r) {
      run.prefill(batch, o.context);
      // Untimed: the first step of a shape plans memory, the second records its graph.
      run.decode_step(batch, o.context);
      run.decode_step(batch, o.context);
      const Clock::time_point t0 = Clock::now();
      for (int64_t s = 0; s < o.steps; ++s) run.decode_step(batch, o.context + 1 + s);
      secs.push_back(seconds_since(t0));
    }
    return secs;
  };
  const int64_t failures_before = run.graph_stats().failures;
  const std::vector<double> secs = time_steps(o.cuda_graphs);
  // Graphs exist on a CUDA device only; a shape that could not be recorded ran node by node.
  const bool graphs = o.cuda_graphs && o.device.type == DeviceType::kCUDA &&
                      run.graph_stats().failures == failures_before;
  std::optional<double> no_graphs_sec;
  if (graphs && batch <= 8) no_graphs_sec = median(time_steps(false));
  run.set_cuda_graphs(o.cuda_graphs);
  // The step at position p reads the K and V rows of positions 0 .. p in every layer.
  double kv_rows = 0;
  for (int64_t s = 0; s < o.steps; ++s) kv_rows += static_cast<double>(o.context + 2 + s);
  const double kv_bytes = static_cast<double>(batch * c.n_layer * 2 * run.kv_row_bytes()) * kv_rows;
  const double per_step_fixed = m.linear_bytes + static_cast<double>(batch) * m.embedding_row_bytes;
  const double total = static_cast<double>(o.steps) * per_step_fixed + kv_bytes;
  const double sec = median(secs);
  const double gbps = total / sec / 1e9;
  json r = {{"weights", m.format},
          {"kv", kv},
          {"batch", batch},
          {"context", o.context},
          {"steps", o.steps},
          {"tokens_per_s", static_cast<double>(batch * o.steps) / sec},
          {"ms_per_step", sec / static_cast<double>(o.steps) * 1e3},
          {"weight_bytes", m.linear_bytes},
          {"kv_bytes_per_step", kv_bytes / static_cast<double>(o.steps)},
          {"bytes_per_step", total / static_cast<double>(o.steps)},
          {"achieved_gbps", gbps},
          {"fraction_of_copy", gbps / copy_gbps},
          {"cuda_graphs", graphs},
          {"rep_seconds", secs}};
  if (no_graphs_sec) {
    r["tokens_per_s_no_graphs"] = static_cast<double>(batch * o.steps) / *no_graphs_sec;
  }
  return r;
}

json measure_prefill(ModelRun& run, const HfConfig& c, const std::string& format,
                     int64_t n_prompts, const Options& o) {
  const int64_t tokens = n_prompts * o.prompt;
  require_memory(o.device,
                 run.pool_bytes(n_prompts, o.prompt) +
                     static_cast<double>(tokens) * activation_bytes_per_token(c),
                 fmt::format("prefill of {} x {} tokens", n_prompts, o.prompt));
  run.reset_cache(n_prompts, o.prompt);
  std::vector<int32_t> seqs, pos, rows;
  for (int64_t s = 0; s < n_prompts; ++s) {
    for (int64_t p = 0; p < o.prompt; ++p) {
      seqs.push_back(static_cast<int32_t>(s));
      pos.push_back(static_cast<int32_t>(p));
    }
    rows.push_back(static_cast<int32_t>(seqs.size() - 1));  // each prompt's last token
  }
  run.forward(seqs, pos, rows);  // plans memory for this shape: untimed
  std::vector<double> secs;
  for (int r = 0; r < o.reps; ++r) secs.push_back(run.forward(seqs, pos, rows));
  const double sec = median(secs);
  return {{"weights", format},
          {"prompts", n_prompts},
          {"prompt_len", o.prompt},
          {"tokens_per_s", static_cast<double>(tokens) / sec},
          {"ms", sec * 1e3},
          {"rep_seconds", secs}};
}

// ---- device set-up --------------------------------------------------------------------------

json describe_device(Device device) {
  if (device.type != DeviceType::kCUDA) return {{"name", "cpu"}};
  cudaDeviceProp p{};
  check_cuda(cudaGetDeviceProperties(&p, device.index), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return {{"name", p.name},
          {"memory_gib", static_cast<double>(p.totalGlobalMem) / kGiB},
          {"compute_capability", fmt::format("{}.{}", p.major, p.minor)},
          {"multiprocessors", p.multiProcessorCount},
          {"l2_bytes", p.l2CacheSize},
          {"cuda_driver", driver},
          {"cuda_runtime", runtime}};
}

int run_bench(const Options& o) {
  const HfConfig config = model_config(o.quick);
  json out;
  if (o.device.type == DeviceType::kCUDA) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::printf("bench_cuda_decode: no CUDA device visible\n");
      return 77;
    }
    cuda_set_device(o.device.index);
  }
  out["device"] = describe_device(o.device);
  out["quick"] = o.quick;
  out["model"] = {{"name", o.quick ? "llama-shaped smoke model" : "llama-3-8b-shaped"},
                  {"hidden", config.hidden_size},
                  {"layers", config.n_layer},
                  {"heads", config.n_head},
                  {"kv_heads", config.n_head_kv},
                  {"head_dim", config.head_dim},
                  {"intermediate", config.intermediate_size},
                  {"vocab", config.vocab_size},
                  {"block_size", kBlockSize}};
  const double copy_gbps = copy_bandwidth_gbps(o.device, o.quick);
  out["copy_gbps"] = copy_gbps;
  out["decode"] = json::array();
  out["prefill"] = json::array();
  out["skipped"] = json::array();
  out["errors"] = json::array();
  std::printf("%s on %s; device-to-device copy %.1f GB/s\n",
              out["model"]["name"].get<std::string>().c_str(),
              out["device"]["name"].get<std::string>().c_str(), copy_gbps);

  auto save = [&] {
    if (o.json_path.empty()) return;
    std::ofstream f(o.json_path);
    f << out.dump(2) << "\n";
  };
  // Runs one measurement; running out of memory skips it, any other error is recorded.
  auto attempt = [&](const std::string& what, const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      const bool oom = e.code() == ErrorCode::kOutOfMemory;
      out[oom ? "skipped" : "errors"].push_back({{"what", what}, {"why", e.what()}});
      std::printf("%s %s: %s\n", oom ? "skipped" : "FAILED", what.c_str(), e.what());
    } catch (const std::exception& e) {
      out["errors"].push_back({{"what", what}, {"why", e.what()}});
      std::printf("FAILED %s: %s\n", what.c_str(), e.what());
    }
    save();
  };

  for (const std::string& format : o.formats) {
    attempt(format + " model", [&] {
      require_memory(o.device, model_bytes(config, format), format + " weights");
      const Model model = make_model(config, format, o.device);
      std::printf("%s: %.2f GB read by linear nodes per forward\n", format.c_str(),
                  model.linear_bytes / 1e9);
      for (size_t ki = 0; ki < o.kv.size(); ++ki) {
        KvDtype kv;
        parse_kv_dtype(o.kv[ki].c_str(), &kv);
        const auto run = std::make_unique<ModelRun>(config, model, kv, o.device);
        for (int64_t batch : o.batches) {
          if (ki > 0 && batch != 1) continue;  // other KV formats: batch-1 decode only
          attempt(fmt::format("decode {} weights, {} KV, batch {}", format, o.kv[ki], batch), [&] {
            const json r = measure_decode(*run, config, model, o.kv[ki], batch, o, copy_gbps);
            out["decode"].push_back(r);
            std::printf("decode  %-5s KV %-5s batch %4lld: %9.1f tok/s, %7.2f ms/step, %6.1f GB/s "
                        "(%.0f %% of copy)%s%s\n",
                        format.c_str(), o.kv[ki].c_str(), static_cast<long long>(batch),
                        r["tokens_per_s"].get<double>(), r["ms_per_step"].get<double>(),
                        r["achieved_gbps"].get<double>(), 100 * r["fraction_of_copy"].get<double>(),
                        r["cuda_graphs"].get<bool>() ? ", CUDA graphs" : ", node by node",
                        r.contains("tokens_per_s_no_graphs")
                            ? fmt::format(" (without graphs {:.1f} tok/s)",
                                          r["tokens_per_s_no_graphs"].get<double>())
                                  .c_str()
                            : "");
          });
        }
        if (ki > 0) continue;  // prefill with the first KV format only
        for (int64_t prompts : {int64_t{1}, int64_t{4}}) {
          attempt(fmt::format("prefill {} weights, {} x {}", format, prompts, o.prompt), [&] {
            const json r = measure_prefill(*run, config, format, prompts, o);
            out["prefill"].push_back(r);
            std::printf("prefill %-5s %lld x %lld tokens: %9.1f tok/s (%.1f ms)\n", format.c_str(),
                        static_cast<long long>(prompts), static_cast<long long>(o.prompt),
                        r["tokens_per_s"].get<double>(), r["ms"].get<double>());
          });
        }
      }
    });
  }
  save();
  return out["errors"].empty() ? 0 : 1;
}

}  // namespace
}  // namespace sampan::bench

int main(int argc, char** argv) {
  sampan::bench::Options o;
  if (!sampan::bench::parse_options(argc, argv, &o)) return 2;
  sampan::log::set_level(sampan::log::Level::kWarn);
  try {
    return sampan::bench::run_bench(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_decode: %s\n", e.what());
    return 1;
  }
}
