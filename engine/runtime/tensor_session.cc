#include "engine/runtime/tensor_session.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <new>

#include "engine/core/log.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"

namespace sampan::runtime {
namespace {

// "[batch, 3, height, width]"
std::string spec_shape(const models::TensorSpec& spec) {
  std::vector<std::string> dims;
  for (const graph::Dim& d : spec.shape) dims.push_back(d.symbolic() ? d.symbol : std::to_string(d.size));
  return fmt::format("[{}]", fmt::join(dims, ", "));
}


// First-dimension rows of a request (feeds are validated: every input has rank >= 1 when the
// session is batchable).
int64_t rows_of(const std::map<std::string, Tensor>& feeds) {
  return feeds.begin()->second.shape()[0];
}

// Whether two validated requests agree on every dimension but the first of every input.
bool same_but_first(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  for (const auto& [name, t] : a) {
    const Tensor& u = b.at(name);
    if (t.rank() != u.rank()) return false;
    for (int d = 1; d < t.rank(); ++d) {
      if (t.shape()[static_cast<size_t>(d)] != u.shape()[static_cast<size_t>(d)]) return false;
    }
  }
  return true;
}

// The first dimension every input and output shares, or why requests cannot be merged.
std::optional<std::string> batch_symbol(const models::Signature& sig, std::string* why) {
  std::optional<std::string> sym;
  for (const auto* list : {&sig.inputs, &sig.outputs}) {
    for (const models::TensorSpec& s : *list) {
      if (s.shape.empty() || !s.shape[0].symbolic()) {
        *why = fmt::format("'{}' has no symbolic first dimension ({})", s.api_name, spec_shape(s));
        return std::nullopt;
      }
      if (sym && *sym != s.shape[0].symbol) {
        *why = fmt::format("'{}' starts with {}, not {}", s.api_name, s.shape[0].symbol, *sym);
        return std::nullopt;
      }
      sym = s.shape[0].symbol;
    }
  }
  for (const auto* list : {&sig.inputs, &sig.outputs}) {
    for (const models::TensorSpec& s : *list) {
      for (size_t d = 1; d < s.shape.size(); ++d) {
        if (s.shape[d].symbolic() && s.shape[d].symbol == *sym) {
          *why = fmt::format("'{}' uses {} in dimension {} too", s.api_name, *sym, d);
          return std::nullopt;
        }
      }
    }
  }
  if (!sym) *why = "the model has no inputs";
  return sym;
}

}  // namespace

TensorSession::TensorSession(std::shared_ptr<const models::Model> model, TensorSessionOptions options)
    : model_(std::move(model)), options_(options) {
  SAMPAN_CHECK(model_ != nullptr, ErrorCode::kInternal, "TensorSession: no model");
  for (const auto* list : {&model_->signature.inputs, &model_->signature.outputs}) {
    for (const models::TensorSpec& s : *list) {
      SAMPAN_CHECK(s.role == models::TensorRole::kData, ErrorCode::kUnsupported,
                   "{}: tensor '{}' has role {}; a tensor session runs classic models (ONNX), "
                   "not language models", model_->path, s.api_name, models::tensor_role_name(s.role));
    }
  }
  options_.executors = std::max(1, options_.executors);
  options_.max_waiting = std::max(0, options_.max_waiting);
  options_.max_batch = std::max(1, options_.max_batch);
  batch_symbol_ = batch_symbol(model_->signature, &not_batchable_);
  pool_ = std::make_unique<ThreadPool>(options_.threads);
  for (int i = 0; i < options_.executors; ++i) {
    executors_.push_back(std::make_unique<graph::Executor>(model_->graph, *pool_));
  }
  for (size_t i = 0; i < executors_.size(); ++i) workers_.emplace_back([this, i] { worker(i); });
}

TensorSession::~TensorSession() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    exiting_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

std::map<std::string, Tensor> TensorSession::validate(
    const std::map<std::string, Tensor>& inputs) const {
  const models::Signature& sig = model_->signature;
  for (const auto& [name, t] : inputs) {
    const bool known = std::any_of(sig.inputs.begin(), sig.inputs.end(),
                                   [&](const models::TensorSpec& s) { return s.api_name == name; });
    if (!known) {
      std::vector<std::string> names;
      for (const auto& s : sig.inputs) names.push_back(s.api_name);
      fail_field(ErrorCode::kInvalidArgument, name, "unknown input '{}'; the model takes {}", name,
                 fmt::join(names, ", "));
    }
  }
  // Each symbol's size and the input that fixed it.
  std::map<std::string, std::pair<int64_t, std::string>> symbols;
  std::map<std::string, Tensor> feeds;
  for (const models::TensorSpec& spec : sig.inputs) {
    const std::string& name = spec.api_name;
    const auto it = inputs.find(name);
    if (it == inputs.end()) {
      fail_field(ErrorCode::kInvalidArgument, name, "input '{}' ({}{}) is missing", name,
                 dtype_name(spec.dtype), spec_shape(spec));
    }
    const Tensor& t = it->second;
    if (t.dtype() != spec.dtype) {
      fail_field(ErrorCode::kInvalidArgument, name, "input '{}' has dtype {}; the model takes {}",
                 name, dtype_name(t.dtype()), dtype_name(spec.dtype));
    }
    bool ok = static_cast<size_t>(t.rank()) == spec.shape.size();
    for (size_t d = 0; ok && d < spec.shape.size(); ++d) {
      ok = spec.shape[d].symbolic() || t.shape()[d] == spec.shape[d].size;
    }
    if (!ok) {
      fail_field(ErrorCode::kInvalidArgument, name, "input '{}' has shape {}; the model takes {}",
                 name, shape_str(t.shape()), spec_shape(spec));
    }
    for (size_t d = 0; d < spec.shape.size(); ++d) {
      if (!spec.shape[d].symbolic()) continue;
      const std::string& sym = spec.shape[d].symbol;
      const int64_t n = t.shape()[d];
      if (n < 1) {
        fail_field(ErrorCode::kInvalidArgument, name,
                   "input '{}' has shape {}: dimension {} ({}) must be at least 1", name,
                   shape_str(t.shape()), d, sym);
      }
      const auto [s, fresh] = symbols.emplace(sym, std::make_pair(n, name));
      if (!fresh && s->second.first != n) {
        fail_field(ErrorCode::kInvalidArgument, name,
                   "input '{}' has shape {} with {} = {}, but input '{}' has {} = {}", name,
                   shape_str(t.shape()), sym, n, s->second.second, sym, s->second.first);
      }
    }
    SAMPAN_CHECK((t.device() == Device::cpu()), ErrorCode::kInvalidArgument, "input '{}' is not on the CPU",
                 name);
    feeds[spec.name] = t.is_contiguous() ? t : t.contiguous();
  }
  return feeds;
}

void TensorSession::submit(const std::map<std::string, Tensor>& inputs, Done done) {
  std::map<std::string, Tensor> feeds = validate(inputs);
  {
    std::lock_guard<std::mutex> lock(mu_);
    SAMPAN_CHECK(!stopping_, ErrorCode::kUnavailable, "the server is shutting down");
    SAMPAN_CHECK(static_cast<int64_t>(queue_.size()) < options_.max_waiting + options_.executors -
                                                           running_runs_,
                 ErrorCode::kResourceExhausted,
                 "{} requests are waiting (the limit is {}); retry later", queue_.size(),
                 options_.max_waiting);
    queue_.push_back(Job{std::move(feeds), std::move(done)});
    // A worker collecting a batch must see it; idle workers stay asleep while one collects.
    if (collecting_ > 0) {
      work_cv_.notify_all();
      return;
    }
  }
  work_cv_.notify_one();
}

std::vector<Tensor> TensorSession::run(const std::map<std::string, Tensor>& inputs) {
  auto promise = std::make_shared<std::promise<std::vector<Tensor>>>();
  std::future<std::vector<Tensor>> result = promise->get_future();
  submit(inputs, [promise](std::vector<Tensor> outputs, std::optional<Error> error) {
    if (error) {
      promise->set_exception(std::make_exception_ptr(*error));
    } else {
      promise->set_value(std::move(outputs));
    }
  });
  return result.get();
}

void TensorSession::collect(std::unique_lock<std::mutex>& lock, std::vector<Job>& batch) {
  if (!batch_symbol_ || options_.max_batch <= 1) return;
  int64_t rows = rows_of(batch[0].feeds);
  if (rows >= options_.max_batch) return;
  const auto deadline = std::chrono::steady_clock::now() + options_.batch_delay;
  ++collecting_;
  for (;;) {
    for (auto it = queue_.begin(); it != queue_.end() && rows < options_.max_batch;) {
      const int64_t r = rows_of(it->feeds);
      if (rows + r <= options_.max_batch && same_but_first(batch[0].feeds, it->feeds)) {
        rows += r;
        batch.push_back(std::move(*it));
        it = queue_.erase(it);
        ++running_;
      } else {
        ++it;
      }
    }
    if (rows >= options_.max_batch || exiting_ ||
        std::chrono::steady_clock::now() >= deadline) {
      break;
    }
    work_cv_.wait_until(lock, deadline);
  }
  --collecting_;
  // Requests this batch could not take are the idle workers' again.
  if (!queue_.empty()) work_cv_.notify_all();
}

std::vector<Tensor> TensorSession::run_one(size_t index, const std::map<std::string, Tensor>& feeds) {
  try {
    if (!executors_[index]) {
      executors_[index] = std::make_unique<graph::Executor>(model_->graph, *pool_);
    }
    std::vector<Tensor> outputs;
    // Views of the executor's arena, valid until its next run: copied out.
    for (const Tensor& t : executors_[index]->run(feeds)) {
      outputs.push_back((t.device() == Device::cpu()) ? t.clone() : t.to(Device::cpu()));
    }
    return outputs;
  } catch (...) {
    // A run that threw may have left the executor half-way: the next request gets a new one.
    executors_[index].reset();
    throw;
  }
}

std::vector<std::vector<Tensor>> TensorSession::run_batch(size_t index, std::vector<Job>& jobs) {
  std::vector<std::vector<Tensor>> out(jobs.size());
  if (jobs.size() > 1) {
    try {
      // Inputs concatenated along dimension 0, in job order.
      std::map<std::string, Tensor> feeds;
      int64_t total = 0;
      for (const Job& j : jobs) total += rows_of(j.feeds);
      for (const auto& [name, first] : jobs[0].feeds) {
        Shape shape = first.shape();
        shape[0] = total;
        Tensor t = Tensor::empty(shape, first.dtype());
        auto* dst = static_cast<uint8_t*>(t.raw());
        for (const Job& j : jobs) {
          const Tensor& src = j.feeds.at(name);
          std::memcpy(dst, src.raw(), static_cast<size_t>(src.nbytes()));
          dst += src.nbytes();
        }
        feeds.emplace(name, std::move(t));
      }
      const std::vector<Tensor> merged = run_one(index, feeds);
      for (const Tensor& t : merged) {
        SAMPAN_CHECK(t.rank() >= 1 && t.shape()[0] == total, ErrorCode::kInternal,
                     "a merged run of {} rows gave an output of shape {}", total,
                     shape_str(t.shape()));
      }
      int64_t r0 = 0;
      for (size_t i = 0; i < jobs.size(); ++i) {
        const int64_t r = rows_of(jobs[i].feeds);
        for (const Tensor& t : merged) out[i].push_back(t.slice(0, r0, r0 + r).clone());
        r0 += r;
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.runs;
      stats_.requests += static_cast<int64_t>(jobs.size());
      stats_.rows += total;
      return out;
    } catch (...) {
      // One request may be what failed (an id out of range): each runs alone below.
      log::debug("tensor session: a merged run of {} requests failed ({}); running them one by one",
                 jobs.size(), current_error().what());
      out.assign(jobs.size(), {});
    }
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    try {
      out[i] = run_one(index, jobs[i].feeds);
    } catch (...) {
      jobs[i].error = current_error();
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.runs;
    ++stats_.requests;
    stats_.rows += batch_symbol_ ? rows_of(jobs[i].feeds) : 0;
  }
  return out;
}

void TensorSession::worker(size_t index) {
  for (;;) {
    std::vector<Job> jobs;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return (!queue_.empty() && collecting_ == 0) || exiting_; });
      if (queue_.empty()) return;
      jobs.push_back(std::move(queue_.front()));
      queue_.pop_front();
      ++running_;
      ++running_runs_;
      collect(lock, jobs);
    }
    std::vector<std::vector<Tensor>> outputs = run_batch(index, jobs);
    for (size_t i = 0; i < jobs.size(); ++i) {
      jobs[i].feeds.clear();
      try {
        jobs[i].done(std::move(outputs[i]), std::move(jobs[i].error));
      } catch (...) {
        log::warn("tensor session: a completion callback threw: {}", current_error().what());
      }
      jobs[i].done = nullptr;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ -= static_cast<int64_t>(jobs.size());
      --running_runs_;
      if (queue_.empty() && running_ == 0) idle_cv_.notify_all();
    }
  }
}

void TensorSession::shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
}

bool TensorSession::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [&] { return queue_.empty() && running_ == 0; });
}

int64_t TensorSession::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

int64_t TensorSession::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(queue_.size());
}

TensorBatchStats TensorSession::batch_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace sampan::runtime
