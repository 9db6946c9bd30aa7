// The CUDA kernels for GGUF block-quantized weights (kernels/cuda/gemm_ggml.cuh, embedding_ggml)
// against the scalar reference cpu::dequantize_ggml_row, for all 12 supported block types.
//
// Weights are random bytes with every f16 scale field (d, dmin, m) overwritten by a finite random
// f16, so every block is valid and the dequantized weights are finite. The reference is
//   y[i][j] = bias_j + sum_c x[i][c] * w[j][c]   in double,
// with w the f32 rows of dequantize_ggml_row (exact by the kernels' contract). Tolerance per
// output, from gemm_ggml.cuh's bound with M = |bias_j| + sum_c |x_ic| |w_jc| (double):
//   m <= kGemvMaxM (GEMV, exact f32 weights, f32 FMAs): (k / 32 + 40) 2^-24 M;
//   m >  kGemvMaxM (bf16 dequant + cuBLASLt): x and w each rounded to bf16 (2^-8 relative each)
//     -> (2^-7 + 2^-16) M, plus f32 summation (k + 8) 2^-24 M;
//   silu_mul: with t_g, t_u the tolerances of gate and up, |silu'| < 1.1:
//     1.1 t_g (|u| + t_u) + |silu(g)| t_u + 2^-18 |silu(g) u| (expf, division, product).
// A wrong block, unit, scale, nibble or row gives errors of the order of M, far above these.
// The embedding lookup must reproduce dequantize_ggml_row bit for bit.
//
// Both GEMM cases run the weights at a base 2 bytes past 16-byte alignment for one block (GGUF
// rows are only 2-byte aligned), x and y with padded row strides, and fused blocks that split
// the GEMV's 16-row thread blocks. The last two test cases run the `linear` and `embedding` ops
// through a CUDA executor (the wiring of engine/ops/*_cuda.cc).
//
// Without a GPU the binary prints "SKIPPED: no CUDA device visible" and exits 77 (CTest: skipped)
// before Catch starts: main() is in cuda_test_util.cc.
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/graph/graph.h"
#include "kernels/common/ggml_type.h"
#include "kernels/common/half.h"
#include "kernels/cpu/ggml_dequant.h"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gemm.cuh"
#include "tests/cuda/cuda_test_util.h"

using namespace sampan;
using namespace sampan::cuda_test;

namespace {

const GgmlType kTypes[] = {GgmlType::kQ4_0,  GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                           GgmlType::kQ8_0,  GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,
                           GgmlType::kQ5_K,  GgmlType::kQ6_K, GgmlType::kIQ4_NL,
                           GgmlType::kIQ4_XS};

std::string type_name(GgmlType t) { return ggml_type_name(t) ? ggml_type_name(t) : "?"; }

// Byte offsets of the f16 fields of one block (kernels/cpu/ggml_dequant.h).
std::vector<int> f16_fields(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_1: case GgmlType::kQ5_1: case GgmlType::kQ4_K: case GgmlType::kQ5_K:
      return {0, 2};
    case GgmlType::kQ2_K: return {80, 82};
    case GgmlType::kQ3_K: return {108};
    case GgmlType::kQ6_K: return {208};
    default: return {0};  // Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS
  }
}

// rows x ggml_row_bytes(t, k) random bytes; every f16 field a finite random value of either sign
// with magnitude in [2^-9, 2^-4) (subnormal-free but otherwise arbitrary mantissas).
std::vector<uint8_t> random_blocks(GgmlType t, int64_t rows, int64_t k, std::mt19937& rng) {
  const int64_t row_bytes = ggml_row_bytes(t, k);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * row_bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> expo(-9.0f, -4.0f);
  std::uniform_int_distribution<int> sign(0, 1);
  const int64_t bs = ggml_type_size(t);
  for (int64_t off = 0; off < static_cast<int64_t>(bytes.size()); off += bs) {
    for (const int f : f16_fields(t)) {
      const float v = (sign(rng) ? -1.0f : 1.0f) * std::exp2(expo(rng));
      const uint16_t h = f32_to_f16(v);
      std::memcpy(bytes.data() + off + f, &h, 2);
    }
  }
  return bytes;
}

std::vector<float> dequantize(GgmlType t, const std::vector<uint8_t>& bytes, int64_t rows,
                              int64_t k) {
  std::vector<float> w(static_cast<size_t>(rows * k));
  const int64_t row_bytes = ggml_row_bytes(t, k);
  for (int64_t r = 0; r < rows; ++r) {
    cpu::dequantize_ggml_row(t, bytes.data() + r * row_bytes, w.data() + r * k, k);
  }
  return w;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

// Device memory: a copy of `bytes` host bytes at `offset` bytes past a 256-byte aligned base, or
// (host null) `bytes` bytes of 0xff (NaN floats, so an unwritten output shows).
class DeviceCopy {
 public:
  DeviceCopy(const void* host, size_t bytes, size_t offset = 0) : offset_(offset) {
    REQUIRE(cudaMalloc(&base_, bytes + offset + 16) == cudaSuccess);
    char* p = static_cast<char*>(base_) + offset;
    if (host) {
      REQUIRE(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    } else {
      REQUIRE(cudaMemset(p, 0xff, bytes) == cudaSuccess);
    }
  }
  ~DeviceCopy() { cudaFree(base_); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  template <typename T>
  T* get() const {
    return reinterpret_cast<T*>(static_cast<char*>(base_) + offset_);
  }

 private:
  void* base_ = nullptr;
  size_t offset_ = 0;
};

template <typename T>
std::vector<T> to_host(const DeviceCopy& d, size_t n) {
  std::vector<T> h(n);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemcpy(h.data(), d.get<T>(), n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return h;
}

double silu(double g) { return g / (1.0 + std::exp(-g)); }

// One product of x · (block rows)ᵀ: the exact value and its tolerance (top of the file).
struct Ref {
  double value = 0;
  double tol = 0;
};

Ref reference(const float* x, const float* w, int64_t k, const float* bias, bool gemv) {
  double dot = bias ? static_cast<double>(*bias) : 0.0;
  double mag = bias ? std::fabs(static_cast<double>(*bias)) : 0.0;
  for (int64_t c = 0; c < k; ++c) {
    const double p = static_cast<double>(x[c]) * static_cast<double>(w[c]);
    dot += p;
    mag += std::fabs(p);
  }
  const double kd = static_cast<double>(k);
  const double rel = gemv ? (kd / 32 + 40) * 0x1p-24
                          : 0x1p-7 + 0x1p-16 + (kd + 8) * 0x1p-24;
  return {dot, rel * mag};
}

// The weights of one GEMM case: host bytes and dequantized rows per block, device copies.
struct Case {
  GgmlType type;
  int64_t k = 0;
  std::vector<int64_t> rows;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<std::vector<float>> deq;
  std::vector<std::vector<float>> bias;  // empty: no bias
  std::vector<std::unique_ptr<DeviceCopy>> dev_w, dev_b;
  cuda::GemmWeights w;
};

void make_case(Case& c, GgmlType t, int64_t k, const std::vector<int64_t>& rows,
               const std::vector<bool>& with_bias, std::mt19937& rng) {
  c.type = t;
  c.k = k;
  c.rows = rows;
  c.w.dtype = DType::kU8;
  c.w.ggml_type = t;
  c.w.k = k;
  c.w.n_blocks = static_cast<int>(rows.size());
  for (size_t b = 0; b < rows.size(); ++b) {
    c.bytes.push_back(random_blocks(t, rows[b], k, rng));
    c.deq.push_back(dequantize(t, c.bytes.back(), rows[b], k));
    c.bias.push_back(with_bias[b] ? random_floats(static_cast<size_t>(rows[b]), rng)
                                  : std::vector<float>{});
    // Block 1 sits 2 bytes past 16-byte alignment: the weights' only guaranteed alignment.
    c.dev_w.push_back(std::make_unique<DeviceCopy>(c.bytes[b].data(), c.bytes[b].size(),
                                                   b == 1 ? 2 : 0));
    c.w.data[b] = c.dev_w.back()->get<uint8_t>();
    c.w.rows[b] = rows[b];
    if (with_bias[b]) {
      c.dev_b.push_back(
          std::make_unique<DeviceCopy>(c.bias[b].data(), c.bias[b].size() * sizeof(float)));
      c.w.bias[b] = c.dev_b.back()->get<float>();
    }
  }
}

// Runs cuda::gemm on `c` for m rows of random x with the epilogue and checks every output.
void check_gemm(const Case& c, int64_t m, GemmEpilogue ep, std::mt19937& rng) {
  const bool silu_mul = ep == GemmEpilogue::kSiluMul;
  const int64_t k = c.k, ldx = k + 4;
  const int64_t n_out = silu_mul ? c.rows[0] : c.w.n();
  const int64_t ldy = n_out + 3;
  const std::vector<float> x = random_floats(static_cast<size_t>(m * ldx), rng);
  DeviceCopy dx(x.data(), x.size() * sizeof(float));
  DeviceCopy dy(nullptr, static_cast<size_t>(m * ldy) * sizeof(float));
  const cuda::GemmStatus s = cuda::gemm(m, dx.get<float>(), ldx, c.w, ep, dy.get<float>(), ldy,
                                        nullptr);
  const std::string what = type_name(c.type) + " m " + std::to_string(m) + " k " +
                           std::to_string(k) + (silu_mul ? " silu_mul" : " store");
  INFO(what);
  REQUIRE(s.ok());
  const std::vector<float> y = to_host<float>(dy, static_cast<size_t>(m * ldy));
  const bool gemv = m <= cuda::kGemvMaxM;
  int64_t bad = 0;
  std::string first;
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x.data() + i * ldx;
    // Global output column -> (block, row in block).
    auto ref_of = [&](size_t b, int64_t r) {
      const float* bias = c.bias[b].empty() ? nullptr : c.bias[b].data() + r;
      return reference(xi, c.deq[b].data() + r * k, k, bias, gemv);
    };
    int64_t col = 0;
    for (size_t b = 0; b < (silu_mul ? 1 : c.rows.size()); ++b) {
      for (int64_t r = 0; r < c.rows[b]; ++r, ++col) {
        double want, tol;
        if (silu_mul) {
          const Ref g = ref_of(0, r), u = ref_of(1, r);
          want = silu(g.value) * u.value;
          tol = 1.1 * g.tol * (std::fabs(u.value) + u.tol) + std::fabs(silu(g.value)) * u.tol +
                0x1p-18 * std::fabs(want);
        } else {
          const Ref v = ref_of(b, r);
          want = v.value;
          tol = v.tol;
        }
        const double got = y[static_cast<size_t>(i * ldy + col)];
        if (!(std::fabs(got - want) <= tol)) {  // NaN fails too
          if (bad++ == 0) {
            first = "y[" + std::to_string(i) + "][" + std::to_string(col) + "] = " +
                    std::to_string(got) + ", want " + std::to_string(want) + " +- " +
                    std::to_string(tol);
          }
        }
      }
    }
  }
  INFO(first);
  CHECK(bad == 0);
}

const int64_t kMs[] = {1, 3, 8, 33, 100};

}  // namespace

TEST_CASE("GGUF block GEMM on CUDA matches the reference dequantization, kStore", "[cuda]") {
  std::mt19937 rng(7);
  for (const GgmlType t : kTypes) {
    // k: five 256-element blocks (two GEMV tiles, the second partial). Rows: three fused blocks
    // of 37 + 16 + 5, splitting the GEMV's 16-row thread blocks; biases on blocks 0 and 2.
    Case c;
    make_case(c, t, 1280, {37, 16, 5}, {true, false, true}, rng);
    for (const int64_t m : kMs) check_gemm(c, m, GemmEpilogue::kStore, rng);
    // A longer row (four full tiles and a bit) and one block.
    Case d;
    make_case(d, t, 4352, {19}, {false}, rng);
    for (const int64_t m : {int64_t{1}, int64_t{8}, int64_t{33}}) {
      check_gemm(d, m, GemmEpilogue::kStore, rng);
    }
  }
}

TEST_CASE("GGUF block GEMM on CUDA matches the reference dequantization, kSiluMul", "[cuda]") {
  std::mt19937 rng(8);
  for (const GgmlType t : kTypes) {
    Case c;
    make_case(c, t, 768, {24, 24}, {true, true}, rng);
    for (const int64_t m : kMs) check_gemm(c, m, GemmEpilogue::kSiluMul, rng);
  }
}

TEST_CASE("GGUF block embedding on CUDA is bit-exact with dequantize_ggml_row", "[cuda]") {
  std::mt19937 rng(9);
  const int64_t vocab = 50, dim = 768, n_tokens = 13, ldy = dim + 3;
  for (const GgmlType t : kTypes) {
    INFO(type_name(t));
    const std::vector<uint8_t> table = random_blocks(t, vocab, dim, rng);
    const std::vector<float> deq = dequantize(t, table, vocab, dim);
    std::vector<int32_t> ids(static_cast<size_t>(n_tokens));
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
    for (int32_t& id : ids) id = pick(rng);
    ids[0] = 0;
    ids[1] = static_cast<int32_t>(vocab - 1);
    ids[2] = ids[3];  // a repeated token
    DeviceCopy dt(table.data(), table.size(), 2);  // 2-byte aligned only
    DeviceCopy di(ids.data(), ids.size() * sizeof(int32_t));
    DeviceCopy dy(nullptr, static_cast<size_t>(n_tokens * ldy) * sizeof(float));
    REQUIRE(cuda::embedding_ggml(n_tokens, di.get<int32_t>(), dt.get<uint8_t>(), t, vocab, dim,
                                 dy.get<float>(), ldy, nullptr) == cudaSuccess);
    const std::vector<float> y = to_host<float>(dy, static_cast<size_t>(n_tokens * ldy));
    for (int64_t i = 0; i < n_tokens; ++i) {
      const float* want = deq.data() + static_cast<int64_t>(ids[static_cast<size_t>(i)]) * dim;
      INFO("token " << i << " id " << ids[static_cast<size_t>(i)]);
      CHECK(std::memcmp(y.data() + i * ldy, want, static_cast<size_t>(dim) * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("linear and embedding ops run GGUF block weights on CUDA", "[cuda]") {
  std::mt19937 rng(10);
  const int64_t k = 512, n = 40, vocab = 30;
  for (const GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ8_0}) {
    INFO(type_name(t));
    const int64_t row_bytes = ggml_row_bytes(t, k);
    const std::vector<uint8_t> bytes = random_blocks(t, n, k, rng);
    const std::vector<float> deq = dequantize(t, bytes, n, k);
    Tensor wt = Tensor::zeros({n, row_bytes}, DType::kU8);
    std::memcpy(wt.raw(), bytes.data(), bytes.size());
    for (const int64_t m : {int64_t{2}, int64_t{40}}) {
      graph::Graph g;
      const graph::ValueId xin = g.add_input("x", DType::kF32, fixed({m, k}));
      const graph::ValueId w0 = g.add_constant("w0", wt);
      graph::Attributes attrs{{"n_blocks", int64_t{1}}};
      attrs.set("ggml_type", static_cast<int64_t>(t));
      g.mark_output(g.add("linear", "proj", {xin, w0}, attrs));
      const Tensor x = random_f32({m, k}, rng);
      const Tensor y = run_on(g, {{"x", x}}, kGpu)[0];
      REQUIRE(y.dim(0) == m);
      REQUIRE(y.dim(1) == n);
      int64_t bad = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const Ref r = reference(x.data<float>() + i * k, deq.data() + j * k, k, nullptr,
                                  m <= cuda::kGemvMaxM);
          if (!(std::fabs(y.data<float>()[i * n + j] - r.value) <= r.tol)) ++bad;
        }
      }
      INFO("linear m " << m);
      CHECK(bad == 0);
    }
    // The embedding op on the first `vocab` rows of the same bytes as a table.
    Tensor table = Tensor::zeros({vocab, row_bytes}, DType::kU8);
    std::memcpy(table.raw(), bytes.data(), static_cast<size_t>(vocab * row_bytes));
    graph::Graph g;
    const graph::ValueId ids_in = g.add_input("ids", DType::kI32, fixed({4}));
    const graph::ValueId tab = g.add_constant("table", table);
    g.mark_output(g.add("embedding", "embed", {ids_in, tab},
                        graph::Attributes{{"ggml_type", static_cast<int64_t>(t)}}));
    Tensor ids = Tensor::zeros({4}, DType::kI32);
    const int32_t id_values[4] = {3, 0, 29, 3};
    std::memcpy(ids.raw(), id_values, sizeof(id_values));
    const Tensor y = run_on(g, {{"ids", ids}}, kGpu)[0];
    REQUIRE(y.dim(1) == k);
    for (int64_t i = 0; i < 4; ++i) {
      INFO("embedding row " << i);
      CHECK(std::memcmp(y.data<float>() + i * k, deq.data() + id_values[i] * k,
                        static_cast<size_t>(k) * sizeof(float)) == 0);
    }
  }
}
