// SampanPredictor and SampanTensor: the Paddle-Inference-shaped half of the C API.
//
// Two kinds of model, told apart at load:
//   - a classic model (ONNX today: models::load_model's formats other than "hf", whose
//     signature has no token-ids role): every signature input and output is a tensor by its API
//     name, in the signature's dtype (i32 <-> i64 and bool <-> u8 are converted on the way in),
//     any rank, symbolic dims bound by what the caller reshapes to. A run checks every input
//     against the signature (rank, fixed dims, one value per symbolic dim across inputs), feeds
//     the graph as is and copies every output back.
//   - a decoder (below).
//
// A decoder predictor runs a decoder Model (models/model.h) over a whole [batch, seq] block of ids in
// ONE forward: batch row b is sequence b of the paged-attention contract, with a KV pool of one
// block of `seq` rows per sequence (block_tables[b] = [b]), so rows never see each other. Its
// tensors are the signature's caller-facing ones, by their API names (the token ids as
// "input_ids", the logits as "logits"). The model (weights, graph) is shared by clones; each
// predictor has its own threads, executor (activation arena) and KV pools. On a CUDA device the
// weights are uploaded once, at load, into the shared graph (so clones do not copy them
// again), the KV pools and the activations live on the device, and the logits come back to the
// host at the end of every run.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/capi/capi_config.h"
#include "engine/capi/capi_internal.h"
#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/models/model.h"
#include "engine/runtime/device_select.h"

namespace sampan::capi {
namespace {

constexpr int kMaxRank = 8;
// Tokens of one run (batch * seq): the ids, positions and rows the graph takes are i32.
constexpr int64_t kMaxRunTokens = 1 << 22;

// The loaded model, read-only once built, shared by a predictor and its clones.
struct Model {
  std::unique_ptr<models::Model> model;
  bool decoder = false;            // an LLM: "input_ids" -> "logits" (else a classic model)
  models::DecoderBindings bind;    // decoder only
  ConfigData options;
  Device device = Device::cpu();
};

int64_t dtype_size(SampanDType dtype) {
  switch (dtype) {
    case SAMPAN_DTYPE_F32: return 4;
    case SAMPAN_DTYPE_I32: return 4;
    case SAMPAN_DTYPE_I64: return 8;
    case SAMPAN_DTYPE_BOOL: return 1;
    case SAMPAN_DTYPE_U8: return 1;
    default: return 0;
  }
}

const char* dtype_text(SampanDType dtype) {
  switch (dtype) {
    case SAMPAN_DTYPE_F32: return "f32";
    case SAMPAN_DTYPE_I32: return "i32";
    case SAMPAN_DTYPE_I64: return "i64";
    case SAMPAN_DTYPE_BOOL: return "bool";
    case SAMPAN_DTYPE_U8: return "u8";
    case SAMPAN_DTYPE_UNDEFINED: return "undefined";
    default: return "unknown";
  }
}

// The C dtype of an engine dtype; UNDEFINED for one the C API does not carry (f16, bf16, i8...).
SampanDType sampan_dtype_of(DType dtype) {
  switch (dtype) {
    case DType::kF32: return SAMPAN_DTYPE_F32;
    case DType::kI32: return SAMPAN_DTYPE_I32;
    case DType::kI64: return SAMPAN_DTYPE_I64;
    case DType::kBool: return SAMPAN_DTYPE_BOOL;
    case DType::kU8: return SAMPAN_DTYPE_U8;
    default: return SAMPAN_DTYPE_UNDEFINED;
  }
}

struct TensorData {
  std::string name;
  bool is_input = false;
  std::vector<SampanDType> accepted;  // inputs: dtypes copy_from_cpu takes
  // What the model declares: dims (-1 where the caller chooses: a symbolic dim, named in
  // dim_names; "" for a fixed one) and the dtype it takes or gives back.
  std::vector<int64_t> model_shape;
  std::vector<std::string> dim_names;
  SampanDType model_dtype = SAMPAN_DTYPE_UNDEFINED;
  size_t spec = 0;                    // classic models: index in the signature's inputs/outputs
  std::vector<int64_t> shape;          // empty: none yet
  SampanDType dtype = SAMPAN_DTYPE_UNDEFINED;
  std::vector<uint8_t> bytes;
  bool has_data = false;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  void clear() {
    shape.clear();
    bytes.clear();
    has_data = false;
    if (!is_input) dtype = SAMPAN_DTYPE_UNDEFINED;
  }
};

struct Predictor {
  std::mutex mu;
  std::shared_ptr<const Model> model;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<graph::Executor> executor;
  std::vector<TensorData> inputs, outputs;
  std::vector<uintptr_t> input_handles, output_handles;
  // The KV pools of the last run, kept while [batch, seq] stays the same.
  models::KvPools kv;
  int64_t cache_batch = 0, cache_seq = 0;

  ~Predictor() {
    for (uintptr_t h : input_handles) unregister_handle(h);
    for (uintptr_t h : output_handles) unregister_handle(h);
  }
};

// What a tensor handle refers to: one input or output of a predictor that may be destroyed
// (then the handle is unregistered and the weak pointer expired).
struct TensorRef {
  std::weak_ptr<Predictor> predictor;
  bool is_input = false;
  size_t index = 0;
};

std::shared_ptr<const Model> load_model(const ConfigData& o) {
  o.require_model_dir();
  // Checked again here (set_device checked it too) so the message comes before any file is read.
  const Device device = runtime::parse_device(o.device);
  try {
    runtime::require_device(device);
  } catch (const Error& e) {
    api_fail(SAMPAN_ERROR_UNSUPPORTED, "device '{}': {}", o.device, e.what());
  }
  if (!o.params_file.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(o.params_file, ec)) {
      api_fail(SAMPAN_ERROR_NOT_FOUND, "params file {} does not exist", o.params_file);
    }
    api_fail(SAMPAN_ERROR_UNSUPPORTED,
             "params file {}: no format Sampan loads takes a separate params file yet (an ONNX "
             "model is its .onnx file alone; Paddle program + params files are not supported)",
             o.params_file);
  }
  auto m = std::make_shared<Model>();
  m->options = o;
  // Classic models: bf16 compute only when asked for explicitly (precision_set); decoder
  // builders ignore LoadOptions::precision.
  const models::Precision precision = o.precision_set && o.precision == "bf16"
                                          ? models::Precision::kBf16
                                          : models::Precision::kF32;
  m->model = models::load_model(
      o.model_dir, {.build = o.build_options(), .optimize = true, .precision = precision});
  m->decoder = models::is_decoder_format(m->model->format) ||
               m->model->signature.find_input(models::TensorRole::kTokenIds) != nullptr;
  if (m->decoder) {
    m->bind = models::DecoderBindings::from(m->model->signature, o.model_dir);
  } else if (o.precision == "fp8" || o.precision == "int4") {
    api_fail(SAMPAN_ERROR_UNSUPPORTED,
             "{}: precision '{}' is not supported for {} models yet (use f32)", m->model->path,
             o.precision, m->model->format);
  }
  m->device = device;
  m->model->upload_constants(device);
  return m;
}

// The decoder's tensors: the signature's token ids (i32 or i64 accepted) and logits, by their
// API names; the runtime inputs (positions, tables, KV pools) are the predictor's own.
void add_decoder_tensors(Predictor& p) {
  for (const models::TensorSpec& t : p.model->model->signature.inputs) {
    if (t.role != models::TensorRole::kTokenIds) continue;
    TensorData in;
    in.name = t.api_name.empty() ? t.name : t.api_name;
    in.is_input = true;
    in.accepted = {SAMPAN_DTYPE_I32, SAMPAN_DTYPE_I64};
    in.model_shape = {-1, -1};
    in.dim_names = {"batch", "seq"};
    in.model_dtype = SAMPAN_DTYPE_I64;
    p.inputs.push_back(std::move(in));
  }
  for (const models::TensorSpec& t : p.model->model->signature.outputs) {
    if (t.role != models::TensorRole::kLogits) continue;
    TensorData out;
    out.name = t.api_name.empty() ? t.name : t.api_name;
    out.model_shape = {-1, -1, p.model->model->config.vocab_size};
    out.dim_names = {"batch", "seq", ""};
    out.model_dtype = SAMPAN_DTYPE_F32;
    p.outputs.push_back(std::move(out));
  }
}

void set_declared_shape(TensorData& t, const std::vector<graph::Dim>& dims) {
  for (const graph::Dim& d : dims) {
    t.model_shape.push_back(d.symbolic() ? -1 : d.size);
    t.dim_names.push_back(d.symbolic() ? d.symbol : std::string());
  }
}

// A classic model's tensors: every signature input and output, by API name.
void add_classic_tensors(Predictor& p) {
  const models::Signature& sig = p.model->model->signature;
  for (size_t i = 0; i < sig.inputs.size(); ++i) {
    const models::TensorSpec& t = sig.inputs[i];
    TensorData in;
    in.name = t.api_name.empty() ? t.name : t.api_name;
    in.is_input = true;
    in.spec = i;
    in.model_dtype = sampan_dtype_of(t.dtype);
    set_declared_shape(in, t.shape);
    // The model's dtype, and its twin converted on the way in (numpy's default integer type
    // rarely matches a model's; bool and u8 are both one byte).
    switch (in.model_dtype) {
      case SAMPAN_DTYPE_I32: in.accepted = {SAMPAN_DTYPE_I32, SAMPAN_DTYPE_I64}; break;
      case SAMPAN_DTYPE_I64: in.accepted = {SAMPAN_DTYPE_I64, SAMPAN_DTYPE_I32}; break;
      case SAMPAN_DTYPE_BOOL: in.accepted = {SAMPAN_DTYPE_BOOL, SAMPAN_DTYPE_U8}; break;
      case SAMPAN_DTYPE_U8: in.accepted = {SAMPAN_DTYPE_U8, SAMPAN_DTYPE_BOOL}; break;
      case SAMPAN_DTYPE_F32: in.accepted = {SAMPAN_DTYPE_F32}; break;
      default: break;  // f16, bf16, i8...: not fed through the C API yet (copy_from_cpu says so)
    }
    p.inputs.push_back(std::move(in));
  }
  for (size_t i = 0; i < sig.outputs.size(); ++i) {
    const models::TensorSpec& t = sig.outputs[i];
    TensorData out;
    out.name = t.api_name.empty() ? t.name : t.api_name;
    out.spec = i;
    // Outputs of a dtype the C API does not carry come back as f32.
    out.model_dtype = sampan_dtype_of(t.dtype);
    if (out.model_dtype == SAMPAN_DTYPE_UNDEFINED) out.model_dtype = SAMPAN_DTYPE_F32;
    set_declared_shape(out, t.shape);
    p.outputs.push_back(std::move(out));
  }
}

std::shared_ptr<Predictor> make_predictor(std::shared_ptr<const Model> model) {
  auto p = std::make_shared<Predictor>();
  p->model = std::move(model);
  p->pool = std::make_unique<ThreadPool>(p->model->options.threads);
  p->executor = std::make_unique<graph::Executor>(p->model->model->graph, *p->pool,
                                                 p->model->device);
  if (p->model->decoder) {
    add_decoder_tensors(*p);
  } else {
    add_classic_tensors(*p);
  }
  // Tensor handles are registered up front so that the same name always gives the same handle.
  for (size_t i = 0; i < p->inputs.size(); ++i) {
    p->input_handles.push_back(register_handle(
        Kind::kTensor, std::make_shared<TensorRef>(TensorRef{p, true, i})));
  }
  for (size_t i = 0; i < p->outputs.size(); ++i) {
    p->output_handles.push_back(register_handle(
        Kind::kTensor, std::make_shared<TensorRef>(TensorRef{p, false, i})));
  }
  return p;
}

SampanPredictor* register_predictor(std::shared_ptr<Predictor> p) {
  return as_handle<SampanPredictor>(register_handle(Kind::kPredictor, std::move(p)));
}

// The predictor of a tensor handle, locked; the TensorData it names.
struct LockedTensor {
  std::shared_ptr<Predictor> predictor;
  std::unique_lock<std::mutex> lock;
  TensorData* data = nullptr;
};

LockedTensor lock_tensor(const SampanTensor* handle) {
  auto ref = lookup<TensorRef>(handle, Kind::kTensor, "tensor");
  LockedTensor t;
  t.predictor = ref->predictor.lock();
  if (!t.predictor) {
    api_fail(SAMPAN_ERROR_INVALID_HANDLE, "tensor belongs to a destroyed predictor");
  }
  t.lock = std::unique_lock<std::mutex>(t.predictor->mu);
  t.data = ref->is_input ? &t.predictor->inputs[ref->index] : &t.predictor->outputs[ref->index];
  return t;
}

// The ids of input_ids as i32, checked against the vocabulary.
std::vector<int32_t> read_ids(const TensorData& in, int64_t vocab) {
  const int64_t n = in.numel();
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t id = 0;
    if (in.dtype == SAMPAN_DTYPE_I32) {
      int32_t v;
      std::memcpy(&v, in.bytes.data() + i * 4, 4);
      id = v;
    } else {
      std::memcpy(&id, in.bytes.data() + i * 8, 8);
    }
    if (id < 0 || id >= vocab) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
               "{}[{}][{}] = {} is outside the vocabulary [0, {})", in.name, i / in.shape[1],
               i % in.shape[1], id, vocab);
    }
    ids[static_cast<size_t>(i)] = static_cast<int32_t>(id);
  }
  return ids;
}

// The KV pools of a [batch, seq] run: one block of seq rows per sequence (Model's pool format).
void ensure_kv_cache(Predictor& p, int64_t batch, int64_t seq) {
  if (p.cache_batch == batch && p.cache_seq == seq && !p.kv.k.empty()) return;
  p.kv = {};
  p.cache_batch = p.cache_seq = 0;
  p.kv = p.model->model->allocate_kv_pools(batch, seq, p.model->device, /*zero=*/true,
                                           fmt::format("predictor, batch {} seq {}", batch, seq));
  p.cache_batch = batch;
  p.cache_seq = seq;
}

void run_predictor(Predictor& p) {
  for (TensorData& out : p.outputs) out.clear();
  const TensorData& in = p.inputs[0];
  if (!in.has_data) {
    api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
             "input '{}' has no data (reshape it and call sampan_tensor_copy_from_cpu first)",
             in.name);
  }
  if (in.shape.size() != 2 || in.shape[0] < 1 || in.shape[1] < 1) {
    api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
             "input '{}' must have shape [batch, seq] with batch >= 1 and seq >= 1, got {}",
             in.name, fmt::format("[{}]", fmt::join(in.shape, ", ")));
  }
  const HfConfig& cfg = p.model->model->config;
  const models::DecoderBindings& bind = p.model->bind;
  const int64_t batch = in.shape[0], seq = in.shape[1];
  int64_t max_seq = cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : INT64_MAX;
  if (p.model->options.max_model_len > 0) {
    max_seq = std::min(max_seq, p.model->options.max_model_len);
  }
  if (seq > max_seq) {
    api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "input '{}': seq {} exceeds the limit of {} tokens",
             in.name, seq, max_seq);
  }
  if (batch > kMaxRunTokens / seq) {
    api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
             "input '{}': batch * seq = {} * {} exceeds {} tokens per run", in.name, batch, seq,
             kMaxRunTokens);
  }
  const int64_t n = batch * seq;
  std::vector<int32_t> ids = read_ids(in, cfg.vocab_size);
  std::vector<int32_t> positions(static_cast<size_t>(n)), seq_ids(static_cast<size_t>(n)),
      rows(static_cast<size_t>(n)), tables(static_cast<size_t>(batch));
  for (int64_t t = 0; t < n; ++t) {
    positions[static_cast<size_t>(t)] = static_cast<int32_t>(t % seq);
    seq_ids[static_cast<size_t>(t)] = static_cast<int32_t>(t / seq);
    rows[static_cast<size_t>(t)] = static_cast<int32_t>(t);
  }
  for (int64_t b = 0; b < batch; ++b) tables[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  ensure_kv_cache(p, batch, seq);

  std::map<std::string, Tensor> feeds;
  feeds[bind.ids] = Tensor::from_i32({n}, ids);
  feeds[bind.positions] = Tensor::from_i32({n}, positions);
  feeds[bind.seq_ids] = Tensor::from_i32({n}, seq_ids);
  feeds[bind.block_tables] = Tensor::from_i32({batch, 1}, tables);
  feeds[bind.logit_rows] = Tensor::from_i32({n}, rows);
  p.model->model->bind_kv_pools(p.kv, feeds);
  const std::vector<Tensor> results = p.executor->run(feeds);
  SAMPAN_CHECK(results.size() > bind.logits_output, ErrorCode::kInternal,
               "the model graph returned no logits");
  const Tensor& result = results[bind.logits_output];
  const Tensor logits =
      (result.device().type == DeviceType::kCPU ? result : result.to(Device::cpu())).to_f32();
  SAMPAN_CHECK(logits.numel() == n * cfg.vocab_size, ErrorCode::kInternal,
               "logits have {} values, expected {} x {}", logits.numel(), n, cfg.vocab_size);
  TensorData& out = p.outputs[0];
  out.bytes.resize(static_cast<size_t>(logits.nbytes()));
  std::memcpy(out.bytes.data(), logits.data<float>(), out.bytes.size());
  out.shape = {batch, seq, cfg.vocab_size};
  out.dtype = SAMPAN_DTYPE_F32;
  out.has_data = true;
}

std::string dims_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// The declared shape as text: "[batch, 3, h, w]".
std::string declared_text(const TensorData& t) {
  std::vector<std::string> dims;
  for (size_t d = 0; d < t.model_shape.size(); ++d) {
    dims.push_back(t.model_shape[d] < 0 ? t.dim_names[d] : std::to_string(t.model_shape[d]));
  }
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// An input's data as the graph's dtype (converted between i32 and i64, bool and u8).
Tensor classic_feed(const TensorData& in, DType want) {
  Tensor t = Tensor::empty(in.shape, want);
  const int64_t n = in.numel();
  const uint8_t* src = in.bytes.data();
  const SampanDType have = in.dtype;
  if (have == sampan_dtype_of(want) && want != DType::kBool) {
    if (!in.bytes.empty()) std::memcpy(t.raw(), src, in.bytes.size());
  } else if (want == DType::kBool || want == DType::kU8) {
    // bool stored as 0 / 1, whatever non-zero byte the caller used.
    uint8_t* dst = t.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) {
      dst[i] = want == DType::kBool ? static_cast<uint8_t>(src[i] != 0) : src[i];
    }
  } else if (have == SAMPAN_DTYPE_I32 && want == DType::kI64) {
    for (int64_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, src + i * 4, 4);
      t.data<int64_t>()[i] = v;
    }
  } else if (have == SAMPAN_DTYPE_I64 && want == DType::kI32) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t v;
      std::memcpy(&v, src + i * 8, 8);
      if (v < INT32_MIN || v > INT32_MAX) {
        api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
                 "input '{}': value {} at flat index {} does not fit the model's i32", in.name,
                 v, i);
      }
      t.data<int32_t>()[i] = static_cast<int32_t>(v);
    }
  } else {
    // copy_from_cpu admits only the pairs above.
    api_fail(SAMPAN_ERROR_INTERNAL, "input '{}': no conversion from {} to {}", in.name,
             dtype_text(have), dtype_name(want));
  }
  return t;
}

void run_classic(Predictor& p) {
  for (TensorData& out : p.outputs) out.clear();
  const models::Signature& sig = p.model->model->signature;
  // Symbolic dims: the value each takes in this run and the input that set it.
  std::map<std::string, std::pair<int64_t, const TensorData*>> bound;
  std::map<std::string, Tensor> feeds;
  for (const TensorData& in : p.inputs) {
    const models::TensorSpec& spec = sig.inputs[in.spec];
    if (!in.has_data) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
               "input '{}' has no data (reshape it to {} and call sampan_tensor_copy_from_cpu)",
               in.name, declared_text(in));
    }
    if (in.shape.size() != in.model_shape.size()) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
               "input '{}' has shape {} (rank {}), the model takes {} (rank {})", in.name,
               dims_text(in.shape), in.shape.size(), declared_text(in), in.model_shape.size());
    }
    for (size_t d = 0; d < in.shape.size(); ++d) {
      const int64_t got = in.shape[d];
      if (in.model_shape[d] >= 0) {
        if (got != in.model_shape[d]) {
          api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
                   "input '{}' has shape {}, the model takes {}: dim {} must be {}", in.name,
                   dims_text(in.shape), declared_text(in), d, in.model_shape[d]);
        }
        continue;
      }
      const std::string& sym = in.dim_names[d];
      if (got < 1) {
        api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
                 "input '{}' has shape {}: dim {} ({}) must be >= 1", in.name,
                 dims_text(in.shape), d, sym);
      }
      auto [it, fresh] = bound.try_emplace(sym, got, &in);
      if (!fresh && it->second.first != got) {
        api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
                 "input '{}' has shape {}: dim {} ({}) is {}, but input '{}' has {} = {}",
                 in.name, dims_text(in.shape), d, sym, got, it->second.second->name, sym,
                 it->second.first);
      }
    }
    feeds[spec.name] = classic_feed(in, spec.dtype);
  }
  const std::vector<Tensor> results = p.executor->run(feeds);
  SAMPAN_CHECK(results.size() == p.outputs.size(), ErrorCode::kInternal,
               "the model graph returned {} outputs, its signature lists {}", results.size(),
               p.outputs.size());
  for (size_t i = 0; i < results.size(); ++i) {
    Tensor r = results[i].device().type == DeviceType::kCPU ? results[i]
                                                            : results[i].to(Device::cpu());
    SampanDType dt = sampan_dtype_of(r.dtype());
    if (dt == SAMPAN_DTYPE_UNDEFINED) {
      r = r.to_f32();
      dt = SAMPAN_DTYPE_F32;
    } else if (!r.is_contiguous()) {
      r = r.contiguous();
    }
    TensorData& out = p.outputs[i];
    out.bytes.resize(static_cast<size_t>(r.nbytes()));
    if (!out.bytes.empty()) std::memcpy(out.bytes.data(), r.raw(), out.bytes.size());
    out.shape = r.shape();
    out.dtype = dt;
    out.has_data = true;
  }
}

std::shared_ptr<Predictor> get_predictor(const SampanPredictor* handle) {
  return lookup<Predictor>(handle, Kind::kPredictor, "predictor");
}

SampanStatus get_count(SampanPredictor* handle, int32_t* out, bool inputs) {
  return guarded([&] {
    auto p = get_predictor(handle);
    require_arg(out, "out");
    std::lock_guard<std::mutex> lock(p->mu);
    *out = static_cast<int32_t>(inputs ? p->inputs.size() : p->outputs.size());
  });
}

SampanStatus get_name(SampanPredictor* handle, int32_t index, const char** out, bool inputs) {
  return guarded([&] {
    auto p = get_predictor(handle);
    require_arg(out, "out");
    std::lock_guard<std::mutex> lock(p->mu);
    const std::vector<TensorData>& list = inputs ? p->inputs : p->outputs;
    if (index < 0 || static_cast<size_t>(index) >= list.size()) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "{} index {} is out of range [0, {})",
               inputs ? "input" : "output", index, list.size());
    }
    *out = list[static_cast<size_t>(index)].name.c_str();
  });
}

SampanStatus get_handle(SampanPredictor* handle, const char* name, SampanTensor** out,
                        bool inputs) {
  return guarded([&] {
    auto p = get_predictor(handle);
    require_arg(name, "name");
    require_arg(out, "out");
    std::lock_guard<std::mutex> lock(p->mu);
    const std::vector<TensorData>& list = inputs ? p->inputs : p->outputs;
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].name == name) {
        *out = as_handle<SampanTensor>(inputs ? p->input_handles[i] : p->output_handles[i]);
        return;
      }
    }
    std::vector<std::string> names;
    for (const TensorData& t : list) names.push_back(t.name);
    api_fail(SAMPAN_ERROR_NOT_FOUND, "the model has no {} named '{}' (it has: {})",
             inputs ? "input" : "output", name, fmt::join(names, ", "));
  });
}

}  // namespace
}  // namespace sampan::capi

using namespace sampan;
using namespace sampan::capi;

extern "C" {

SAMPAN_API SampanStatus sampan_predictor_create(const SampanConfig* config,
                                                SampanPredictor** out) {
  return guarded([&] {
    const ConfigData options = snapshot_config(config);
    require_arg(out, "out");
    *out = register_predictor(make_predictor(load_model(options)));
  });
}

SAMPAN_API SampanStatus sampan_predictor_clone(SampanPredictor* predictor, SampanPredictor** out) {
  return guarded([&] {
    auto p = get_predictor(predictor);
    require_arg(out, "out");
    *out = register_predictor(make_predictor(p->model));
  });
}

SAMPAN_API SampanStatus sampan_predictor_destroy(SampanPredictor* predictor) {
  return guarded([&] {
    if (predictor == nullptr) return;
    auto p = take<Predictor>(predictor, Kind::kPredictor, "predictor");
    // A call in progress on another thread holds its own reference; the last one frees it.
    std::lock_guard<std::mutex> lock(p->mu);
    for (uintptr_t h : p->input_handles) unregister_handle(h);
    for (uintptr_t h : p->output_handles) unregister_handle(h);
  });
}

SAMPAN_API SampanStatus sampan_predictor_get_input_num(SampanPredictor* predictor, int32_t* out) {
  return get_count(predictor, out, true);
}
SAMPAN_API SampanStatus sampan_predictor_get_output_num(SampanPredictor* predictor, int32_t* out) {
  return get_count(predictor, out, false);
}
SAMPAN_API SampanStatus sampan_predictor_get_input_name(SampanPredictor* predictor, int32_t index,
                                                        const char** out) {
  return get_name(predictor, index, out, true);
}
SAMPAN_API SampanStatus sampan_predictor_get_output_name(SampanPredictor* predictor,
                                                         int32_t index, const char** out) {
  return get_name(predictor, index, out, false);
}
SAMPAN_API SampanStatus sampan_predictor_get_input_handle(SampanPredictor* predictor,
                                                          const char* name, SampanTensor** out) {
  return get_handle(predictor, name, out, true);
}
SAMPAN_API SampanStatus sampan_predictor_get_output_handle(SampanPredictor* predictor,
                                                           const char* name, SampanTensor** out) {
  return get_handle(predictor, name, out, false);
}

SAMPAN_API SampanStatus sampan_predictor_run(SampanPredictor* predictor) {
  return guarded([&] {
    auto p = get_predictor(predictor);
    std::lock_guard<std::mutex> lock(p->mu);
    if (p->model->decoder) {
      run_predictor(*p);
    } else {
      try {
        run_classic(*p);
      } catch (...) {
        for (TensorData& out : p->outputs) out.clear();  // a failed run leaves no outputs
        throw;
      }
    }
  });
}

SAMPAN_API SampanStatus sampan_tensor_reshape(SampanTensor* tensor, const int64_t* dims,
                                              int32_t rank) {
  return guarded([&] {
    LockedTensor t = lock_tensor(tensor);
    if (!t.data->is_input) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "'{}' is an output; only inputs can be reshaped",
               t.data->name);
    }
    if (rank < 1 || rank > kMaxRank) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "rank must be in [1, {}], got {}", kMaxRank, rank);
    }
    require_arg(dims, "dims");
    std::vector<int64_t> shape(dims, dims + rank);
    int64_t numel = 1;
    for (int32_t d = 0; d < rank; ++d) {
      if (shape[static_cast<size_t>(d)] < 0) {
        api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "dim {} is negative ({})", d,
                 shape[static_cast<size_t>(d)]);
      }
      // Sizes whose byte count would overflow are refused here rather than at the copy.
      if (shape[static_cast<size_t>(d)] > 0 && numel > (INT64_MAX / 16) / shape[static_cast<size_t>(d)]) {
        api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "shape [{}] has too many elements",
                 fmt::join(shape, ", "));
      }
      numel *= shape[static_cast<size_t>(d)];
    }
    t.data->shape = std::move(shape);
    t.data->bytes.clear();
    t.data->has_data = false;
    t.data->dtype = SAMPAN_DTYPE_UNDEFINED;
  });
}

SAMPAN_API SampanStatus sampan_tensor_copy_from_cpu(SampanTensor* tensor, SampanDType dtype,
                                                    const void* data, uint64_t byte_size) {
  return guarded([&] {
    LockedTensor t = lock_tensor(tensor);
    TensorData& d = *t.data;
    if (!d.is_input) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "'{}' is an output; copy_from_cpu takes inputs",
               d.name);
    }
    if (d.accepted.empty()) {
      api_fail(SAMPAN_ERROR_UNSUPPORTED,
               "input '{}' is {}, a dtype the C API cannot feed yet (f32, i32, i64, bool, u8)",
               d.name, dtype_name(t.predictor->model->model->signature.inputs[d.spec].dtype));
    }
    if (std::find(d.accepted.begin(), d.accepted.end(), dtype) == d.accepted.end()) {
      std::vector<std::string> ok;
      for (SampanDType a : d.accepted) ok.push_back(dtype_text(a));
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "input '{}' takes {}, got dtype {} ({})", d.name,
               fmt::join(ok, " or "), dtype, dtype_text(dtype));
    }
    if (d.shape.empty()) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "input '{}' has no shape yet (call reshape first)",
               d.name);
    }
    const uint64_t want = static_cast<uint64_t>(d.numel() * dtype_size(dtype));
    if (byte_size != want) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
               "input '{}': byte size {} does not match shape [{}] of {} ({} bytes)", d.name,
               byte_size, fmt::join(d.shape, ", "), dtype_text(dtype), want);
    }
    if (want > 0) require_arg(data, "data");
    d.bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + want);
    d.dtype = dtype;
    d.has_data = true;
  });
}

SAMPAN_API SampanStatus sampan_tensor_copy_to_cpu(SampanTensor* tensor, SampanDType dtype,
                                                  void* data, uint64_t byte_size) {
  return guarded([&] {
    LockedTensor t = lock_tensor(tensor);
    const TensorData& d = *t.data;
    if (!d.has_data) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "'{}' has no data{}", d.name,
               d.is_input ? " (nothing was copied into it)" : " (run the predictor first)");
    }
    if (dtype != d.dtype) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "'{}' is {}, asked for dtype {} ({})", d.name,
               dtype_text(d.dtype), dtype, dtype_text(dtype));
    }
    if (byte_size != d.bytes.size()) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT,
               "'{}': byte size {} does not match shape [{}] of {} ({} bytes)", d.name,
               byte_size, fmt::join(d.shape, ", "), dtype_text(d.dtype), d.bytes.size());
    }
    if (byte_size > 0) require_arg(data, "data");
    if (byte_size > 0) std::memcpy(data, d.bytes.data(), d.bytes.size());
  });
}

SAMPAN_API SampanStatus sampan_tensor_get_shape(SampanTensor* tensor, int64_t* dims,
                                                int32_t capacity, int32_t* rank) {
  return guarded([&] {
    LockedTensor t = lock_tensor(tensor);
    require_arg(rank, "rank");
    const int32_t r = static_cast<int32_t>(t.data->shape.size());
    *rank = r;
    if (dims == nullptr && capacity == 0) return;  // a query of the rank
    if (capacity < r) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "'{}' has rank {}, dims has room for {}",
               t.data->name, r, capacity);
    }
    if (r > 0) require_arg(dims, "dims");
    std::copy(t.data->shape.begin(), t.data->shape.end(), dims);
  });
}

SAMPAN_API SampanStatus sampan_tensor_get_dtype(SampanTensor* tensor, SampanDType* out) {
  return guarded([&] {
    LockedTensor t = lock_tensor(tensor);
    require_arg(out, "out");
    *out = t.data->dtype;
  });
}

SAMPAN_API SampanStatus sampan_tensor_get_model_shape(SampanTensor* tensor, int64_t* dims,
                                                      int32_t capacity, int32_t* rank) {
  return guarded([&] {
    LockedTensor t = lock_tensor(tensor);
    require_arg(rank, "rank");
    const int32_t r = static_cast<int32_t>(t.data->model_shape.size());
    *rank = r;
    if (dims == nullptr && capacity == 0) return;  // a query of the rank
    if (capacity < r) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "'{}' has rank {}, dims has room for {}",
               t.data->name, r, capacity);
    }
    if (r > 0) require_arg(dims, "dims");
    std::copy(t.data->model_shape.begin(), t.data->model_shape.end(), dims);
  });
}

SAMPAN_API SampanStatus sampan_tensor_get_dim_name(SampanTensor* tensor, int32_t dim,
                                                   const char** out) {
  return guarded([&] {
    LockedTensor t = lock_tensor(tensor);
    require_arg(out, "out");
    const size_t r = t.data->dim_names.size();
    if (dim < 0 || static_cast<size_t>(dim) >= r) {
      api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "'{}': dim {} is out of range [0, {})",
               t.data->name, dim, r);
    }
    *out = t.data->dim_names[static_cast<size_t>(dim)].c_str();
  });
}

SAMPAN_API SampanStatus sampan_tensor_get_model_dtype(SampanTensor* tensor, SampanDType* out) {
  return guarded([&] {
    LockedTensor t = lock_tensor(tensor);
    require_arg(out, "out");
    *out = t.data->model_dtype;
  });
}

SAMPAN_API SampanStatus sampan_tensor_get_name(SampanTensor* tensor, const char** out) {
  return guarded([&] {
    LockedTensor t = lock_tensor(tensor);
    require_arg(out, "out");
    *out = t.data->name.c_str();
  });
}

}  // extern "C"
