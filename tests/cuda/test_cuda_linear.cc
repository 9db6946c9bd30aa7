// The CUDA kernel of `linear` against the CPU backend, for every weight format, fused blocks,
// bias and the silu_mul epilogue. One graph, the same inputs, run by a CPU and a CUDA executor.
// The CPU backend is the independent reference (its kernels are tested against plain loops in
// tests/kernels); it is pinned to its exact-f32 FMA path (no AMX bf16 rounding) below.
//
// Tolerance, per output element (row i, column j), derived from each path's documented error
// (kernels/cuda/gemm.cuh), with S = sum_k |x_ik| |w_jk| (w as dequantized by quant/) and
// W1 = sum_k |w_jk|, both computed here in double:
//   every path, both backends: f32 summation, c_acc = 16 sqrt(k) 2^-24 of S each (a random-walk
//     bound with a wide margin; the worst case k 2^-24 never occurs with random signs);
//   f32 weights: nothing more (no TF32);
//   bf16 weights: x rounded to bf16, <= 2^-8 S;
//   f16 weights: x rounded to f16, <= 2^-11 S, plus 2^-25 W1 for x in f16's subnormal range;
//   fp8, m <= kFp8GemvMaxM (GEMV; up to kGemvMaxM where the tensor path is not taken):
//     exact dequantization, nothing more;
//   int4, m < 16 (the CPU's decode kernels, on every ISA): the CPU rounds x per weight group g
//     to x16, <= kI4DecodeXError sum_g max_{c in g} |x_ic| sum_{c in g} |w_jc| (gemm_quant.h);
//     the CUDA int4 GEMV (m <= kGemvMaxM) rounds x to the same x16 bits (the same f32
//     operations), so the two differ by f32 summation only (its misaligned-weight variant keeps
//     x exact: within the CPU's term);
//   int4 up to kI4GemvSlicesMaxM: the GEMV per kGemvMaxM rows of x, as above;
//   int4 above (the dequant path): x and w each rounded to bf16, <= (2^-7 + 2^-16) S;
//   fp8, m > kFp8GemvMaxM: on sm_89+ each row of x quantized to E4M3 with its own scale,
//     <= 2^-4 S + 2^-10 (max_c |x_ic| / 448) W1 (the bf16 fallback's 2^-7 S is inside that
//     bound); that cuBLASLt really ran it is checked too (cuda::fp8_tensor_refusals);
//   silu_mul: the gate and up tolerances t_g, t_u propagate as |silu'(g)| |u| t_g + |silu(g)| t_u
//     (|silu'| < 1.1), plus CUDA's expf (2 ulp) and the CPU's vector exp, 1e-6 relative.
// A wrong index, group, scale or zero point gives errors of the order of S itself, far above
// every bound here; the GEMV cases are held to f32 rounding (plus, for int4, the CPU's x16 term).
//
// Without a GPU the binary prints "SKIPPED: no CUDA device visible" and exits 77 (CTest: skipped)
// before Catch starts: main() is in cuda_test_util.cc.
//
// Catch's listener interface (TestEventListenerBase) is declared only with this defined.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/graph/graph.h"
#include "engine/models/model_options.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/isa.h"
#include "kernels/cuda/gemm.cuh"
#include "engine/models/weight_quant.h"
#include "tests/cuda/cuda_test_util.h"

using namespace sampan;
using namespace sampan::graph;
using namespace sampan::cuda_test;

namespace {

// The reference: the CPU's exact-f32 FMA path (AMX would round x or the weights to bf16). Set
// when the test run starts, after main() has found a GPU, before any weight is made.
struct PinExactCpuPath : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(const Catch::TestRunInfo& info) override {
    TestEventListenerBase::testRunStarting(info);
    if (!cpu::set_isa(cpu::Isa::kAvx512)) cpu::set_isa(cpu::Isa::kAvx2);
  }
};
CATCH_REGISTER_LISTENER(PinExactCpuPath)

// A weight format under test. scheme.format is kNone for the float formats.
struct Format {
  std::string name;
  DType wtype = DType::kF32;
  models::QuantScheme scheme;
};

Format float_format(DType t) { return {dtype_name(t), t, {}}; }
Format fp8_format() {
  models::QuantScheme s;
  s.format = models::WeightFormat::kFp8;
  return {"fp8", DType::kF8E4M3, s};
}
Format int4_format(int64_t g, bool sym, DType scale_dtype) {
  models::QuantScheme s;
  s.format = models::WeightFormat::kInt4;
  s.group_size = g;
  s.symmetric = sym;
  s.scale_dtype = scale_dtype;
  return {"int4 g" + std::to_string(g) + (sym ? " sym " : " asym ") + dtype_name(scale_dtype),
          DType::kI4, s};
}

// One weight block: what the graph gets, and the f32 matrix it stands for.
struct Block {
  Tensor data, scales, zeros, bias;  // scales / zeros / bias undefined when absent
  Tensor dequantized;                // [n, k] f32
};

Block make_block(const Format& f, int64_t n, int64_t k, bool with_bias, std::mt19937& rng) {
  Block b;
  const Tensor w = random_f32({n, k}, rng, 0.5f);
  if (f.scheme.format != models::WeightFormat::kNone) {
    const models::QuantizedMatrix q = models::quantize_matrix(w, f.scheme, "w");
    b.data = q.data;
    b.scales = q.scales;
    b.zeros = q.zeros;
    b.dequantized = models::dequantize_matrix(q, f.scheme, "w");
  } else if (f.wtype == DType::kF32) {
    b.data = w;
    b.dequantized = w;
  } else {
    b.data = to_half_type(w, f.wtype);
    b.dequantized = b.data.to_f32();
  }
  if (with_bias) b.bias = random_f32({n}, rng);
  return b;
}

// linear(x, w_0.., bias_0.., scales_0.., zeros_0..) with every slot group present (kNoValue
// for absent tensors). `device_weights` binds the weights as constants already on the GPU.
Graph linear_graph(int64_t m, int64_t k, const Format& f, const std::vector<Block>& blocks,
                   bool silu_mul, const std::vector<Tensor>* device_weights = nullptr) {
  Graph g;
  const int64_t nb = static_cast<int64_t>(blocks.size());
  std::vector<ValueId> in(static_cast<size_t>(1 + 4 * nb), kNoValue);
  in[0] = g.add_input("x", DType::kF32, fixed({m, k}));
  for (int64_t i = 0; i < nb; ++i) {
    const Block& b = blocks[static_cast<size_t>(i)];
    const std::string s = std::to_string(i);
    const size_t at = static_cast<size_t>(i);
    in[static_cast<size_t>(1 + i)] =
        g.add_constant("w" + s, device_weights ? (*device_weights)[at] : b.data);
    if (b.bias.defined() && b.bias.numel() > 0) {
      in[static_cast<size_t>(1 + nb + i)] = g.add_constant("b" + s, b.bias);
    }
    if (b.scales.defined() && b.scales.numel() > 0) {
      in[static_cast<size_t>(1 + 2 * nb + i)] = g.add_constant("s" + s, b.scales);
    }
    if (b.zeros.defined() && b.zeros.numel() > 0) {
      in[static_cast<size_t>(1 + 3 * nb + i)] = g.add_constant("z" + s, b.zeros);
    }
  }
  Attributes attrs{{"n_blocks", nb}};
  if (f.wtype == DType::kI4) attrs.set("group_size", f.scheme.group_size);
  if (silu_mul) attrs.set("epilogue", std::string("silu_mul"));
  g.mark_output(g.add("linear", "proj", in, attrs));
  return g;
}

// Tolerance of one output of x · w_blockᵀ (see the top of the file); also the exact value.
struct Bound {
  double value = 0;  // the product (+ bias) in double
  double tol = 0;
};

Bound bound(const Format& f, int64_t m, const float* xr, int64_t k, const Block& b, int64_t j) {
  const float* wr = b.dequantized.data<float>() + j * k;
  double dot = 0, s = 0, w1 = 0;
  for (int64_t c = 0; c < k; ++c) {
    dot += static_cast<double>(xr[c]) * wr[c];
    s += std::fabs(static_cast<double>(xr[c]) * wr[c]);
    w1 += std::fabs(static_cast<double>(wr[c]));
  }
  const bool bias = b.bias.defined() && b.bias.numel() > 0;
  const double value = dot + (bias ? b.bias.data<float>()[j] : 0.0);
  const bool gemv = m <= (f.wtype == DType::kI4      ? cuda::kI4GemvSlicesMaxM
                          : f.wtype == DType::kF8E4M3 ? cuda::kFp8GemvMaxM
                                                      : cuda::kGemvMaxM);
  double rel = 2 * 16 * std::sqrt(static_cast<double>(k)) * std::ldexp(1.0, -24);
  double abs = std::ldexp(std::fabs(value), -23);  // the final bias add, either side
  switch (f.wtype) {
    case DType::kF32: break;
    case DType::kBF16: rel += std::ldexp(1.0, -8); break;
    case DType::kF16:
      rel += std::ldexp(1.0, -11);
      abs += std::ldexp(w1, -25);
      break;
    case DType::kI4:
      if (!gemv) rel += std::ldexp(1.0, -7) + std::ldexp(1.0, -16);
      // The CPU reference's int4 decode kernels (m below kQuantPrefillMinM, on every ISA) round
      // x per weight group to x16 (gemm_quant.h): kI4DecodeXError * sum_g absmax_g(x) W1_g.
      if (m < cpu::gemm_detail::kQuantPrefillMinM) {
        const int64_t gs = f.scheme.group_size;
        for (int64_t g0 = 0; g0 < k; g0 += gs) {
          double ax = 0, wg = 0;
          for (int64_t c = g0; c < std::min(k, g0 + gs); ++c) {
            ax = std::max(ax, std::fabs(static_cast<double>(xr[c])));
            wg += std::fabs(static_cast<double>(wr[c]));
          }
          abs += cpu::gemm_detail::kI4DecodeXError * ax * wg;
        }
      }
      break;
    case DType::kF8E4M3:
      if (!gemv) {
        double row_max = 0;
        for (int64_t c = 0; c < k; ++c) row_max = std::max(row_max, std::fabs(static_cast<double>(xr[c])));
        rel += std::ldexp(1.0, -4);
        abs += std::ldexp(row_max / 448.0, -10) * w1;
      }
      break;
    default: FAIL("unexpected weight type");
  }
  return {value, rel * s + abs};
}

double silu(double g) { return g / (1.0 + std::exp(-g)); }

// Runs the graph on both backends and checks every element against its own tolerance.
void compare(const Format& f, int64_t m, int64_t k, const std::vector<Block>& blocks, bool silu_mul,
             std::mt19937& rng, const std::string& what,
             const std::vector<Tensor>* device_weights = nullptr) {
  const Tensor x = random_f32({m, k}, rng);
  const Tensor want = run_on(linear_graph(m, k, f, blocks, silu_mul), {{"x", x}}, Device::cpu())[0];
  const int64_t refusals = cuda::fp8_tensor_refusals();
  const Tensor got =
      run_on(linear_graph(m, k, f, blocks, silu_mul, device_weights), {{"x", x}}, kGpu)[0];
  // Where the FP8 tensor-core path was tried (sm_89+, k % 16 == 0, aligned rows), cuBLASLt ran
  // it: a refusal would fall back to the dequant path silently, inside the same bound.
  INFO(f.name << " " << what << " m " << m << " k " << k);
  CHECK(cuda::fp8_tensor_refusals() == refusals);
  REQUIRE(got.shape() == want.shape());
  const int64_t n = want.dim(1);
  int64_t bad = 0;
  double worst = 0;
  std::ostringstream first;
  for (int64_t i = 0; i < m; ++i) {
    const float* xr = x.data<float>() + i * k;
    int64_t col = 0;
    size_t blk = 0;
    for (int64_t j = 0; j < n; ++j, ++col) {
      while (!silu_mul && col >= blocks[blk].data.dim(0)) {
        col = 0;
        ++blk;
      }
      double tol = 0;
      if (silu_mul) {
        const Bound g = bound(f, m, xr, k, blocks[0], j);
        const Bound u = bound(f, m, xr, k, blocks[1], j);
        tol = 1.1 * std::fabs(u.value) * g.tol + std::fabs(silu(g.value)) * u.tol +
              1e-6 * std::fabs(silu(g.value) * u.value);
      } else {
        tol = bound(f, m, xr, k, blocks[blk], col).tol;
      }
      const double a = got.data<float>()[i * n + j];
      const double b = want.data<float>()[i * n + j];
      const double err = std::fabs(a - b);
      worst = std::max(worst, tol > 0 ? err / tol : err);
      if (!(err <= tol) && bad++ == 0) {
        first << "[" << i << ", " << j << "]: cuda " << a << ", cpu " << b << ", tolerance " << tol;
      }
    }
  }
  INFO(f.name << " " << what << " m " << m << " k " << k << ": " << bad
               << " mismatches (worst error / tolerance " << worst << "); first at " << first.str());
  CHECK(bad == 0);
}

std::vector<Format> all_formats() {
  std::vector<Format> f = {float_format(DType::kF32), float_format(DType::kBF16),
                           float_format(DType::kF16), fp8_format()};
  for (int64_t g : {32, 64, 128}) {
    for (bool sym : {true, false}) {
      for (DType sd : {DType::kF16, DType::kBF16}) f.push_back(int4_format(g, sym, sd));
    }
  }
  return f;
}

// k per format: one INT4 group and a few; for the others sizes off every vector width (7, 33)
// and one that is (96, 4160: FP8 tensor cores need k % 16 == 0).
std::vector<std::pair<int64_t, int64_t>> shapes(const Format& f) {
  if (f.wtype == DType::kI4) {
    const int64_t g = f.scheme.group_size;
    // 4096 + 128: a whole number of groups for every g, and a partial last GEMV tile (1024).
    return {{7, g}, {1, 3 * g}, {4096 + 64, 2 * g}, {33, 4096 + 128}};
  }
  return {{7, 7}, {1, 33}, {4096 + 64, 96}, {33, 4096 + 64}};
}

const int64_t kMs[] = {1, 2, 3, 8, 9, 12, 64, 257};

// Copies `host` to the GPU at a base 8 bytes past 16-byte alignment: the GEMV's byte-wise loads
// and cuBLASLt's alignment preferences.
Tensor misaligned_on_gpu(const Tensor& host) {
  const size_t bytes = static_cast<size_t>(host.nbytes());
  Tensor big = Tensor::zeros({static_cast<int64_t>(bytes) + 16}, DType::kI8);
  std::memcpy(static_cast<char*>(big.raw()) + 8, host.raw(), bytes);
  const Tensor dev = big.to(kGpu);
  return Tensor::from_storage(dev.storage(), dev.byte_offset() + 8, host.shape(), host.dtype());
}

}  // namespace

TEST_CASE("linear on CUDA matches the CPU for every weight format and m", "[cuda]") {
  std::mt19937 rng(21);
  for (const Format& f : all_formats()) {
    int case_index = 0;
    for (const auto& [n, k] : shapes(f)) {
      for (int64_t m : kMs) {
        if (k > 4096 && m > 9) continue;  // the long-k shape is for the GEMV tiling and tails
        const bool with_bias = (case_index++ % 2) == 1;
        const std::vector<Block> blocks = {make_block(f, n, k, with_bias, rng)};
        compare(f, m, k, blocks, false, rng,
                "n " + std::to_string(n) + (with_bias ? " bias" : " no bias"));
      }
    }
  }
}

TEST_CASE("linear on CUDA: fused blocks and the silu_mul epilogue match the CPU", "[cuda]") {
  std::mt19937 rng(22);
  for (const Format& f : all_formats()) {
    const int64_t k = f.wtype == DType::kI4 ? 2 * f.scheme.group_size : 48;
    for (int64_t m : {1, 8, 9, 64}) {
      // Q/K/V-like: unequal blocks, bias on some.
      const std::vector<Block> qkv = {make_block(f, 64, k, true, rng), make_block(f, 1, k, false, rng),
                                      make_block(f, 7, k, true, rng)};
      compare(f, m, k, qkv, false, rng, "3 fused blocks");
      // gate/up with the SwiGLU epilogue.
      const std::vector<Block> gate_up = {make_block(f, 33, k, m % 2 == 0, rng),
                                          make_block(f, 33, k, true, rng)};
      compare(f, m, k, gate_up, true, rng, "silu_mul");
    }
  }
}

TEST_CASE("linear on CUDA reads misaligned device weights correctly", "[cuda]") {
  std::mt19937 rng(23);
  for (const Format& f : all_formats()) {
    const int64_t k = f.wtype == DType::kI4 ? 4 * f.scheme.group_size : 64;
    for (int64_t m : {1, 5, 9}) {
      const std::vector<Block> blocks = {make_block(f, 19, k, true, rng),
                                         make_block(f, 5, k, false, rng)};
      const std::vector<Tensor> dev = {misaligned_on_gpu(blocks[0].data),
                                       misaligned_on_gpu(blocks[1].data)};
      compare(f, m, k, blocks, false, rng, "misaligned weights", &dev);
    }
  }
}
