#include "engine/train/lora_trainer.h"

#include <algorithm>

#include <cstring>
#include <map>

#include "engine/core/error.h"
#include "engine/core/exact_gemms.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/loaders/safetensors.h"
#include "engine/loaders/safetensors_writer.h"
#include "engine/models/llama.h"
#include "engine/train/train_graph.h"

namespace sampan::train {
namespace {

constexpr const char* kStateFormat = "sampan-lora-trainer-state/1";

// The seed of micro-batch `draw`: a splitmix64 step of (seed, draw), so consecutive micro-batches
// get unrelated masks and the stream resumes from the counter alone.
uint64_t mix_seed(uint64_t seed, uint64_t draw) {
  uint64_t z = seed ^ (draw + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Tensor f32_copy(const Tensor& t) {
  Tensor c = t.to_f32();
  // to_f32 of an f32 tensor may share storage; the master weights must be our own.
  return c.storage() == t.storage() ? c.clone() : c;
}

}  // namespace

struct LoraTrainer::Impl {
  std::shared_ptr<const models::Model> base;
  TrainerOptions options;
  models::LoraAdapter adapter;
  ThreadPool pool;
  TrainGraph train, eval;
  std::unique_ptr<graph::Executor> train_exec, eval_exec;
  // By TrainGraph::params index: the master weight (a view of the adapter's tensor), its
  // accumulated gradient and AdamW moments.
  std::vector<Tensor> weights;
  std::vector<std::vector<float>> grads, exp_avg, exp_avg_sq;
  int64_t steps = 0;
  uint64_t draws = 0;  // micro-batches run in training mode (the dropout stream)

  Impl(std::shared_ptr<const models::Model> b, const TrainerOptions& o,
       const models::LoraAdapter* initial)
      : base(std::move(b)), options(o), pool(o.threads) {
    SAMPAN_CHECK(base != nullptr, ErrorCode::kInvalidArgument, "LoraTrainer: no base model");
    const models::LlamaWeights* w = models::llama_weights_of(*base);
    SAMPAN_CHECK(w != nullptr, ErrorCode::kUnsupported,
                 "{}: LoRA training needs a Llama-family decoder (hf or gguf), not {} '{}'",
                 base->path, base->format, base->architecture);
    SAMPAN_CHECK(options.lora.dropout >= 0 && options.lora.dropout < 1, ErrorCode::kInvalidArgument,
                 "LoRA dropout {} outside [0, 1)", options.lora.dropout);
    const HfConfig& c = base->config;
    if (initial != nullptr) {
      models::check_lora_adapter(*initial, c);
      adapter = *initial;
      for (auto& layer : adapter.layers) {
        for (models::LoraPair& p : layer) {
          if (!p.defined()) continue;
          p.a = f32_copy(p.a);
          p.b = f32_copy(p.b);
        }
      }
    } else {
      adapter = models::make_lora_adapter(options.lora, c, options.seed);
    }
    // The adapter's own rank, alpha and targets define the graph; dropout is a training choice.
    models::LoraConfig graph_lora = adapter.config;
    const bool bf16 = options.precision == models::Precision::kBf16;
    train = build_train_graph(c, *w, graph_lora,
                              {options.lora.dropout, true, options.recompute, bf16,
                               options.merge_roundings, options.fold_roundings});
    eval = build_train_graph(c, *w, graph_lora,
                             {0.0, false, false, bf16, options.merge_roundings,
                              options.fold_roundings});
    train_exec = std::make_unique<graph::Executor>(train.graph, pool);
    eval_exec = std::make_unique<graph::Executor>(eval.graph, pool);
    for (const LoraParam& p : train.params) {
      models::LoraPair& pair =
          adapter.layers.at(static_cast<size_t>(p.layer))[static_cast<size_t>(p.module)];
      SAMPAN_CHECK(pair.defined(), ErrorCode::kInvalidArgument,
                   "adapter '{}': {} is targeted but has no weights", adapter.name,
                   models::lora_tensor_name(p.layer, p.module, p.matrix));
      const Tensor& t = p.matrix == 'A' ? pair.a : pair.b;
      weights.push_back(t);
      const size_t n = static_cast<size_t>(t.numel());
      grads.emplace_back(n, 0.0f);
      exp_avg.emplace_back(n, 0.0f);
      exp_avg_sq.emplace_back(n, 0.0f);
    }
  }

  std::map<std::string, Tensor> feeds(const TrainBatch& b, uint64_t seed) const {
    SAMPAN_CHECK(b.batch > 0 && b.seq_len > 0, ErrorCode::kInvalidArgument,
                 "train batch: batch {} and seq_len {} must be positive", b.batch, b.seq_len);
    const size_t n = static_cast<size_t>(b.batch * b.seq_len);
    SAMPAN_CHECK(b.ids.size() == n && b.targets.size() == n &&
                     b.lengths.size() == static_cast<size_t>(b.batch),
                 ErrorCode::kInvalidArgument,
                 "train batch: {} ids, {} targets and {} lengths for {} x {} rows", b.ids.size(),
                 b.targets.size(), b.lengths.size(), b.batch, b.seq_len);
    std::vector<int32_t> pos(n);
    for (int64_t s = 0; s < b.batch; ++s) {
      const int32_t len = b.lengths[static_cast<size_t>(s)];
      SAMPAN_CHECK(len >= 0 && len <= b.seq_len, ErrorCode::kInvalidArgument,
                   "train batch: lengths[{}] = {} outside [0, {}]", s, len, b.seq_len);
      for (int64_t t = 0; t < b.seq_len; ++t) {
        const size_t r = static_cast<size_t>(s * b.seq_len + t);
        pos[r] = static_cast<int32_t>(t);
        SAMPAN_CHECK(t < len || b.targets[r] == kIgnoreIndex, ErrorCode::kInvalidArgument,
                     "train batch: row {} position {} is padding (length {}) but has target {}", s,
                     t, len, b.targets[r]);
      }
    }
    const int64_t rows = static_cast<int64_t>(n);
    std::map<std::string, Tensor> f;
    f["ids"] = Tensor::from_i32({rows}, b.ids);
    f["positions"] = Tensor::from_i32({rows}, pos);
    f["lengths"] = Tensor::from_i32({b.batch}, b.lengths);
    f["targets"] = Tensor::from_i32({rows}, b.targets);
    f["dropout_seed"] =
        Tensor::from_i32({2}, {static_cast<int32_t>(static_cast<uint32_t>(seed)),
                               static_cast<int32_t>(static_cast<uint32_t>(seed >> 32))});
    for (size_t i = 0; i < train.params.size(); ++i) f[train.params[i].input] = weights[i];
    return f;
  }
};

LoraTrainer::LoraTrainer(std::shared_ptr<const models::Model> base, const TrainerOptions& options,
                         const models::LoraAdapter* initial)
    : impl_(std::make_unique<Impl>(std::move(base), options, initial)) {}

LoraTrainer::~LoraTrainer() = default;

namespace {

// kF32 training keeps every GEMM exact in f32: on AMX CPUs the default GEMM precision would
// split x into 16 bits and round f16 and dequantized weights to bf16 (cpu::GemmPrecision).
bool exact_gemms(const TrainerOptions& o) { return o.precision == models::Precision::kF32; }

}  // namespace

MicroResult LoraTrainer::accumulate(const TrainBatch& batch) {
  Impl& m = *impl_;
  const ExactGemmScope scope(exact_gemms(m.options));
  const uint64_t seed = mix_seed(m.options.seed, m.draws);
  const std::vector<Tensor> out = m.train_exec->run(m.feeds(batch, seed));
  ++m.draws;
  for (size_t i = 0; i < m.train.params.size(); ++i) {
    const Tensor g = out[1 + i].contiguous();
    const float* src = g.data<float>();
    std::vector<float>& acc = m.grads[i];
    for (size_t j = 0; j < acc.size(); ++j) acc[j] += src[j];
  }
  return {static_cast<double>(out[0].contiguous().data<float>()[0]), batch.n_targets()};
}

double LoraTrainer::step(double lr, int64_t tokens) {
  Impl& m = *impl_;
  SAMPAN_CHECK(tokens > 0, ErrorCode::kInvalidArgument,
               "LoraTrainer::step: token count {} must be positive", tokens);
  std::vector<std::span<float>> spans;
  const float inv = static_cast<float>(1.0 / static_cast<double>(tokens));
  for (std::vector<float>& g : m.grads) {
    for (float& x : g) x *= inv;
    spans.emplace_back(g);
  }
  const double norm = clip_grad_norm(spans, m.options.max_grad_norm);
  ++m.steps;
  for (size_t i = 0; i < m.weights.size(); ++i) {
    const Tensor& w = m.weights[i];
    adamw_update({w.data<float>(), static_cast<size_t>(w.numel())}, m.grads[i], m.exp_avg[i],
                 m.exp_avg_sq[i], m.steps, lr, m.options.adamw);
    std::fill(m.grads[i].begin(), m.grads[i].end(), 0.0f);
  }
  return norm;
}

MicroResult LoraTrainer::evaluate(const TrainBatch& batch) {
  Impl& m = *impl_;
  const ExactGemmScope scope(exact_gemms(m.options));
  const std::vector<Tensor> out = m.eval_exec->run(m.feeds(batch, 0));
  return {static_cast<double>(out[0].contiguous().data<float>()[0]), batch.n_targets()};
}

std::map<std::string, Tensor> LoraTrainer::gradients() const {
  const Impl& m = *impl_;
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < m.train.params.size(); ++i) {
    const LoraParam& p = m.train.params[i];
    out[models::lora_tensor_name(p.layer, p.module, p.matrix)] =
        Tensor::from_f32(m.weights[i].shape(), m.grads[i]);
  }
  return out;
}

void LoraTrainer::set_profiling(bool on) { impl_->train_exec->set_profiling(on); }

std::vector<std::pair<std::string, double>> LoraTrainer::op_seconds() const {
  const graph::Executor& ex = *impl_->train_exec;
  std::map<std::string, double> by_op;
  const std::vector<double>& t = ex.node_seconds();
  const auto& nodes = ex.graph().nodes();
  for (size_t i = 0; i < t.size() && i < nodes.size(); ++i) by_op[nodes[i].op] += t[i];
  std::vector<std::pair<std::string, double>> out(by_op.begin(), by_op.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

const models::LoraAdapter& LoraTrainer::adapter() const { return impl_->adapter; }
int64_t LoraTrainer::steps_done() const { return impl_->steps; }

void LoraTrainer::save_state(const std::string& file) const {
  const Impl& m = *impl_;
  std::vector<NamedTensor> tensors;
  auto vec = [](const std::vector<float>& v, const Shape& shape) {
    return Tensor::from_f32(shape, v);
  };
  for (size_t i = 0; i < m.train.params.size(); ++i) {
    const LoraParam& p = m.train.params[i];
    const std::string name = models::lora_tensor_name(p.layer, p.module, p.matrix);
    const Shape& shape = m.weights[i].shape();
    tensors.push_back({name, m.weights[i]});
    tensors.push_back({name + ".exp_avg", vec(m.exp_avg[i], shape)});
    tensors.push_back({name + ".exp_avg_sq", vec(m.exp_avg_sq[i], shape)});
    tensors.push_back({name + ".grad", vec(m.grads[i], shape)});
  }
  const std::map<std::string, std::string> meta = {
      {"format", kStateFormat},
      {"steps", std::to_string(m.steps)},
      {"dropout_draws", std::to_string(m.draws)},
      {"seed", std::to_string(m.options.seed)},
      {"rank", std::to_string(m.adapter.config.rank)},
  };
  write_safetensors(file, tensors, meta);
}

void LoraTrainer::load_state(const std::string& file) {
  Impl& m = *impl_;
  const SafetensorsFile f = SafetensorsFile::open(file);
  const auto& meta = f.metadata();
  auto get_meta = [&](const char* key) -> const std::string& {
    const auto it = meta.find(key);
    SAMPAN_CHECK(it != meta.end(), ErrorCode::kInvalidArgument,
                 "{}: not a trainer state (metadata '{}' is missing)", file, key);
    return it->second;
  };
  SAMPAN_CHECK(get_meta("format") == kStateFormat, ErrorCode::kInvalidArgument,
               "{}: trainer state format '{}', expected '{}'", file, get_meta("format"),
               kStateFormat);
  SAMPAN_CHECK(std::stoull(get_meta("seed")) == m.options.seed, ErrorCode::kInvalidArgument,
               "{}: saved with seed {}, this trainer has seed {}", file, get_meta("seed"),
               m.options.seed);
  auto read = [&](const std::string& name, const Shape& shape, float* dst) {
    SAMPAN_CHECK(f.has(name), ErrorCode::kInvalidArgument, "{}: tensor '{}' is missing", file,
                 name);
    const Tensor t = f.get(name);
    SAMPAN_CHECK(t.dtype() == DType::kF32 && t.shape() == shape, ErrorCode::kInvalidArgument,
                 "{}: tensor '{}' is {}, expected f32{}", file, name, t.str(), shape_str(shape));
    const Tensor c = t.contiguous();
    std::memcpy(dst, c.raw(), static_cast<size_t>(c.nbytes()));
  };
  for (size_t i = 0; i < m.train.params.size(); ++i) {
    const LoraParam& p = m.train.params[i];
    const std::string name = models::lora_tensor_name(p.layer, p.module, p.matrix);
    const Shape& shape = m.weights[i].shape();
    read(name, shape, m.weights[i].data<float>());
    read(name + ".exp_avg", shape, m.exp_avg[i].data());
    read(name + ".exp_avg_sq", shape, m.exp_avg_sq[i].data());
    read(name + ".grad", shape, m.grads[i].data());
  }
  m.steps = std::stoll(get_meta("steps"));
  m.draws = std::stoull(get_meta("dropout_draws"));
}

}  // namespace sampan::train
