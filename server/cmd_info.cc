// sampan info --model DIR: what the model is and what it costs to run.
#include <fmt/format.h>

#include <map>
#include <set>

#include "engine/core/error.h"
#include "engine/loaders/gguf.h"
#include "engine/models/model.h"
#include "engine/models/model_options.h"
#include "engine/runtime/causal_lm.h"
#include "server/commands.h"

namespace sampan::cli {
namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", b, units[u]);
}

std::string rope_str(const RopeScaling& r) {
  std::string s = fmt::format("{} (theta {:g}", rope_type_name(r.type), r.theta);
  if (r.type != RopeType::kDefault) s += fmt::format(", factor {:g}", r.factor);
  if (r.type == RopeType::kLlama3) {
    s += fmt::format(", low/high freq factor {:g}/{:g}, original context {}", r.low_freq_factor,
                     r.high_freq_factor, r.original_max_position_embeddings);
  }
  return s + ")";
}

std::string dims_text(const std::vector<graph::Dim>& shape) {
  std::vector<std::string> parts;
  for (const graph::Dim& d : shape) parts.push_back(d.symbolic() ? d.symbol : std::to_string(d.size));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

struct WeightSummary {
  int64_t parameters = 0, total_bytes = 0;
  std::map<std::string, int64_t> bytes_by_type;  // "bf16", "Q4_K", ...
};

// A safetensors model counts its files' tensors (WeightStore); a GGUF model the graph's weight
// constants, block-quantized ones by their GGUF type (the attribute of the node reading them).
WeightSummary summarize_weights(const runtime::CausalLm& lm) {
  WeightSummary s;
  if (const auto& store = lm.model().store) {
    s.parameters = store->parameter_count();
    s.total_bytes = store->total_bytes();
    for (const auto& [dtype, bytes] : store->bytes_by_dtype()) s.bytes_by_type[dtype_name(dtype)] += bytes;
    return s;
  }
  const graph::Graph& g = lm.graph();
  std::set<const void*> seen;
  for (const graph::Node& n : g.nodes()) {
    if (n.dead) continue;
    const int64_t t = n.attrs.get_int("ggml_type", -1);
    for (graph::ValueId v : n.inputs) {
      if (v == graph::kNoValue) continue;
      const graph::Value& val = g.value(v);
      if (val.kind != graph::ValueKind::kConstant || !val.constant.defined()) continue;
      const Tensor& c = val.constant;
      if (!seen.insert(c.raw()).second) continue;  // tied and fused weights count once
      std::string type = dtype_name(c.dtype());
      int64_t elements = c.numel();
      if (c.dtype() == DType::kU8 && t >= 0) {
        const auto gt = static_cast<GgmlType>(t);
        type = ggml_type_name(gt) ? ggml_type_name(gt) : type;
        elements = c.nbytes() / ggml_type_size(gt) * ggml_block_size(gt);
      }
      s.parameters += elements;
      s.total_bytes += c.nbytes();
      s.bytes_by_type[type] += c.nbytes();
    }
  }
  return s;
}

// A classic model (ONNX): its signature, weights and graph.
int info_classic(const std::string& path, const std::string& precision) {
  models::LoadOptions load;
  SAMPAN_CHECK(models::parse_precision(precision, &load.precision), ErrorCode::kInvalidArgument,
               "--precision {}: expected f32 or bf16", precision);
  auto m = models::load_model(path, load);
  fmt::print("model:          {}\n", m->path);
  fmt::print("format:         {}\n", m->architecture);
  for (const auto& t : m->signature.inputs) {
    fmt::print("input:          {} {} {}\n", t.api_name, dtype_name(t.dtype), dims_text(t.shape));
  }
  for (const auto& t : m->signature.outputs) {
    fmt::print("output:         {} {} {}\n", t.api_name, dtype_name(t.dtype), dims_text(t.shape));
  }
  std::map<DType, int64_t> bytes;
  int64_t total = 0, params = 0;
  std::set<const void*> seen;
  for (size_t v = 0; v < m->graph.n_values(); ++v) {
    const graph::Value& val = m->graph.value(static_cast<graph::ValueId>(v));
    if (val.kind != graph::ValueKind::kConstant || !val.constant.defined()) continue;
    if (!seen.insert(val.constant.raw()).second) continue;  // shared (tied) tensors count once
    bytes[val.constant.dtype()] += val.constant.nbytes();
    total += val.constant.nbytes();
    params += val.constant.numel();
  }
  fmt::print("parameters:     {} ({:.3f} M)\n", params, static_cast<double>(params) / 1e6);
  for (const auto& [dtype, b] : bytes) {
    fmt::print("weights {:<7} {}\n", std::string(dtype_name(dtype)) + ":", human_bytes(static_cast<double>(b)));
  }
  fmt::print("weights total:  {}\n", human_bytes(static_cast<double>(total)));
  const graph::passes::PassReport& passes = m->pass_report;
  fmt::print("graph:          {} nodes after the passes\n", m->graph.nodes().size());
  fmt::print("{}", passes.table("  "));
  return 0;
}

}  // namespace

Runner add_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Describe a model: architecture, parameters, memory");
  auto model = std::make_shared<std::string>();
  auto precision = std::make_shared<std::string>();
  cmd->add_option("--model", *model, "model directory (config.json + safetensors), .gguf, .onnx or Paddle model")->required();
  cmd->add_option("--precision", *precision,
                  "classic models: the graph as `infer --precision` runs it (f32 default, bf16)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  return [model, precision] {
    if (!models::is_decoder_format(models::model_format_of(*model))) {
      return info_classic(*model, precision->empty() ? "f32" : *precision);
    }
    SAMPAN_CHECK(precision->empty(), ErrorCode::kInvalidArgument,
                 "{}: --precision is for classic models; a language model's precision is set "
                 "by its weights (`sampan quantize`) and SAMPAN_GEMM_PRECISION",
                 *model);
    runtime::CausalLmOptions opt;
    opt.threads = 1;
    opt.max_context = 1;  // info needs no cache
    auto lm = runtime::CausalLm::load(*model, opt);
    const HfConfig& c = lm->config();
    fmt::print("model:          {}\n", *model);
    fmt::print("architecture:   {}\n", model_arch_name(c.arch));
    fmt::print("layers:         {}\n", c.n_layer);
    fmt::print("hidden size:    {}\n", c.hidden_size);
    fmt::print("heads:          {} (kv heads {}, head dim {})\n", c.n_head, c.n_head_kv, c.head_dim);
    fmt::print("ffn size:       {}\n", c.intermediate_size);
    fmt::print("vocab size:     {}\n", c.vocab_size);
    fmt::print("context:        {}\n", c.max_position_embeddings);
    fmt::print("rope:           {}\n", rope_str(c.rope));
    fmt::print("tied embedding: {}\n", c.tie_word_embeddings ? "yes" : "no");
    fmt::print("biases:         q {} k {} v {} o {} mlp {}\n", c.bias_q, c.bias_k, c.bias_v,
               c.bias_o, c.bias_mlp);
    if (c.sliding_window) fmt::print("sliding window: {}\n", *c.sliding_window);
    const WeightSummary w = summarize_weights(*lm);
    const double params = static_cast<double>(w.parameters);
    fmt::print("parameters:     {} ({})\n", w.parameters,
               params >= 1e9 ? fmt::format("{:.3f} B", params / 1e9) : fmt::format("{:.3f} M", params / 1e6));
    for (const auto& [type, bytes] : w.bytes_by_type) {
      fmt::print("weights {:<7} {}\n", type + ":", human_bytes(static_cast<double>(bytes)));
    }
    fmt::print("weights total:  {} (memory-mapped)\n", human_bytes(static_cast<double>(w.total_bytes)));
    const double kv_token = 2.0 * static_cast<double>(c.n_layer * c.kv_dim()) * sizeof(float);
    fmt::print("kv cache:       {} per token (f32); {} at the full context of {}\n",
               human_bytes(kv_token), human_bytes(kv_token * static_cast<double>(c.max_position_embeddings)),
               c.max_position_embeddings);
    std::string per_format;
    for (KvDtype f : {KvDtype::kBF16, KvDtype::kI8, KvDtype::kF8E4M3, KvDtype::kI4}) {
      const double b = 2.0 * static_cast<double>(c.n_layer) *
                       static_cast<double>(kv_row_bytes(f, c.n_head_kv, c.head_dim));
      per_format += fmt::format("{}{} {}", per_format.empty() ? "" : ", ", kv_dtype_name(f), human_bytes(b));
    }
    fmt::print("kv per token:   {} (--kv-cache-dtype)\n", per_format);
    const graph::MemoryPlan decode = lm->plan_activations(1, 1);
    const graph::MemoryPlan prefill = lm->plan_activations(512, 1);
    fmt::print("activations:    {} per decode step, {} for a 512-token prefill "
               "({} without buffer reuse)\n",
               human_bytes(static_cast<double>(decode.arena_bytes)),
               human_bytes(static_cast<double>(prefill.arena_bytes)),
               human_bytes(static_cast<double>(prefill.naive_bytes)));
    const graph::passes::PassReport& passes = lm->pass_report();
    fmt::print("graph:          {} nodes after fusion ({})\n", lm->graph().nodes().size(),
               passes.str());
    // Empty when the model was loaded without passes.
    if (!passes.passes.empty()) fmt::print("{}", passes.table("  "));
    return 0;
  };
}

}  // namespace sampan::cli
