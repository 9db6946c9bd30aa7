#include "engine/runtime/tensor_session.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
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
                                                           running_,
                 ErrorCode::kResourceExhausted,
                 "{} requests are waiting (the limit is {}); retry later", queue_.size(),
                 options_.max_waiting);
    queue_.push_back(Job{std::move(feeds), std::move(done)});
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

void TensorSession::worker(size_t index) {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return !queue_.empty() || exiting_; });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    std::vector<Tensor> outputs;
    std::optional<Error> error;
    try {
      if (!executors_[index]) {
        executors_[index] = std::make_unique<graph::Executor>(model_->graph, *pool_);
      }
      // Views of the executor's arena, valid until its next run: copied out.
      for (const Tensor& t : executors_[index]->run(job.feeds)) {
        outputs.push_back((t.device() == Device::cpu()) ? t.clone() : t.to(Device::cpu()));
      }
    } catch (...) {
      error = current_error();
      outputs.clear();
      // A run that threw may have left the executor half-way: the next request gets a new one.
      executors_[index].reset();
    }
    job.feeds.clear();
    try {
      job.done(std::move(outputs), std::move(error));
    } catch (...) {
      log::warn("tensor session: a completion callback threw: {}", current_error().what());
    }
    job.done = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
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

}  // namespace sampan::runtime
