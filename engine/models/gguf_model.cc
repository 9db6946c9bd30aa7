// GGUF model files (llama.cpp's format) as a registered ModelFormat: the llama, mistral and qwen2
// architectures, single files and split sets (NAME-00001-of-0000N.gguf).
//
// The file is read in place: float tensors (F32, F16, BF16) become ordinary tensors viewing the
// mapping, block-quantized ones (Q4_K, Q8_0, ...: kernels/common/ggml_type.h) u8 tensors of their
// raw rows that the linear and embedding kernels dequantize in registers. Only q and k of the
// llama architecture are copied: llama.cpp's converter permutes their rows for its interleaved
// RoPE, and the rows are put back into Hugging Face order here so the one Llama graph (llama.h)
// runs every file. A quantized row moves as a whole (blocks never span rows), so this is exact.
// Q4_0 linear weights are copied too, into Sampan's INT4 layout (group 32, f16 scales; exact,
// quant/gguf_repack.h), whose kernels run them faster; their mapped pages are then released.
//
// The hyper-parameters come from the metadata (<arch>.embedding_length, ...); what the graph
// cannot run (partial rotary, yarn RoPE, a value length differing from the key length, an
// unknown architecture or tensor type) is refused in one line naming the file and the key or
// tensor.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/core/mapped_file.h"
#include "engine/loaders/gguf.h"
#include "engine/models/llama.h"
#include "engine/models/model.h"
#include "quant/gguf_repack.h"

namespace sampan::models {
namespace {

namespace fs = std::filesystem;

// Every shard of one model, the tensors by name across them.
struct GgufSet {
  std::vector<std::shared_ptr<const gguf::GgufFile>> files;
  std::vector<std::shared_ptr<Storage>> storages;  // one read-only view per file
  std::map<std::string, std::pair<size_t, const gguf::TensorInfo*>, std::less<>> tensors;
  const gguf::GgufFile& meta() const { return *files.front(); }
  const std::string& path() const { return files.front()->path(); }
};

// "NAME-00002-of-00005.gguf" -> {"NAME", 2, 5}.
struct SplitName {
  std::string prefix;
  int no = 0, count = 0;
};
std::optional<SplitName> split_name(const std::string& path) {
  static const std::regex re(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
  std::smatch m;
  if (!std::regex_match(path, m, re)) return std::nullopt;
  return SplitName{m[1].str(), std::stoi(m[2].str()), std::stoi(m[3].str())};
}
std::string shard_path(const SplitName& s, int no) {
  return fmt::format("{}-{:05d}-of-{:05d}.gguf", s.prefix, no, s.count);
}

std::optional<std::string> detect_gguf(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (p.extension() != ".gguf" || !fs::is_regular_file(p, ec)) return std::nullopt;
  // Any shard of a split set names the set: load from the first.
  if (auto s = split_name(path); s && s->no != 1 && s->count >= 1) return shard_path(*s, 1);
  return path;
}

GgufSet open_set(const std::string& first) {
  GgufSet set;
  set.files.push_back(gguf::GgufFile::open(first));
  const gguf::GgufFile& f0 = *set.files.front();
  const int64_t count = f0.get_int("split.count").value_or(1);
  if (count > 1) {
    const auto s = split_name(first);
    SAMPAN_CHECK(s && s->no == 1 && s->count == count, ErrorCode::kInvalidModel,
                 "{}: key 'split.count' is {} but the file is not named "
                 "NAME-00001-of-{:05d}.gguf, so its other shards cannot be found",
                 first, count, count);
    for (int i = 2; i <= count; ++i) {
      const std::string p = shard_path(*s, i);
      SAMPAN_CHECK(fs::exists(p), ErrorCode::kNotFound, "{}: shard {} of {} is missing ({})",
                   first, i, count, p);
      set.files.push_back(gguf::GgufFile::open(p));
    }
  }
  uint64_t n_tensors = 0;
  for (size_t i = 0; i < set.files.size(); ++i) {
    const gguf::GgufFile& f = *set.files[i];
    if (count > 1) {
      const int64_t no = f.get_int("split.no").value_or(-1);
      SAMPAN_CHECK(no == static_cast<int64_t>(i), ErrorCode::kInvalidModel,
                   "{}: key 'split.no' is {}, expected {} (shard {} of {})", f.path(), no, i,
                   i + 1, count);
    }
    const auto& map = f.mapping();
    set.storages.push_back(
        Storage::wrap_mapped(map->data(), map->size(), map));
    for (const gguf::TensorInfo& t : f.tensors()) {
      SAMPAN_CHECK(set.tensors.emplace(t.name, std::make_pair(i, &t)).second,
                   ErrorCode::kInvalidModel, "{}: tensor '{}' is also in an earlier shard",
                   f.path(), t.name);
      ++n_tensors;
    }
  }
  if (auto total = f0.get_int("split.tensors.count"); total && count > 1) {
    SAMPAN_CHECK(*total == static_cast<int64_t>(n_tensors), ErrorCode::kInvalidModel,
                 "{}: key 'split.tensors.count' is {} but the {} shards hold {} tensors", first,
                 *total, count, n_tensors);
  }
  return set;
}

// The metadata of one architecture: "<arch>.<key>" with messages naming the file.
class Meta {
 public:
  Meta(const gguf::GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
  std::string key(std::string_view k) const { return arch_ + "." + std::string(k); }
  std::optional<int64_t> opt_int(std::string_view k) const { return f_.get_int(key(k)); }
  int64_t req_int(std::string_view k) const {
    const auto v = opt_int(k);
    SAMPAN_CHECK(v.has_value(), ErrorCode::kInvalidModel, "{}: key '{}' is missing", f_.path(),
                 key(k));
    return positive(k, *v);
  }
  int64_t positive(std::string_view k, int64_t v) const {
    SAMPAN_CHECK(v > 0, ErrorCode::kInvalidModel, "{}: key '{}' is {}, expected > 0", f_.path(),
                 key(k), v);
    return v;
  }
  std::optional<double> opt_float(std::string_view k) const { return f_.get_float(key(k)); }

 private:
  const gguf::GgufFile& f_;
  std::string arch_;
};

HfConfig config_from_metadata(const GgufSet& set) {
  const gguf::GgufFile& f = set.meta();
  const std::string& path = f.path();
  const auto arch = f.get_string("general.architecture");
  SAMPAN_CHECK(arch.has_value(), ErrorCode::kInvalidModel,
               "{}: key 'general.architecture' is missing", path);
  HfConfig c;
  c.source = path;
  c.model_type = *arch;
  if (*arch == "llama") c.arch = ModelArch::kLlama;
  else if (*arch == "mistral") c.arch = ModelArch::kMistral;
  else if (*arch == "qwen2") c.arch = ModelArch::kQwen2;
  else fail(ErrorCode::kUnsupported, "{}: architecture '{}' is not supported (llama, mistral, qwen2)",
            path, *arch);
  const Meta m(f, *arch);
  c.hidden_size = m.req_int("embedding_length");
  c.n_layer = m.req_int("block_count");
  c.intermediate_size = m.req_int("feed_forward_length");
  c.n_head = m.req_int("attention.head_count");
  c.n_head_kv = m.positive("attention.head_count_kv",
                           m.opt_int("attention.head_count_kv").value_or(c.n_head));
  SAMPAN_CHECK(c.n_head % c.n_head_kv == 0, ErrorCode::kInvalidModel,
               "{}: key '{}' ({}) does not divide '{}' ({})", path,
               m.key("attention.head_count_kv"), c.n_head_kv, m.key("attention.head_count"),
               c.n_head);
  c.head_dim = m.positive("attention.key_length",
                          m.opt_int("attention.key_length").value_or(c.hidden_size / c.n_head));
  if (auto v = m.opt_int("attention.value_length")) {
    SAMPAN_CHECK(*v == c.head_dim, ErrorCode::kUnsupported,
                 "{}: key '{}' is {} but the key length is {}; Sampan needs them equal", path,
                 m.key("attention.value_length"), *v, c.head_dim);
  }
  if (auto r = m.opt_int("rope.dimension_count")) {
    SAMPAN_CHECK(*r == c.head_dim, ErrorCode::kUnsupported,
                 "{}: key '{}' is {}: rotary embedding on part of the head ({}) is not supported",
                 path, m.key("rope.dimension_count"), *r, c.head_dim);
  }
  c.max_position_embeddings = m.positive("context_length",
                                         m.opt_int("context_length").value_or(4096));
  const auto eps = m.opt_float("attention.layer_norm_rms_epsilon");
  SAMPAN_CHECK(eps.has_value(), ErrorCode::kInvalidModel, "{}: key '{}' is missing", path,
               m.key("attention.layer_norm_rms_epsilon"));
  SAMPAN_CHECK(*eps > 0 && *eps < 1, ErrorCode::kInvalidModel, "{}: key '{}' is {}, expected in (0, 1)",
               path, m.key("attention.layer_norm_rms_epsilon"), *eps);
  c.rms_norm_eps = *eps;
  c.rope.theta = m.opt_float("rope.freq_base").value_or(10000.0);
  SAMPAN_CHECK(c.rope.theta > 0, ErrorCode::kInvalidModel, "{}: key '{}' is {}, expected > 0",
               path, m.key("rope.freq_base"), c.rope.theta);
  // Older files say only rope.scale_linear (a linear factor); newer ones the type and factor.
  const auto type_key = f.get_string(m.key("rope.scaling.type"));
  const auto legacy = m.opt_float("rope.scale_linear");
  const std::string scaling =
      type_key.value_or(legacy && *legacy != 1.0 ? "linear" : "none");
  const double factor = m.opt_float("rope.scaling.factor").value_or(legacy.value_or(1.0));
  if (scaling == "linear") {
    SAMPAN_CHECK(factor > 0, ErrorCode::kInvalidModel, "{}: key '{}' is {}, expected > 0", path,
                 m.key("rope.scaling.factor"), factor);
    c.rope.type = RopeType::kLinear;
    c.rope.factor = factor;
  } else if (scaling != "none") {
    fail(ErrorCode::kUnsupported, "{}: key '{}' is '{}': RoPE scaling of that type is not supported "
         "(none, linear; llama3 factors come as the tensor rope_freqs.weight)",
         path, m.key("rope.scaling.type"), scaling);
  }
  if (c.arch == ModelArch::kMistral) {
    if (auto w = m.opt_int("attention.sliding_window"); w && *w > 0) {
      c.sliding_window = *w;
    }
  }
  c.layer_sliding.assign(static_cast<size_t>(c.n_layer), c.sliding_window.has_value());

  // Sizes the tensors decide: the vocabulary (token_embd's rows) and which biases exist.
  const auto embd = set.tensors.find("token_embd.weight");
  SAMPAN_CHECK(embd != set.tensors.end(), ErrorCode::kInvalidModel,
               "{}: tensor 'token_embd.weight' is missing", path);
  c.vocab_size = embd->second.second->rows();
  c.tie_word_embeddings = set.tensors.count("output.weight") == 0;
  c.bias_q = set.tensors.count("blk.0.attn_q.bias") != 0;
  c.bias_k = set.tensors.count("blk.0.attn_k.bias") != 0;
  c.bias_v = set.tensors.count("blk.0.attn_v.bias") != 0;
  c.bias_o = set.tensors.count("blk.0.attn_output.bias") != 0;
  c.bias_mlp = set.tensors.count("blk.0.ffn_up.bias") != 0;
  if (auto bos = f.get_int("tokenizer.ggml.bos_token_id")) c.bos_token_id = *bos;
  if (auto eos = f.get_int("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(*eos);
  if (auto eot = f.get_int("tokenizer.ggml.eot_token_id")) {
    if (c.eos_token_ids.empty() || c.eos_token_ids[0] != *eot) c.eos_token_ids.push_back(*eot);
  }
  return c;
}

// Reads tensors by name with their shapes checked.
class TensorReader {
 public:
  explicit TensorReader(const GgufSet& set) : set_(set) {}

  bool has(const std::string& name) const { return set_.tensors.count(name) != 0; }

  // The tensor as a matrix [rows, cols] (GGUF dims {cols, rows}): float types as themselves,
  // block types as u8 [rows, row bytes] with *type set.
  Tensor matrix(const std::string& name, int64_t rows, int64_t cols, GgmlType* type) const {
    const auto& [file, t] = find(name);
    if (!float_dtype(t->type)) check_block_type(file, *t);
    SAMPAN_CHECK(t->dims.size() == 2 && t->dims[0] == cols && t->dims[1] == rows,
                 ErrorCode::kInvalidModel, "{}: tensor '{}' is {}, expected [{}, {}]",
                 set_.files[file]->path(), name, t->str(), rows, cols);
    *type = t->type;
    if (auto d = float_dtype(t->type)) return view(file, *t, {rows, cols}, *d);
    return view(file, *t, {rows, t->row_bytes()}, DType::kU8);
  }

  // A 1-D float tensor of n elements as f32 (norm weights, biases, rope factors).
  Tensor vector_f32(const std::string& name, int64_t n) const {
    const auto& [file, t] = find(name);
    SAMPAN_CHECK(t->dims.size() == 1 && t->dims[0] == n, ErrorCode::kInvalidModel,
                 "{}: tensor '{}' is {}, expected [{}]", set_.files[file]->path(), name, t->str(), n);
    const auto d = float_dtype(t->type);
    SAMPAN_CHECK(d.has_value(), ErrorCode::kInvalidModel,
                 "{}: tensor '{}' is {}, expected F32, F16 or BF16", set_.files[file]->path(), name,
                 t->str());
    return view(file, *t, {n}, *d).to_f32();
  }

 private:
  static std::optional<DType> float_dtype(GgmlType t) {
    switch (t) {
      case GgmlType::kF32: return DType::kF32;
      case GgmlType::kF16: return DType::kF16;
      case GgmlType::kBF16: return DType::kBF16;
      default: return std::nullopt;
    }
  }
  void check_block_type(size_t file, const gguf::TensorInfo& t) const {
    SAMPAN_CHECK(ggml_block_type_supported(t.type), ErrorCode::kUnsupported,
                 "{}: tensor '{}' is {}, a type Sampan does not run (F32, F16, BF16, Q8_0, "
                 "Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)",
                 set_.files[file]->path(), t.name, t.str());
  }
  std::pair<size_t, const gguf::TensorInfo*> find(const std::string& name) const {
    auto it = set_.tensors.find(name);
    SAMPAN_CHECK(it != set_.tensors.end(), ErrorCode::kInvalidModel,
                 "{}: tensor '{}' is missing", set_.path(), name);
    return it->second;
  }
  Tensor view(size_t file, const gguf::TensorInfo& t, const Shape& shape, DType dtype) const {
    return Tensor::from_storage(set_.storages[file], static_cast<size_t>(t.offset), shape, dtype);
  }
  const GgufSet& set_;
};

// Undoes llama.cpp's q/k row permutation: GGUF row (h, j, i) holds HF row (h, i, j) for head h,
// i in {0, 1}, j < head_dim / 2. Works on any rows of bytes (float, block rows, f32 biases).
Tensor unpermute_rows(const Tensor& t, int64_t n_heads) {
  const int64_t rows = t.dim(0);
  const int64_t hd = rows / n_heads, half = hd / 2;
  const int64_t row_bytes = t.nbytes() / rows;
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < half; ++j) {
        const int64_t hf = h * hd + i * half + j, gg = h * hd + 2 * j + i;
        std::memcpy(dst + hf * row_bytes, src + gg * row_bytes, static_cast<size_t>(row_bytes));
      }
    }
  }
  return out;
}

// A Q4_0 matrix (u8 [out, row bytes], mapped) as Sampan INT4 (quant/gguf_repack.h), its source
// pages released from the resident set.
Linear q4_0_as_int4(const Tensor& src, int64_t out, int64_t in) {
  Linear l;
  l.weight = Tensor::empty({out, in}, DType::kI4);
  l.scales = Tensor::empty({out, in / 32}, DType::kF16);
  l.group_size = 32;
  quant::q4_0_to_int4(static_cast<const uint8_t*>(src.raw()), out, in,
                      static_cast<uint8_t*>(l.weight.raw()),
                      static_cast<uint16_t*>(l.scales.raw()));
  MappedFile::release(src);
  return l;
}

LlamaWeights load_weights(const HfConfig& c, const GgufSet& set) {
  const TensorReader r(set);
  const int64_t d = c.hidden_size;
  // Llama-architecture files carry q/k in llama.cpp's interleaved-RoPE row order.
  const bool permuted = c.arch != ModelArch::kQwen2;
  auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias, int64_t heads) {
    Linear l;
    l.weight = r.matrix(name + ".weight", out, in, &l.ggml_type);
    if (l.ggml_type == GgmlType::kQ4_0) l = q4_0_as_int4(l.weight, out, in);
    if (bias) l.bias = r.vector_f32(name + ".bias", out);
    if (heads > 0) {
      SAMPAN_CHECK(out % heads == 0 && (out / heads) % 2 == 0, ErrorCode::kInvalidModel,
                   "{}: tensor '{}.weight' has {} rows, not {} heads of an even size", set.path(),
                   name, out, heads);
      l.weight = unpermute_rows(l.weight, heads);
      if (l.scales.defined()) l.scales = unpermute_rows(l.scales, heads);
      if (bias) l.bias = unpermute_rows(l.bias, heads);
    }
    return l;
  };
  LlamaWeights w;
  w.tok_embd = r.matrix("token_embd.weight", c.vocab_size, d, &w.tok_embd_type);
  w.layers.resize(static_cast<size_t>(c.n_layer));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    LlamaLayerWeights& l = w.layers[static_cast<size_t>(i)];
    l.attn_norm = r.vector_f32(p + "attn_norm.weight", d);
    l.attn.q = linear(p + "attn_q", c.q_dim(), d, c.bias_q, permuted ? c.n_head : 0);
    l.attn.k = linear(p + "attn_k", c.kv_dim(), d, c.bias_k, permuted ? c.n_head_kv : 0);
    l.attn.v = linear(p + "attn_v", c.kv_dim(), d, c.bias_v, 0);
    l.attn.o = linear(p + "attn_output", d, c.q_dim(), c.bias_o, 0);
    l.ffn_norm = r.vector_f32(p + "ffn_norm.weight", d);
    l.gate = linear(p + "ffn_gate", c.intermediate_size, d, c.bias_mlp, 0);
    l.up = linear(p + "ffn_up", c.intermediate_size, d, c.bias_mlp, 0);
    l.down = linear(p + "ffn_down", d, c.intermediate_size, c.bias_mlp, 0);
  }
  w.output_norm = r.vector_f32("output_norm.weight", d);
  if (c.tie_word_embeddings) {
    w.output.weight = w.tok_embd;
    w.output.ggml_type = w.tok_embd_type;
  } else {
    w.output = linear("output", c.vocab_size, d, false, 0);
  }
  if (r.has("rope_freqs.weight")) {
    const Tensor f = r.vector_f32("rope_freqs.weight", c.head_dim / 2);
    const float* v = f.data<float>();
    for (int64_t i = 0; i < c.head_dim / 2; ++i) {
      SAMPAN_CHECK(std::isfinite(v[i]) && v[i] > 0, ErrorCode::kInvalidModel,
                   "{}: tensor 'rope_freqs.weight' holds {} at {}, expected a positive factor",
                   set.path(), v[i], i);
    }
    w.rope_freq_factors.assign(v, v + c.head_dim / 2);
  }
  return w;
}

void build_gguf(const std::string& file, const LoadOptions& options, Model& m) {
  SAMPAN_CHECK(!options.build.hadamard.enabled, ErrorCode::kInvalidArgument,
               "{}: --rotate needs float safetensors weights; a GGUF file is used as it is", file);
  SAMPAN_CHECK(options.build.quantization.format == WeightFormat::kNone,
               ErrorCode::kInvalidArgument,
               "{}: --quantize applies to safetensors models; a GGUF file keeps its own weight "
               "types",
               file);
  auto set = std::make_shared<GgufSet>(open_set(file));
  m.config = config_from_metadata(*set);
  m.architecture = model_arch_name(m.config.arch);
  auto weights = std::make_shared<LlamaWeights>(load_weights(m.config, *set));
  m.graph = build_llama_graph(m.config, *weights, options.build, &m.signature);
  // builder_state points at the LlamaWeights (llama_weights_of) and keeps the mapped set alive.
  auto holder =
      std::make_shared<std::pair<std::shared_ptr<GgufSet>, std::shared_ptr<LlamaWeights>>>(
          set, weights);
  m.builder_state = std::shared_ptr<const LlamaWeights>(holder, weights.get());
  m.kv_dtype = options.build.kv_cache_dtype;
  if (const TensorSpec* pool = m.signature.find_input(TensorRole::kKCache, 0)) {
    m.kv_pool_dtype = pool->dtype;
    m.kv_row_width = pool->shape[2].size;
    m.n_kv_layers = m.config.n_layer;
  }
  log::debug("{}: GGUF {} ({} file{}), {} tensors", file, m.architecture, set->files.size(),
             set->files.size() == 1 ? "" : "s", set->tensors.size());
}

const bool kRegistered =
    (register_model_format({.name = "gguf", .detect = detect_gguf, .load = build_gguf, .decoder = true}),
     true);

}  // namespace
}  // namespace sampan::models
