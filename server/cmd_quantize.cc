// sampan quantize --model DIR --out DIR --scheme fp8|int4|none [--group-size 32|64|128]
//   [--asymmetric] [--scale-search auto|on|off] [--scale-dtype f16|bf16] [--hadamard] [--hadamard-seed N]
//
// Loads the model the way the engine would with --quantization/--hadamard on load (the same
// code: models::load_llama_weights), then writes what it loaded: safetensors weights (quantized
// linears as <name>.weight + .weight_scale [+ .weight_zero]), config.json = the original plus
// "quantization_config" {"quant_method": "sampan", ...} (hf_config.h), and every other
// non-weight file of the input (tokenizer, generation config) copied. Loading the output
// therefore gives exactly the weights on-load quantization gives, without quantizing again.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/core/mapped_file.h"
#include "engine/loaders/hf_config.h"
#include "engine/loaders/safetensors_writer.h"
#include "engine/loaders/weight_store.h"
#include "engine/models/llama.h"
#include "server/commands.h"
#include "server/model_dir_out.h"
#include "server/model_flags.h"

namespace sampan::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

struct Args {
  std::string model, out, scheme = "none", scale_dtype = "f16";
  int64_t group_size = 128;
  std::string scale_search = "auto";
  bool asymmetric = false, hadamard = false;
  uint64_t seed = 0;
  CLI::Option* group_opt = nullptr;
  CLI::Option* scale_opt = nullptr;
  CLI::Option* asym_opt = nullptr;
  CLI::Option* search_opt = nullptr;
  CLI::Option* seed_opt = nullptr;
};

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", b, units[u]);
}

bool present(const Tensor& t) { return t.defined() && t.numel() > 0; }

void add_linear(std::vector<NamedTensor>& out, const std::string& name, const models::Linear& l) {
  out.push_back({name + ".weight", l.weight});
  if (present(l.bias)) out.push_back({name + ".bias", l.bias});
  if (present(l.scales)) out.push_back({name + ".weight_scale", l.scales});
  if (present(l.zeros)) out.push_back({name + ".weight_zero", l.zeros});
}

// Every tensor of the weights under the Hugging Face names load_llama_weights reads.
std::vector<NamedTensor> collect(const HfConfig& c, const models::LlamaWeights& w, bool untied) {
  std::vector<NamedTensor> out = {{"model.embed_tokens.weight", w.tok_embd}};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    const models::LlamaLayerWeights& l = w.layers[static_cast<size_t>(i)];
    out.push_back({p + "input_layernorm.weight", l.attn_norm});
    add_linear(out, p + "self_attn.q_proj", l.attn.q);
    add_linear(out, p + "self_attn.k_proj", l.attn.k);
    add_linear(out, p + "self_attn.v_proj", l.attn.v);
    add_linear(out, p + "self_attn.o_proj", l.attn.o);
    out.push_back({p + "post_attention_layernorm.weight", l.ffn_norm});
    add_linear(out, p + "mlp.gate_proj", l.gate);
    add_linear(out, p + "mlp.up_proj", l.up);
    add_linear(out, p + "mlp.down_proj", l.down);
  }
  out.push_back({"model.norm.weight", w.output_norm});
  if (untied) add_linear(out, "lm_head", w.output);
  return out;
}

// The "quantization_config" section describing `w` (hf_config.h), or null when the weights are
// plain float and unrotated.
ordered_json quant_section(const models::QuantScheme& s, bool rotated, uint64_t seed,
                           int64_t down_block) {
  if (s.format == models::WeightFormat::kNone && !rotated) return nullptr;
  ordered_json q = {{"quant_method", "sampan"}, {"format", models::weight_format_name(s.format)}};
  if (s.format == models::WeightFormat::kInt4) {
    q["group_size"] = s.group_size;
    q["symmetric"] = s.symmetric;
    q["scale_dtype"] = s.scale_dtype == DType::kBF16 ? "bf16" : "f16";
  }
  if (rotated) {
    q["rotation"] = {{"method", "hadamard"}, {"seed", seed}, {"down_proj_block", down_block}};
  }
  return q;
}

void write_config(const std::string& model, const std::string& path, const ordered_json& section,
                  bool untied) {
  const std::string src = (fs::path(model) / "config.json").string();
  const auto mapped = MappedFile::open(src);
  ordered_json root = ordered_json::parse(
      std::string_view(reinterpret_cast<const char*>(mapped->data()), mapped->size()));
  if (section.is_null()) {
    root.erase("quantization_config");
  } else {
    root["quantization_config"] = section;
  }
  // lm_head has tensors of its own (quantized, or rotated apart from the embedding).
  if (untied) root["tie_word_embeddings"] = false;
  std::ofstream out(path, std::ios::trunc);
  out << root.dump(2) << "\n";
  out.flush();
  SAMPAN_CHECK(out.good(), ErrorCode::kIo, "{}: write failed", path);
}

int run(const Args& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const bool int4 = a.scheme == "int4";
  SAMPAN_CHECK(int4 || (a.group_opt->count() == 0 && a.scale_opt->count() == 0 &&
                        a.asym_opt->count() == 0 && a.search_opt->count() == 0),
               ErrorCode::kInvalidArgument,
               "--group-size, --scale-dtype, --asymmetric and --scale-search apply to --scheme "
               "int4 only");
  SAMPAN_CHECK(a.hadamard || a.seed_opt->count() == 0, ErrorCode::kInvalidArgument,
               "--hadamard-seed needs --hadamard");
  check_output_dir(a.model, a.out);

  models::ModelBuildOptions opt;
  SAMPAN_CHECK(models::parse_weight_format(a.scheme.c_str(), &opt.quantization.format),
               ErrorCode::kInvalidArgument, "--scheme: unknown scheme '{}'", a.scheme);
  opt.quantization.group_size = a.group_size;
  opt.quantization.symmetric = !a.asymmetric;
  models::parse_scale_search(a.scale_search.c_str(), &opt.quantization.scale_search);
  opt.quantization.scale_dtype = a.scale_dtype == "bf16" ? DType::kBF16 : DType::kF16;
  opt.hadamard.enabled = a.hadamard;
  opt.hadamard.seed = a.seed;

  const HfConfig config = load_hf_config(a.model);
  const WeightStore store = WeightStore::open(a.model);
  const models::LlamaWeights w = models::load_llama_weights(config, store, opt);

  // What the output holds: this run's transforms, or those the input already carried.
  models::QuantScheme scheme = opt.quantization;
  uint64_t seed = a.seed;
  if (config.quant) {
    if (scheme.format == models::WeightFormat::kNone) scheme = config.quant->scheme;
    if (config.quant->rotated) seed = config.quant->rotation_seed;
  }
  const bool rotated = w.down_hadamard_block != 0;
  const bool untied = !config.tie_word_embeddings || present(w.output.scales) ||
                      w.output.weight.raw() != w.tok_embd.raw();
  const std::vector<NamedTensor> tensors = collect(config, w, untied);
  int n_linear = 0, n_quant = 0;
  for (const NamedTensor& t : tensors) {
    const std::string& n = t.name;
    if (n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0 && t.tensor.rank() == 2 &&
        n != "model.embed_tokens.weight") {
      ++n_linear;
      n_quant += t.tensor.dtype() == DType::kF8E4M3 || t.tensor.dtype() == DType::kI4;
    }
  }

  std::error_code ec;
  fs::create_directories(a.out, ec);
  SAMPAN_CHECK(!ec, ErrorCode::kIo, "--out: cannot create {}: {}", a.out, ec.message());
  const std::vector<std::string> files = write_safetensors_dir(a.out, tensors);
  write_config(a.model, (fs::path(a.out) / "config.json").string(),
               quant_section(scheme, rotated, seed, w.down_hadamard_block), untied);
  copy_support_files(a.model, a.out, /*skip_config=*/true);

  int64_t out_bytes = 0;
  for (const std::string& f : files) out_bytes += static_cast<int64_t>(fs::file_size(fs::path(a.out) / f));
  const int64_t in_bytes = store.total_bytes();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string what = models::weight_format_name(scheme.format);
  if (scheme.format == models::WeightFormat::kInt4) {
    what += fmt::format(" g{} {} {} scales", scheme.group_size,
                        scheme.symmetric ? "symmetric" : "asymmetric",
                        scheme.scale_dtype == DType::kBF16 ? "bf16" : "f16");
    const bool searched = scheme.scale_search == models::ScaleSearch::kOn ||
                          (scheme.scale_search == models::ScaleSearch::kAuto && rotated);
    if (opt.quantization.format == models::WeightFormat::kInt4) {
      what += searched ? ", searched scales" : ", absmax scales";  // this run's quantizer
    }
  }
  if (rotated) what += fmt::format(", hadamard seed {}", seed);
  fmt::print("quantized {} -> {}: {}; {} of {} linears quantized; weights {} -> {} ({:.2f}x) in "
             "{:.1f} s\n",
             a.model, a.out, what, n_quant, n_linear, human_bytes(static_cast<double>(in_bytes)),
             human_bytes(static_cast<double>(out_bytes)),
             out_bytes > 0 ? static_cast<double>(in_bytes) / static_cast<double>(out_bytes) : 0.0,
             secs);
  return 0;
}

}  // namespace

Runner add_quantize(CLI::App& app) {
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "quantize", "Quantize (and optionally rotate) a model directory into a new one");
  cmd->add_option("--model", a->model, "input model directory")->required();
  cmd->add_option("--out", a->out, "output directory (must not exist, or be empty)")->required();
  cmd->add_option("--scheme", a->scheme, "weight format: fp8|int4|none")
      ->required()
      ->check(CLI::IsMember({"fp8", "int4", "none"}));
  a->group_opt = cmd->add_option("--group-size", a->group_size, "int4 group size: 32|64|128 (default 128)")
                     ->check(int4_group_size_validator());
  a->asym_opt = cmd->add_flag("--asymmetric", a->asymmetric, "int4 with a per-group zero point");
  a->search_opt = cmd->add_option("--scale-search", a->scale_search,
                                  "int4 scales of least squared weight error: auto (with "
                                  "--hadamard)|on|off (default auto)")
                      ->check(CLI::IsMember({"auto", "on", "off"}));
  a->scale_opt = cmd->add_option("--scale-dtype", a->scale_dtype, "int4 scale type: f16|bf16 (default f16)")
                     ->check(CLI::IsMember({"f16", "bf16"}));
  cmd->add_flag("--hadamard", a->hadamard,
                "rotate the weights first (QuaRot-style Hadamard; the output records it)");
  a->seed_opt = cmd->add_option("--hadamard-seed", a->seed, "seed of the rotation's random signs");
  return [a] { return run(*a); };
}

}  // namespace sampan::cli
