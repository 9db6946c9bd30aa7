#include "engine/models/llama.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/core/mapped_file.h"
#include "engine/core/thread_pool.h"
#include "engine/models/llama_rotate.h"
#include "engine/models/model.h"
#include "engine/models/rope_freqs.h"
#include "engine/models/weight_quant.h"

namespace sampan::models {
namespace {

const std::vector<DType> kWeightTypes = {DType::kBF16, DType::kF16, DType::kF32};

Tensor vector_f32(const WeightStore& store, const std::string& name, int64_t n) {
  return store.get_as(name, {n}, kWeightTypes).to_f32();
}

// Whether `sampan quantize` stored a linear of input width `in` quantized (hf_config.h).
bool stored_quantized(const HfQuantConfig* q, int64_t in) {
  if (q == nullptr) return false;
  switch (q->scheme.format) {
    case WeightFormat::kNone: return false;
    case WeightFormat::kFp8: return true;
    case WeightFormat::kInt4: return in % q->scheme.group_size == 0;
  }
  return false;
}

// One companion tensor of a quantized weight (its scale or zero point), checked for dtype and
// shape. Every error is kInvalidModel naming the file and the tensor.
Tensor companion(const WeightStore& store, const WeightInfo& weight, const std::string& name,
                 const char* role, DType dtype, const Shape& shape, const std::string& why) {
  SAMPAN_CHECK(store.has(name), ErrorCode::kInvalidModel,
               "{}: tensor '{}' is missing (the {} of the {} weight '{}')", weight.file, name, role,
               weight.dtype == DType::kI8 ? "int4" : dtype_name(weight.dtype), weight.name);
  const WeightInfo info = store.info(name);
  SAMPAN_CHECK(info.dtype == dtype && info.shape == shape, ErrorCode::kInvalidModel,
               "{}: tensor '{}' is {}{}, expected {}{} ({})", info.file, name,
               dtype_safetensors_name(info.dtype), shape_str(info.shape),
               dtype_safetensors_name(dtype), shape_str(shape), why);
  return store.get(name);
}

Linear load_quantized(const WeightStore& store, const std::string& name, int64_t out, int64_t in,
                      const QuantScheme& s) {
  const std::string wname = name + ".weight";
  const WeightInfo wi = store.info(wname);
  Linear l;
  if (s.format == WeightFormat::kFp8) {
    SAMPAN_CHECK(wi.dtype == DType::kF8E4M3 && wi.shape == (Shape{out, in}),
                 ErrorCode::kInvalidModel,
                 "{}: tensor '{}' is {}{}, expected F8_E4M3[{}, {}] (quantization_config format "
                 "fp8)",
                 wi.file, wname, dtype_safetensors_name(wi.dtype), shape_str(wi.shape), out, in);
    l.weight = store.get(wname);
    l.scales = companion(store, wi, name + ".weight_scale", "scale", DType::kF32, {out},
                         "one f32 scale per output channel");
    return l;
  }
  const int64_t g = s.group_size, groups = in / g;
  SAMPAN_CHECK(wi.dtype == DType::kI8 && wi.shape == (Shape{out, in / 2}),
               ErrorCode::kInvalidModel,
               "{}: tensor '{}' is {}{}, expected I8[{}, {}] (int4 [{}, {}] packed two per byte)",
               wi.file, wname, dtype_safetensors_name(wi.dtype), shape_str(wi.shape), out, in / 2,
               out, in);
  const Tensor packed = store.get(wname);
  l.weight = Tensor::from_storage(packed.storage(), packed.byte_offset(), {out, in}, DType::kI4);
  const std::string why = fmt::format("int4 group size {}: {} columns make {} groups", g, in, groups);
  l.scales = companion(store, wi, name + ".weight_scale", "scale", s.scale_dtype, {out, groups},
                       why);
  const std::string zname = name + ".weight_zero";
  if (!s.symmetric) {
    l.zeros = companion(store, wi, zname, "zero point", DType::kI8, {out, groups}, why);
  } else {
    SAMPAN_CHECK(!store.has(zname), ErrorCode::kInvalidModel,
                 "{}: tensor '{}' is present but quantization_config says symmetric",
                 store.info(zname).file, zname);
  }
  l.group_size = g;
  return l;
}

Linear load_linear(const WeightStore& store, const std::string& name, int64_t out, int64_t in,
                   bool bias, const HfQuantConfig* q) {
  Linear l;
  if (stored_quantized(q, in)) {
    l = load_quantized(store, name, out, in, q->scheme);
  } else {
    l.weight = store.get_as(name + ".weight", {out, in}, kWeightTypes);
  }
  if (bias) l.bias = vector_f32(store, name + ".bias", out);
  return l;
}

bool is_float(const Tensor& t) {
  return t.dtype() == DType::kF32 || t.dtype() == DType::kF16 || t.dtype() == DType::kBF16;
}

// Quantizes a float linear in place; false when int4 cannot group its input width.
bool quantize_linear(Linear& l, const QuantScheme& s, const std::string& name,
                     cpu::TaskRunner& runner) {
  if (!is_float(l.weight)) return false;
  if (s.format == WeightFormat::kInt4 && l.weight.dim(1) % s.group_size != 0) return false;
  QuantizedMatrix q = quantize_matrix(l.weight, s, name + ".weight", &runner);
  MappedFile::release(l.weight);  // a tied embedding reads them again from the page cache
  l.weight = std::move(q.data);
  l.scales = std::move(q.scales);
  l.zeros = std::move(q.zeros);
  l.group_size = s.format == WeightFormat::kInt4 ? s.group_size : 0;
  return true;
}

// Quantizes float linears one at a time on `pool` and reports, when finished, those that keep
// float weights.
class LinearQuantizer {
 public:
  LinearQuantizer(const HfConfig& c, const QuantScheme& s, cpu::TaskRunner& pool)
      : c_(c), s_(s), pool_(pool) {
    SAMPAN_CHECK(s.format != WeightFormat::kInt4 || int4_group_size_ok(s.group_size),
                 ErrorCode::kInvalidArgument, "int4 group size {} (expected {})", s.group_size,
                 kInt4GroupSizesText);
  }
  void operator()(Linear& l, const std::string& name) {
    (quantize_linear(l, s_, name, pool_) ? done_ : kept_)++;
  }
  void finish() const {
    if (kept_ > 0) {
      log::warn("{}: {} of {} linears keep float weights: their input width is not a multiple "
                "of the int4 group size {}",
                c_.source, kept_, done_ + kept_, s_.group_size);
    }
    log::debug("{}: quantized {} linears to {}", c_.source, done_, weight_format_name(s_.format));
  }

 private:
  const HfConfig& c_;
  QuantScheme s_;
  cpu::TaskRunner& pool_;
  int done_ = 0, kept_ = 0;
};

void quantize_weights(const HfConfig& c, LlamaWeights& w, LinearQuantizer& one) {
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    LlamaLayerWeights& l = w.layers[static_cast<size_t>(i)];
    one(l.attn.q, p + "self_attn.q_proj");
    one(l.attn.k, p + "self_attn.k_proj");
    one(l.attn.v, p + "self_attn.v_proj");
    one(l.attn.o, p + "self_attn.o_proj");
    one(l.gate, p + "mlp.gate_proj");
    one(l.up, p + "mlp.up_proj");
    one(l.down, p + "mlp.down_proj");
  }
  // A tied lm_head is quantized into its own tensors; the embedding table stays float.
  one(w.output, "lm_head");
}

// Per layer, the adapters of options.lora stacked for the `lora` op (blocks.h), each checked
// against the base first. Empty when there are none.
std::vector<LayerLora> stack_lora(const HfConfig& c, const LlamaWeights& w,
                                  const ModelBuildOptions& options) {
  const auto& adapters = options.lora;
  if (adapters.empty()) return {};
  // A rotated base (llama_rotate.h) computes in another basis than the one the adapter learnt.
  SAMPAN_CHECK(w.down_hadamard_block == 0, ErrorCode::kInvalidArgument,
               "{}: LoRA adapters need an unrotated base model (this one is Hadamard-rotated)",
               c.source);
  for (const auto& a : adapters) {
    SAMPAN_CHECK(a != nullptr, ErrorCode::kInvalidArgument, "{}: a LoRA adapter is null", c.source);
    check_lora_adapter(*a, c);
  }
  const int64_t n = static_cast<int64_t>(adapters.size());
  std::vector<LayerLora> layers(static_cast<size_t>(c.n_layer));
  for (int m = 0; m < kLoraModuleCount; ++m) {
    int64_t r_max = 0;
    for (const auto& a : adapters) {
      if (a->layers[0][static_cast<size_t>(m)].defined()) r_max = std::max(r_max, a->config.rank);
    }
    if (r_max == 0) continue;  // no adapter targets this projection
    const auto [in, out] = lora_module_shape(c, m);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      LoraStack& s = layers[static_cast<size_t>(l)].modules[static_cast<size_t>(m)];
      s.a = Tensor::zeros({n, r_max, in}, DType::kF32);
      s.b = Tensor::zeros({n, out, r_max}, DType::kF32);
      s.scale = Tensor::zeros({n}, DType::kF32);
      for (int64_t k = 0; k < n; ++k) {
        const LoraAdapter& a = *adapters[static_cast<size_t>(k)];
        const LoraPair& p = a.layers[static_cast<size_t>(l)][static_cast<size_t>(m)];
        if (!p.defined()) continue;
        const int64_t r = a.config.rank;
        const float* pa = p.a.data<float>();
        const float* pb = p.b.data<float>();
        std::copy(pa, pa + r * in, s.a.data<float>() + k * r_max * in);
        float* db = s.b.data<float>() + k * out * r_max;
        for (int64_t o = 0; o < out; ++o) std::copy(pb + o * r, pb + (o + 1) * r, db + o * r_max);
        s.scale.data<float>()[k] = static_cast<float>(a.config.scale());
      }
    }
  }
  return layers;
}

}  // namespace

LlamaWeights load_llama_weights(const HfConfig& c, const WeightStore& store,
                                const ModelBuildOptions& options) {
  const HfQuantConfig* q = c.quant ? &*c.quant : nullptr;
  if (options.hadamard.enabled) {
    SAMPAN_CHECK(q == nullptr, ErrorCode::kInvalidArgument,
                 "{}: cannot rotate on load: the model is already {} (quantization_config); "
                 "rotate the original float model",
                 c.source, q->rotated ? "rotated" : "quantized");
  }
  if (options.quantization.format != WeightFormat::kNone) {
    SAMPAN_CHECK(q == nullptr || q->scheme.format == WeightFormat::kNone,
                 ErrorCode::kInvalidArgument,
                 "{}: cannot quantize on load to {}: the model is already quantized ({})",
                 c.source, weight_format_name(options.quantization.format),
                 weight_format_name(q->scheme.format));
  }

  LlamaWeights w;
  const int64_t d = c.hidden_size;
  w.tok_embd = store.get_as("model.embed_tokens.weight", {c.vocab_size, d}, kWeightTypes);
  w.layers.resize(static_cast<size_t>(c.n_layer));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    LlamaLayerWeights& l = w.layers[static_cast<size_t>(i)];
    l.attn_norm = vector_f32(store, p + "input_layernorm.weight", d);
    l.attn.q = load_linear(store, p + "self_attn.q_proj", c.q_dim(), d, c.bias_q, q);
    l.attn.k = load_linear(store, p + "self_attn.k_proj", c.kv_dim(), d, c.bias_k, q);
    l.attn.v = load_linear(store, p + "self_attn.v_proj", c.kv_dim(), d, c.bias_v, q);
    l.attn.o = load_linear(store, p + "self_attn.o_proj", d, c.q_dim(), c.bias_o, q);
    l.ffn_norm = vector_f32(store, p + "post_attention_layernorm.weight", d);
    l.gate = load_linear(store, p + "mlp.gate_proj", c.intermediate_size, d, c.bias_mlp, q);
    l.up = load_linear(store, p + "mlp.up_proj", c.intermediate_size, d, c.bias_mlp, q);
    l.down = load_linear(store, p + "mlp.down_proj", d, c.intermediate_size, c.bias_mlp, q);
  }
  w.output_norm = vector_f32(store, "model.norm.weight", d);
  // A quantized lm_head is always stored on its own (`sampan quantize` unties it).
  if (c.tie_word_embeddings && !stored_quantized(q, d)) {
    w.output.weight = w.tok_embd;
  } else {
    w.output = load_linear(store, "lm_head", c.vocab_size, d, false, q);
  }
  if (q != nullptr && q->rotated) w.down_hadamard_block = q->down_hadamard_block;

  const bool quantize = options.quantization.format != WeightFormat::kNone;
  if (!options.hadamard.enabled && !quantize) return w;
  ThreadPool pool(0);  // one worker per core for the rotation and quantization passes
  std::optional<LinearQuantizer> quantizer;
  if (quantize) {
    QuantScheme s = options.quantization;
    if (s.scale_search == ScaleSearch::kAuto) {
      const bool rotated = options.hadamard.enabled || (q != nullptr && q->rotated);
      s.scale_search = rotated ? ScaleSearch::kOn : ScaleSearch::kOff;
    }
    quantizer.emplace(c, s, pool);
  }
  if (options.hadamard.enabled) {
    // Each linear is quantized as soon as it is rotated: one f32 matrix at a time.
    RotatedLinearFn done;
    if (quantizer) done = [&](Linear& l, const std::string& name) { (*quantizer)(l, name); };
    rotate_llama_weights(c, w, options.hadamard.seed, done, &pool);
  } else {
    quantize_weights(c, w, *quantizer);
  }
  if (quantizer) quantizer->finish();
  return w;
}

graph::Graph build_llama_graph(const HfConfig& c, const LlamaWeights& w,
                               const ModelBuildOptions& options, Signature* signature) {
  using graph::Dim;
  graph::Graph g;
  Signature sig;
  // Every input is added to the graph and the signature together (the input contract, llama.h).
  auto input = [&](const std::string& name, TensorRole role, DType dtype, std::vector<Dim> shape,
                   int64_t layer = -1, const std::string& api_name = {}) {
    sig.inputs.push_back({name, api_name, role, dtype, shape, layer});
    return g.add_input(name, dtype, std::move(shape));
  };
  const Dim n_tokens = Dim::sym("n_tokens");
  const ValueId ids = input("ids", TensorRole::kTokenIds, DType::kI32, {n_tokens}, -1, "input_ids");
  DecoderInputs in;
  in.positions = input("positions", TensorRole::kPositions, DType::kI32, {n_tokens});
  in.seq_ids = input("seq_ids", TensorRole::kSeqIds, DType::kI32, {n_tokens});
  in.block_tables = input("block_tables", TensorRole::kBlockTables, DType::kI32,
                          {Dim::sym("n_seqs"), Dim::sym("max_blocks")});
  const ValueId logit_rows =
      input("logit_rows", TensorRole::kLogitRows, DType::kI32, {Dim::sym("n_out")});
  std::vector<LayerLora> lora = stack_lora(c, w, options);
  if (!lora.empty()) {
    const ValueId ids = input("lora_ids", TensorRole::kLoraIds, DType::kI32, {n_tokens});
    for (LayerLora& l : lora) l.ids = ids;
  }

  RopeFreqs rope = compute_rope_freqs(c);
  if (!w.rope_freq_factors.empty()) {
    SAMPAN_CHECK(w.rope_freq_factors.size() == rope.inv_freq.size(), ErrorCode::kInvalidModel,
                 "{}: rope_freqs has {} factors, expected head_dim / 2 = {}", c.source,
                 w.rope_freq_factors.size(), rope.inv_freq.size());
    for (size_t i = 0; i < rope.inv_freq.size(); ++i) rope.inv_freq[i] /= w.rope_freq_factors[i];
  }
  in.inv_freq = g.add_constant(
      "rope.inv_freq", Tensor::from_f32({static_cast<int64_t>(rope.inv_freq.size())}, rope.inv_freq));

  AttentionParams ap;
  ap.n_heads = c.n_head;
  ap.n_kv_heads = c.n_head_kv;
  ap.head_dim = c.head_dim;
  ap.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  ap.rope_attn_factor = rope.attention_factor;
  ap.kv_dtype = options.kv_cache_dtype;
  ap.qk_hadamard = options.kv_hadamard;

  // KV pools (llama.h): f32 rows for kF32, else raw bytes in the kernels' row format.
  const bool f32_kv = options.kv_cache_dtype == KvDtype::kF32;
  const DType pool_type = f32_kv ? DType::kF32 : DType::kI8;
  const int64_t row = f32_kv ? c.kv_dim()
                             : kv_row_bytes(options.kv_cache_dtype, c.n_head_kv, c.head_dim);

  graph::Attributes embd_attrs;
  if (w.tok_embd.dtype() == DType::kU8) {
    embd_attrs.set("ggml_type", static_cast<int64_t>(w.tok_embd_type));
  }
  ValueId h = g.add("embedding", "tok_embd", {ids, g.add_constant("tok_embd.weight", w.tok_embd)},
                    std::move(embd_attrs));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = fmt::format("layers.{}", i);
    const LlamaLayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::vector<Dim> pool = {Dim::sym("n_blocks"), Dim::sym("block_size"), Dim::fixed(row)};
    const ValueId k_cache = input(fmt::format("k_cache.{}", i), TensorRole::kKCache, pool_type, pool, i);
    const ValueId v_cache = input(fmt::format("v_cache.{}", i), TensorRole::kVCache, pool_type, pool, i);
    ap.sliding_window = c.layer_is_sliding(i) ? *c.sliding_window : 0;
    const ValueId x = rms_norm(g, p + ".attn_norm", h, l.attn_norm, c.rms_norm_eps);
    const LayerLora* ll = lora.empty() ? nullptr : &lora[static_cast<size_t>(i)];
    const ValueId a = attention(g, p + ".attn", x, l.attn, ap, in, k_cache, v_cache, ll);
    h = g.add("add", p + ".attn_residual", {h, a});
    const ValueId y = rms_norm(g, p + ".ffn_norm", h, l.ffn_norm, c.rms_norm_eps);
    const ValueId f =
        swiglu_ffn(g, p + ".ffn", y, l.gate, l.up, l.down, w.down_hadamard_block, ll);
    h = g.add("add", p + ".ffn_residual", {h, f});
  }
  const ValueId rows = g.add("gather_rows", "logit_rows", {h, logit_rows});
  const ValueId n = rms_norm(g, "output_norm", rows, w.output_norm, c.rms_norm_eps);
  const ValueId logits = linear(g, "lm_head", n, w.output);
  g.mark_output(logits);
  sig.outputs.push_back({g.value(logits).name, "logits", TensorRole::kLogits, DType::kF32,
                         {Dim::sym("n_out"), Dim::fixed(c.vocab_size)}});
  if (signature != nullptr) *signature = std::move(sig);
  return g;
}

const LlamaWeights* llama_weights_of(const Model& model) {
  // Both builders of Llama-family decoders (below and gguf_model.cc) leave builder_state
  // pointing at their LlamaWeights.
  if (model.format != "hf" && model.format != "gguf") return nullptr;
  for (ModelArch a : {ModelArch::kLlama, ModelArch::kMistral, ModelArch::kQwen2}) {
    if (model.architecture == model_arch_name(a)) {
      return static_cast<const LlamaWeights*>(model.builder_state.get());
    }
  }
  return nullptr;
}

namespace {

// The builder of the registry (model.h): the three architectures share this file.
void build_llama_model(const ModelSource& src, const LoadOptions& options, Model& m) {
  auto weights = std::make_shared<LlamaWeights>(
      load_llama_weights(src.config, *src.store, options.build));
  m.graph = build_llama_graph(src.config, *weights, options.build, &m.signature);
  m.builder_state = weights;
  // The pools as the graph declares them: [n_blocks, block_size, row] of the pool dtype.
  m.kv_dtype = options.build.kv_cache_dtype;
  if (const TensorSpec* pool = m.signature.find_input(TensorRole::kKCache, 0)) {
    m.kv_pool_dtype = pool->dtype;
    m.kv_row_width = pool->shape[2].size;
    m.n_kv_layers = src.config.n_layer;
  }
}

const bool kRegistered = [] {
  for (ModelArch a : {ModelArch::kLlama, ModelArch::kMistral, ModelArch::kQwen2}) {
    register_model_builder("hf", model_arch_name(a), build_llama_model);
  }
  return true;
}();

}  // namespace

}  // namespace sampan::models
