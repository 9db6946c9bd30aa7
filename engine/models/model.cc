#include "engine/models/model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/core/mapped_file.h"

namespace sampan::models {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::tuple<std::string, std::string, ModelBuildFn>> builders;  // format, arch, fn
  std::vector<ModelFormat> formats;
};

Registry& registry() {
  static Registry r;
  return r;
}

const ModelBuildFn* find_builder(const std::string& format, const std::string& architecture) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& [f, a, fn] : r.builders) {
    if (f == format && a == architecture) return &fn;
  }
  return nullptr;
}

std::string dims_str(const std::vector<graph::Dim>& shape) {
  std::vector<std::string> parts;
  for (const graph::Dim& d : shape) parts.push_back(d.symbolic() ? d.symbol : std::to_string(d.size));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

// The signature must describe the graph as built (and as the passes left it): every input the
// graph declares is in the signature with its dtype and rank, and the other way round.
void check_signature(const Model& m) {
  std::map<std::string, const graph::Value*> inputs;
  for (graph::ValueId id : m.graph.inputs()) inputs[m.graph.value(id).name] = &m.graph.value(id);
  SAMPAN_CHECK(inputs.size() == m.signature.inputs.size(), ErrorCode::kInternal,
               "{}: the graph has {} inputs, its signature {}", m.path, inputs.size(),
               m.signature.inputs.size());
  for (const TensorSpec& t : m.signature.inputs) {
    auto it = inputs.find(t.name);
    SAMPAN_CHECK(it != inputs.end(), ErrorCode::kInternal,
                 "{}: signature input '{}' is not a graph input", m.path, t.name);
    SAMPAN_CHECK(it->second->dtype == t.dtype && it->second->shape.size() == t.shape.size(),
                 ErrorCode::kInternal, "{}: signature input '{}' is {}{}, the graph's {}{}",
                 m.path, t.name, dtype_name(t.dtype), dims_str(t.shape),
                 dtype_name(it->second->dtype), dims_str(it->second->shape));
  }
  SAMPAN_CHECK(m.graph.outputs().size() == m.signature.outputs.size(), ErrorCode::kInternal,
               "{}: the graph has {} outputs, its signature {}", m.path, m.graph.outputs().size(),
               m.signature.outputs.size());
}

}  // namespace

const char* tensor_role_name(TensorRole role) {
  switch (role) {
    case TensorRole::kTokenIds: return "token_ids";
    case TensorRole::kPositions: return "positions";
    case TensorRole::kSeqIds: return "seq_ids";
    case TensorRole::kBlockTables: return "block_tables";
    case TensorRole::kLogitRows: return "logit_rows";
    case TensorRole::kKCache: return "k_cache";
    case TensorRole::kVCache: return "v_cache";
    case TensorRole::kLogits: return "logits";
    case TensorRole::kData: return "data";
    case TensorRole::kLoraIds: return "lora_ids";
  }
  return "?";
}

const TensorSpec* Signature::find_input(TensorRole role, int64_t layer) const {
  for (const TensorSpec& t : inputs) {
    if (t.role == role && t.layer == layer) return &t;
  }
  return nullptr;
}

const TensorSpec* Signature::find_output(TensorRole role) const {
  for (const TensorSpec& t : outputs) {
    if (t.role == role) return &t;
  }
  return nullptr;
}

std::string Signature::str() const {
  std::string s;
  auto line = [&](const char* kind, const TensorSpec& t) {
    s += fmt::format("{} {} '{}'{} {}{}\n", kind, tensor_role_name(t.role), t.name,
                     t.api_name.empty() || t.api_name == t.name ? "" : " (" + t.api_name + ")",
                     dtype_name(t.dtype), dims_str(t.shape));
  };
  for (const TensorSpec& t : inputs) line("input", t);
  for (const TensorSpec& t : outputs) line("output", t);
  return s;
}

DecoderBindings DecoderBindings::from(const Signature& sig, const std::string& model) {
  DecoderBindings b;
  auto need = [&](TensorRole role, int64_t layer = -1) -> std::string {
    const TensorSpec* t = sig.find_input(role, layer);
    SAMPAN_CHECK(t != nullptr, ErrorCode::kUnsupported,
                 "{}: not a decoder model (its graph has no {} input{})", model,
                 tensor_role_name(role), layer >= 0 ? fmt::format(" for layer {}", layer) : "");
    return t->name;
  };
  b.ids = need(TensorRole::kTokenIds);
  b.positions = need(TensorRole::kPositions);
  b.seq_ids = need(TensorRole::kSeqIds);
  b.block_tables = need(TensorRole::kBlockTables);
  b.logit_rows = need(TensorRole::kLogitRows);
  for (int64_t l = 0; sig.find_input(TensorRole::kKCache, l) != nullptr; ++l) {
    b.k_cache.push_back(need(TensorRole::kKCache, l));
    b.v_cache.push_back(need(TensorRole::kVCache, l));
  }
  if (const TensorSpec* t = sig.find_input(TensorRole::kLoraIds)) b.lora_ids = t->name;
  bool found = false;
  for (size_t i = 0; i < sig.outputs.size(); ++i) {
    if (sig.outputs[i].role == TensorRole::kLogits) {
      b.logits_output = i;
      found = true;
      break;
    }
  }
  SAMPAN_CHECK(found, ErrorCode::kUnsupported,
               "{}: not a decoder model (its graph has no logits output)", model);
  return b;
}

int64_t KvPools::bytes() const {
  int64_t b = 0;
  for (const Tensor& t : k) b += t.nbytes();
  for (const Tensor& t : v) b += t.nbytes();
  return b;
}

KvPools Model::allocate_kv_pools(int64_t n_blocks, int64_t block_size, Device device, bool zero,
                                 const std::string& what) const {
  KvPools pools;
  const Shape shape = {n_blocks, block_size, kv_row_width};
  const Fill fill = zero ? Fill::kZero : Fill::kUninitialized;
  for (int64_t l = 0; l < n_kv_layers; ++l) {
    pools.k.push_back(allocate_named(shape, kv_pool_dtype, device,
                                     fmt::format("KV cache pool k_cache.{} ({})", l, what), fill));
    pools.v.push_back(allocate_named(shape, kv_pool_dtype, device,
                                     fmt::format("KV cache pool v_cache.{} ({})", l, what), fill));
  }
  return pools;
}

void Model::bind_kv_pools(const KvPools& pools, std::map<std::string, Tensor>& feeds) const {
  for (int64_t l = 0; l < n_kv_layers; ++l) {
    const TensorSpec* k = signature.find_input(TensorRole::kKCache, l);
    const TensorSpec* v = signature.find_input(TensorRole::kVCache, l);
    SAMPAN_CHECK(k != nullptr && v != nullptr, ErrorCode::kInternal,
                 "{}: the signature has no KV pool inputs for layer {}", path, l);
    feeds[k->name] = pools.k[static_cast<size_t>(l)];
    feeds[v->name] = pools.v[static_cast<size_t>(l)];
  }
}

namespace {

// Replaces every graph constant c with want(c) by make(c), made once per distinct view (tied
// weights stay one tensor); returns how many were made. Running out of memory in make is
// Error(kOutOfMemory): "<verb> weight '<name>' (<tensor>, <bytes> bytes) <where>: <why>".
template <class Want, class Make>
int64_t replace_constants(graph::Graph& g, const Want& want, const Make& make,
                          std::string_view verb, std::string_view where) {
  std::map<TensorViewKey, Tensor> made;
  for (size_t v = 0; v < g.n_values(); ++v) {
    graph::Value& val = g.mutable_value(static_cast<graph::ValueId>(v));
    if (val.kind != graph::ValueKind::kConstant || !want(val.constant)) continue;
    const Tensor& c = val.constant;
    const TensorViewKey key = view_key(c);
    auto it = made.find(key);
    if (it == made.end()) {
      try {
        it = made.emplace(key, make(c)).first;
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kOutOfMemory) throw;
        fail(ErrorCode::kOutOfMemory, "{} weight '{}' ({}, {} bytes) {}: {}", verb, val.name,
             c.str(), c.nbytes(), where, e.what());
      }
    }
    val.constant = it->second;
  }
  return static_cast<int64_t>(made.size());
}

// memcpy on up to 8 threads, in slices of whole 2 MiB pages: the kernel zeroes each new huge
// page in the thread that first touches it, which on one thread made the copy of a 2.2 GB bf16
// model take ~4 s (a VM; clear_page ~2/3 of it).
void parallel_copy(void* dst, const void* src, size_t bytes) {
  constexpr size_t kSlice = size_t(8) << 20;
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t n = std::min<size_t>({hw, 8, (bytes + kSlice - 1) / kSlice});
  auto part = [&](size_t i) {
    const size_t b = bytes * i / n / kCpuHugePageBytes * kCpuHugePageBytes;
    const size_t e =
        i + 1 == n ? bytes : bytes * (i + 1) / n / kCpuHugePageBytes * kCpuHugePageBytes;
    if (e > b) std::memcpy(static_cast<char*>(dst) + b, static_cast<const char*>(src) + b, e - b);
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i) threads.emplace_back(part, i);
  part(0);
  for (std::thread& t : threads) t.join();
}

}  // namespace

void Model::upload_constants(Device device) {
  if (device.type == DeviceType::kCPU) {
    localize_mapped_constants();
    return;
  }
  replace_constants(
      graph, [&](const Tensor& c) { return !(c.device() == device); },
      [&](const Tensor& c) { return c.to(device); }, "uploading", "to " + device.str());
}

void Model::localize_mapped_constants() {
  if (!cpu_huge_pages()) return;
  auto mapped = [](const Tensor& c) {
    return c.storage() && c.storage()->file_mapped() &&
           c.nbytes() >= static_cast<int64_t>(kCpuHugePageBytes);
  };
  // From the CPU allocator: 2 MiB pages.
  auto copy = [](const Tensor& c) {
    if (!c.is_contiguous()) return c.to(Device::cpu());
    Tensor d = Tensor::empty(c.shape(), c.dtype());
    parallel_copy(d.raw(), c.raw(), static_cast<size_t>(c.nbytes()));
    MappedFile::release(c);
    return d;
  };
  huge_page_weights += replace_constants(graph, mapped, copy, "copying", "to huge pages");
}

void register_model_builder(const std::string& format, const std::string& architecture,
                            ModelBuildFn build) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.builders.emplace_back(format, architecture, std::move(build));
}

std::vector<std::string> registered_model_builders() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [f, a, fn] : r.builders) out.push_back(f + "/" + a);
  return out;
}

void register_model_format(ModelFormat format) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.formats.push_back(std::move(format));
}

std::string model_format_of(const std::string& path) {
  Registry& r = registry();
  std::vector<ModelFormat> formats;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    formats = r.formats;
  }
  for (const ModelFormat& f : formats) {
    if (f.detect(path)) return f.name;
  }
  return "hf";
}

bool is_decoder_format(const std::string& format) {
  if (format == "hf") return true;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const ModelFormat& f : r.formats) {
    if (f.name == format) return f.decoder;
  }
  return false;
}

bool parse_precision(const std::string& name, Precision* out) {
  if (name == "f32") *out = Precision::kF32;
  else if (name == "bf16") *out = Precision::kBf16;
  else return false;
  return true;
}

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options) {
  std::vector<ModelFormat> formats;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    formats = r.formats;
  }
  for (const ModelFormat& f : formats) {
    const std::optional<std::string> file = f.detect(path);
    if (!file) continue;
    auto m = std::make_unique<Model>();
    m->path = *file;
    m->format = f.name;
    f.load(*file, options, *m);
    if (options.optimize) {
      // Decoder builders ignore the classic models' precision (LoadOptions::precision).
      m->pass_report = graph::passes::optimize(
          m->graph, {.bf16 = !f.decoder && options.precision == Precision::kBf16});
    }
    check_signature(*m);
    log::debug("{}: {} model, signature:\n{}", *file, m->format, m->signature.str());
    return m;
  }
  // A Hugging Face directory (config.json, *.safetensors).
  SAMPAN_CHECK(std::filesystem::is_directory(path), ErrorCode::kNotFound,
               "{}: model directory does not exist", path);
  ModelSource src;
  src.path = path;
  src.format = "hf";
  src.config = load_hf_config(path);
  src.architecture = model_arch_name(src.config.arch);
  src.store = std::make_shared<const WeightStore>(WeightStore::open(path));

  const ModelBuildFn* build = find_builder(src.format, src.architecture);
  SAMPAN_CHECK(build != nullptr, ErrorCode::kUnsupported,
               "{}: no model builder for format '{}' architecture '{}' (registered: {})", path,
               src.format, src.architecture, fmt::join(registered_model_builders(), ", "));
  auto m = std::make_unique<Model>();
  m->path = path;
  m->format = src.format;
  m->architecture = src.architecture;
  m->config = src.config;
  m->store = src.store;
  (*build)(src, options, *m);
  if (options.optimize) m->pass_report = graph::passes::optimize(m->graph);
  check_signature(*m);
  log::debug("{}: {} {} model, signature:\n{}", path, m->format, m->architecture,
             m->signature.str());
  return m;
}

}  // namespace sampan::models
