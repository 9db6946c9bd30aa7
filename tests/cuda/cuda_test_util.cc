// The CUDA tests' main() and the helpers of cuda_test_util.h. Catch's implementation is compiled
// here once, for every CUDA test binary.
#define CATCH_CONFIG_RUNNER
#include "tests/cuda/cuda_test_util.h"

#include "kernels/cuda/device_query.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "engine/graph/executor.h"
#include "kernels/common/half.h"

namespace sampan::cuda_test {

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

std::vector<graph::Dim> fixed(const Shape& shape) {
  std::vector<graph::Dim> dims;
  for (int64_t d : shape) dims.push_back(graph::Dim::fixed(d));
  return dims;
}

Tensor random_f32(const Shape& shape, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = d(rng);
  return Tensor::from_f32(shape, v);
}

Tensor to_half_type(const Tensor& f, DType type) {
  Tensor t = Tensor::empty(f.shape(), type);
  for (int64_t i = 0; i < f.numel(); ++i) {
    const float v = f.data<float>()[i];
    t.data<uint16_t>()[i] = type == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
  }
  return t;
}

std::vector<Tensor> run_on(const graph::Graph& g, const std::map<std::string, Tensor>& inputs,
                           Device device) {
  graph::Executor ex(g, pool(), device);
  std::vector<Tensor> host;
  for (const Tensor& t : ex.run(inputs)) {
    CHECK(t.device() == device);
    host.push_back(t.to(Device::cpu()));
  }
  return host;
}

void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol,
                  const std::string& what) {
  REQUIRE(got.shape() == want.shape());
  const Tensor g = got.to_f32();
  const Tensor w = want.to_f32();
  int64_t bad = 0;
  std::ostringstream first;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double a = g.data<float>()[i];
    const double b = w.data<float>()[i];
    const bool ok = std::isnan(b) ? std::isnan(a) : std::fabs(a - b) <= atol + rtol * std::fabs(b);
    if (!ok && bad++ == 0) first << "element " << i << ": cuda " << a << ", cpu " << b;
  }
  INFO(what << " " << want.str() << ": " << bad << " of " << want.numel()
            << " differ; first at " << first.str());
  CHECK(bad == 0);
}

void expect_same_bytes(const Tensor& got, const Tensor& want, const std::string& what) {
  REQUIRE(got.nbytes() == want.nbytes());
  const auto* a = static_cast<const uint8_t*>(got.raw());
  const auto* b = static_cast<const uint8_t*>(want.raw());
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < want.nbytes(); ++i) {
    if (a[i] != b[i] && bad++ == 0) first = i;
  }
  INFO(what << ": " << bad << " bytes differ, first at byte " << first);
  CHECK(bad == 0);
}

void compare_backends(const graph::Graph& g, const std::map<std::string, Tensor>& inputs,
                      double rtol, double atol, const std::string& what,
                      const std::map<std::string, Tensor>* gpu_inputs) {
  const std::vector<Tensor> want = run_on(g, inputs, Device::cpu());
  const std::vector<Tensor> got = run_on(g, gpu_inputs ? *gpu_inputs : inputs, kGpu);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    expect_close(got[i], want[i], rtol, atol, what + " output " + std::to_string(i));
  }
}

int64_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

bool near_tie(const float* a, const float* b, int64_t vocab, int64_t t) {
  double ss = 0;
  for (int64_t j = 0; j < vocab; ++j) {
    const double d = static_cast<double>(b[j]) - a[j];
    ss += d * d;
  }
  const double noise = std::sqrt(ss / static_cast<double>(vocab));
  return static_cast<double>(a[argmax(a, vocab)]) - a[t] <= kNearTie * noise;
}

Agreement compare_logits(const Tensor& a, const Tensor& b) {
  REQUIRE(a.device() == Device::cpu());
  REQUIRE(b.device() == Device::cpu());
  REQUIRE(a.shape() == b.shape());
  const int64_t rows = a.dim(0), vocab = a.dim(1);
  Agreement r;
  r.rows = rows;
  int64_t same = 0, same_decided = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = a.data<float>() + i * vocab;
    const float* y = b.data<float>() + i * vocab;
    double xy = 0, xx = 0, yy = 0;
    for (int64_t j = 0; j < vocab; ++j) {
      REQUIRE(std::isfinite(y[j]));
      xy += static_cast<double>(x[j]) * y[j];
      xx += static_cast<double>(x[j]) * x[j];
      yy += static_cast<double>(y[j]) * y[j];
    }
    r.min_cosine = std::min(r.min_cosine, xy / std::sqrt(xx * yy));
    const int64_t top = argmax(x, vocab);
    const bool agree = top == argmax(y, vocab);
    same += agree ? 1 : 0;
    // The runner-up of the reference row: a near tie when it is within the noise of the top.
    int64_t second = top == 0 ? 1 : 0;
    for (int64_t j = 0; j < vocab; ++j) {
      if (j != top && x[j] > x[second]) second = j;
    }
    if (vocab > 1 && near_tie(x, y, vocab, second)) {
      ++r.near_ties;
    } else {
      same_decided += agree ? 1 : 0;
    }
  }
  r.top1 = static_cast<double>(same) / static_cast<double>(rows);
  const int64_t decided = rows - r.near_ties;
  r.top1_decided = decided > 0 ? static_cast<double>(same_decided) / static_cast<double>(decided) : 1;
  return r;
}

}  // namespace sampan::cuda_test

int main(int argc, char** argv) {
  std::string why;
  switch (sampan::cuda::probe_gpu(&why)) {
    case sampan::cuda::GpuPresence::kReady: break;
    case sampan::cuda::GpuPresence::kNoGpu:
      std::printf("SKIPPED: %s\n", why.c_str());
      return 77;  // SKIP_RETURN_CODE of every CUDA test (tests/CMakeLists.txt)
    case sampan::cuda::GpuPresence::kBroken:
      std::printf("FAILED: %s\n", why.c_str());
      return 1;
  }
  // Catch returns the number of failed test cases, which could be 77: any failure is 1.
  return Catch::Session().run(argc, argv) == 0 ? 0 : 1;
}
