// The harness shared by the Catch2 tests that compare the CUDA backend with the CPU backend
// (tests/cuda/test_cuda_*.cc, each built by sampan_add_cuda_test in tests/CMakeLists.txt).
//
// cuda_test_util.cc holds the binaries' main(): with no CUDA device visible it prints
// "SKIPPED: no CUDA device visible" and exits 77 (CTest: "Skipped") before Catch starts, so a
// machine without a GPU shows one skip per binary, not one failure per test case. A test file
// holds only its TEST_CASEs; work a binary needs before its first test goes in a Catch listener
// (test_cuda_linear.cc pins the CPU's instruction set that way).
//
// The CPU backend is the reference every helper compares against: its kernels are tested
// against plain loops and numpy in tests/kernels.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/graph.h"

namespace sampan::cuda_test {

// The GPU every test runs on; main() has checked that it exists.
inline const Device kGpu = Device::cuda(0);

// The task runner of every executor a test makes, CPU or CUDA (2 threads, so the CPU reference
// takes its multi-threaded paths).
ThreadPool& pool();

// Graph input dimensions that are all fixed.
std::vector<graph::Dim> fixed(const Shape& shape);

// f32 host tensor of N(0, scale^2) values drawn from `rng` in element order.
Tensor random_f32(const Shape& shape, std::mt19937& rng, float scale = 1.0f);

// `f` (f32, host) converted to `type`, kF16 or kBF16, by kernels/common/half.h.
Tensor to_half_type(const Tensor& f, DType type);

// Runs `g` on `device` and returns its outputs copied to the host, checking that each output
// was on `device`.
std::vector<Tensor> run_on(const graph::Graph& g, const std::map<std::string, Tensor>& inputs,
                           Device device);

// |got - want| <= atol + rtol * |want| everywhere (both read as f32), NaN exactly where want is
// NaN; reports the number of mismatches and the first one.
void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol,
                  const std::string& what);

// The same bytes (host tensors of the same size, any dtype): for outputs both backends must
// produce identically, such as quantized KV pools.
void expect_same_bytes(const Tensor& got, const Tensor& want, const std::string& what);

// Same graph, same inputs: the CUDA outputs against the CPU outputs with expect_close.
// `gpu_inputs` replaces `inputs` for the CUDA run when given (device or strided bindings).
void compare_backends(const graph::Graph& g, const std::map<std::string, Tensor>& inputs,
                      double rtol, double atol, const std::string& what,
                      const std::map<std::string, Tensor>* gpu_inputs = nullptr);

// Index of the first maximum of row[0, n), like the CPU sampler's greedy choice.
int64_t argmax(const float* row, int64_t n);

// A row's top two logits of the reference closer than kNearTie times the rms of the row's
// difference between the devices (their measured noise there) make the row a near tie: either
// device may pick either token. The GPU rounds activations to bf16 / f16 in its GEMMs (gemm.cuh),
// the CPU keeps them to 2^-16 or exact, so a row whose top two logits differ by less than that
// noise has no right answer; a real fault moves the cosine too, or flips decided rows.
inline constexpr double kNearTie = 5.0;

// How closely two sets of logits agree, row by row.
struct Agreement {
  double min_cosine = 1.0;
  double top1 = 0;          // fraction of all rows with the same argmax
  int64_t rows = 0;
  int64_t near_ties = 0;    // rows whose reference top-2 gap is within kNearTie x rms(b - a)
  double top1_decided = 1;  // fraction of the other rows with the same argmax
};

// a (the reference), b: [rows, vocab] f32 host tensors; every value of b must be finite
// (REQUIREd).
Agreement compare_logits(const Tensor& a, const Tensor& b);

// Whether the reference row `a` nearly ties (see kNearTie) between its argmax and token `t`,
// given the other device's row `b` for the noise.
bool near_tie(const float* a, const float* b, int64_t vocab, int64_t t);

}  // namespace sampan::cuda_test
