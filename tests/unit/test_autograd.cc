// Gradient rules: every op's backward kernel (double instantiation) against central differences
// in float64, on awkward sizes (non-multiples of 16, GQA ratios 2 and 4, padding rows, a sliding
// window, ignore-index targets); the f32 linear_grad_input for every weight format against the
// double specification; and a composed graph differentiated by autograd (f32 executor) against
// the same chain composed by hand from the double rules, with pruning checked.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/train/autograd.h"
#include "kernels/common/half.h"
#include "kernels/cpu/causal_attention_cpu.h"
#include "kernels/cpu/conv_cpu.h"
#include "kernels/cpu/cross_entropy_cpu.h"
#include "kernels/cpu/dropout_cpu.h"
#include "kernels/cpu/embedding_grad_cpu.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/linear_grad_cpu.h"
#include "kernels/cpu/rms_norm_grad_cpu.h"
#include "kernels/cpu/rope_grad_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/round_bf16_cpu.h"
#include "kernels/cpu/silu_mul_grad_cpu.h"
#include "quant/fp8.h"
#include "tests/kernels/kernel_test_util.h"

using namespace sampan;
using Vec = std::vector<double>;

namespace {

Vec random_vec(size_t n, std::mt19937& rng, double scale = 1.0) {
  std::normal_distribution<double> d(0.0, scale);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ||a - b||₂ / ||b||₂.
// rel_l2 over every block of w consecutive elements but the n / 100 blocks (n blocks) whose
// own squared error is largest.
double rel_l2_trimmed(const Vec& a, const Vec& b, int64_t w) {
  const size_t n = a.size() / static_cast<size_t>(w);
  std::vector<std::pair<double, size_t>> err(n);
  for (size_t i = 0; i < n; ++i) {
    double e = 0;
    for (size_t c = i * w; c < (i + 1) * w; ++c) e += (a[c] - b[c]) * (a[c] - b[c]);
    err[i] = {e, i};
  }
  std::sort(err.begin(), err.end());
  double d = 0, nb = 0;
  for (size_t r = 0; r < n - n / 100; ++r) {
    const size_t i = err[r].second;
    d += err[r].first;
    for (size_t c = i * w; c < (i + 1) * w; ++c) nb += b[c] * b[c];
  }
  return std::sqrt(d / nb);
}

// Elements with |a - b| above slack (plus 1e-6 of b's RMS for the f32 sums the slack leaves
// out).
int64_t count_outside(const Vec& a, const Vec& b, const Vec& slack) {
  double n2 = 0;
  for (double x : b) n2 += x * x;
  const double floor = 1e-6 * std::sqrt(n2 / static_cast<double>(b.size()));
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += !(std::fabs(a[i] - b[i]) <= slack[i] + floor);
  return bad;
}

double rel_l2(const Vec& a, const Vec& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    n += b[i] * b[i];
  }
  return std::sqrt(d / n);
}

// Central differences of loss() with respect to every element of x (x is restored).
Vec numeric_grad(Vec& x, const std::function<double()>& loss) {
  constexpr double kH = 1e-5;  // truncation O(h²) ~ 1e-10, rounding ~ 1e-16 / h ~ 1e-11
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kH;
    const double up = loss();
    x[i] = saved - kH;
    const double down = loss();
    x[i] = saved;
    g[i] = (up - down) / (2 * kH);
  }
  return g;
}

// The gradient checks' bound (float64 analytic vs central differences).
constexpr double kTol = 1e-6;

#define CHECK_GRAD(analytic, x, loss)              \
  do {                                             \
    const Vec num_ = numeric_grad(x, loss);        \
    const double err_ = rel_l2(analytic, num_);    \
    INFO(#analytic << " relative error " << err_); \
    CHECK(err_ <= kTol);                           \
    worst = std::max(worst, err_);                 \
  } while (0)

double worst = 0;  // largest relative error seen, reported once

}  // namespace

TEST_CASE("gradient rules: double kernels against central differences", "[autograd]") {
  std::mt19937 rng(42);
  cpu::SerialRunner serial;

  SECTION("linear: dx = dy·W, dW = dyᵀ·x") {
    const int64_t m = 5, n = 13, k = 19;
    Vec x = random_vec(m * k, rng), w = random_vec(n * k, rng), up = random_vec(m * n, rng);
    Vec y(m * n);
    auto loss = [&] {
      cpu::linear_forward_ref<double>(m, n, k, x.data(), w.data(), y.data());
      return dot(y, up);
    };
    Vec dx(m * k), dw(n * k);
    cpu::linear_grad_input_ref<double>(m, n, k, up.data(), w.data(), dx.data());
    cpu::linear_grad_weight_ref<double>(m, n, k, up.data(), x.data(), dw.data());
    CHECK_GRAD(dx, x, loss);
    CHECK_GRAD(dw, w, loss);
  }
  SECTION("rms_norm: dx and dweight") {
    const int64_t rows = 7, dim = 37;
    const double eps = 1e-5;
    Vec x = random_vec(rows * dim, rng), w = random_vec(dim, rng), up = random_vec(rows * dim, rng);
    Vec y(rows * dim);
    auto loss = [&] {
      cpu::rms_norm_ref<double>(rows, dim, x.data(), w.data(), eps, y.data());
      return dot(y, up);
    };
    Vec dx(rows * dim), dw(dim);
    cpu::rms_norm_backward<double>(rows, dim, x.data(), dim, w.data(), up.data(), dim, eps,
                                   dx.data(), dim, dw.data(), serial);
    CHECK_GRAD(dx, x, loss);
    CHECK_GRAD(dw, w, loss);
  }
  SECTION("rope: the transposed rotation, large positions, attn_factor") {
    const int64_t T = 6, H = 3, D = 10;
    const std::vector<int32_t> pos = {0, 1, 7, 100, 4095, 131071};
    const std::vector<float> inv_freq = {1.0f, 0.31f, 0.05f, 1.3e-3f, 2.1e-5f};
    Vec x = random_vec(T * H * D, rng), up = random_vec(T * H * D, rng), y(T * H * D);
    auto loss = [&] {
      cpu::rope_ref<double>(T, H, D, x.data(), pos.data(), inv_freq.data(), 1.3, y.data());
      return dot(y, up);
    };
    Vec dx(T * H * D);
    cpu::rope_backward<double>(T, H, D, up.data(), H * D, pos.data(), inv_freq.data(), 1.3,
                               dx.data(), H * D, serial);
    CHECK_GRAD(dx, x, loss);
  }
  SECTION("silu_mul: dgate and dup") {
    const int64_t rows = 4, n = 21;
    Vec g = random_vec(rows * n, rng, 2.0), u = random_vec(rows * n, rng),
        up = random_vec(rows * n, rng), y(rows * n);
    auto loss = [&] {
      cpu::silu_mul_ref<double>(rows, n, g.data(), u.data(), y.data());
      return dot(y, up);
    };
    Vec dg(rows * n), du(rows * n);
    cpu::silu_mul_backward<double>(rows, n, g.data(), n, u.data(), n, up.data(), n, dg.data(), n,
                                   du.data(), n, serial);
    CHECK_GRAD(dg, g, loss);
    CHECK_GRAD(du, u, loss);
  }
  SECTION("causal attention: GQA 2 and 4, padding rows, sliding window") {
    struct Case {
      int64_t heads, kv_heads, window;
    };
    for (const Case c : {Case{4, 2, 0}, Case{4, 1, 0}, Case{6, 3, 3}, Case{2, 2, 0}}) {
      cpu::CausalAttentionDims d;
      d.batch = 2;
      d.seq_len = 7;
      d.n_heads = c.heads;
      d.n_kv_heads = c.kv_heads;
      d.head_dim = 6;
      d.scale = 0.37;
      d.window = c.window;
      const std::vector<int32_t> lengths = {7, 4};  // sequence 1 has 3 padding rows
      const int64_t N = d.batch * d.seq_len, qw = c.heads * d.head_dim,
                    kw = c.kv_heads * d.head_dim;
      Vec q = random_vec(N * qw, rng), k = random_vec(N * kw, rng), v = random_vec(N * kw, rng);
      Vec up = random_vec(N * qw, rng), o(N * qw), lse(N * c.heads);
      auto loss = [&] {
        cpu::causal_attention_forward<double>(d, q.data(), qw, k.data(), kw, v.data(), kw,
                                              lengths.data(), o.data(), qw, lse.data(), serial);
        return dot(o, up);
      };
      loss();
      Vec dq(N * qw), dk(N * kw), dv(N * kw);
      cpu::causal_attention_backward<double>(
          d, q.data(), qw, k.data(), kw, v.data(), kw, lengths.data(), o.data(), qw, lse.data(),
          up.data(), qw, dq.data(), qw, dk.data(), kw, dv.data(), kw, serial);
      INFO("heads " << c.heads << " kv heads " << c.kv_heads << " window " << c.window);
      CHECK_GRAD(dq, q, loss);
      CHECK_GRAD(dk, k, loss);
      CHECK_GRAD(dv, v, loss);
      // Padding rows neither produce nor receive anything.
      for (int64_t t = 4; t < 7; ++t) {
        for (int64_t c2 = 0; c2 < kw; ++c2) CHECK(dk[(7 + t) * kw + c2] == 0.0);
      }
    }
  }
  SECTION("cross_entropy: summed, ignore index, scaled upstream") {
    const int64_t rows = 6, vocab = 23;
    const std::vector<int32_t> targets = {3, -100, 22, 0, -100, 7};
    Vec logits = random_vec(rows * vocab, rng, 3.0);
    const double dloss = 1.7;
    auto loss = [&] {
      return dloss * cpu::cross_entropy_forward<double>(rows, vocab, logits.data(), vocab,
                                                        targets.data(), -100, serial);
    };
    Vec dl(rows * vocab);
    cpu::cross_entropy_backward<double>(rows, vocab, logits.data(), vocab, targets.data(), -100,
                                        dloss, dl.data(), vocab, serial);
    CHECK_GRAD(dl, logits, loss);
    for (int64_t c = 0; c < vocab; ++c) CHECK(dl[1 * vocab + c] == 0.0);
  }
  SECTION("scaled_dropout: the same mask forward and backward") {
    const int64_t rows = 5, cols = 17;
    Vec x = random_vec(rows * cols, rng), up = random_vec(rows * cols, rng), y(rows * cols);
    auto loss = [&] {
      cpu::scaled_dropout<double>(rows, cols, x.data(), cols, 99, 0.3, 2.5, y.data(), cols, serial);
      return dot(y, up);
    };
    Vec dx(rows * cols);
    cpu::scaled_dropout<double>(rows, cols, up.data(), cols, 99, 0.3, 2.5, dx.data(), cols, serial);
    CHECK_GRAD(dx, x, loss);
    int64_t dropped = 0;
    for (double g : dx) dropped += g == 0.0;
    CHECK(dropped > 10);  // p = 0.3 of 85
    CHECK(dropped < 45);
  }
  SECTION("embedding: scatter-add with repeated ids") {
    const int64_t n = 9, vocab = 11, dim = 5;
    const std::vector<int32_t> ids = {3, 0, 3, 10, 7, 3, 0, 1, 10};
    Vec table = random_vec(vocab * dim, rng), up = random_vec(n * dim, rng);
    auto loss = [&] {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t c = 0; c < dim; ++c) s += table[ids[i] * dim + c] * up[i * dim + c];
      }
      return s;
    };
    Vec dt(vocab * dim);
    cpu::embedding_backward<double>(n, ids.data(), up.data(), dim, vocab, dim, dt.data());
    CHECK_GRAD(dt, table, loss);
  }
  SECTION("report (runs last)") {
    CHECK(worst <= kTol);
    WARN("largest relative error of a double gradient rule vs central differences: " << worst);
  }
}

namespace {

// A weight matrix [n, k] in one format: what the GEMM reads and its exact f32 values.
struct FormatWeights {
  GemmWeights view;
  std::vector<uint8_t> data, scales;
  std::vector<int8_t> zeros;
  Vec dense;  // [n, k], dequantized
};

FormatWeights make_weights(DType dtype, int64_t n, int64_t k, std::mt19937& rng) {
  FormatWeights f;
  f.dense.resize(static_cast<size_t>(n * k));
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  GemmWeights& w = f.view;
  w.dtype = dtype;
  w.k = k;
  w.n_blocks = 1;
  w.rows[0] = n;
  switch (dtype) {
    case DType::kF32: {
      f.data.resize(static_cast<size_t>(n * k * 4));
      auto* p = reinterpret_cast<float*>(f.data.data());
      for (int64_t i = 0; i < n * k; ++i) f.dense[i] = p[i] = nd(rng);
      break;
    }
    case DType::kF16:
    case DType::kBF16: {
      f.data.resize(static_cast<size_t>(n * k * 2));
      auto* p = reinterpret_cast<uint16_t*>(f.data.data());
      for (int64_t i = 0; i < n * k; ++i) {
        const float x = nd(rng);
        p[i] = dtype == DType::kF16 ? f32_to_f16(x) : f32_to_bf16(x);
        f.dense[i] = dtype == DType::kF16 ? f16_to_f32(p[i]) : bf16_to_f32(p[i]);
      }
      break;
    }
    case DType::kF8E4M3: {
      f.data.resize(static_cast<size_t>(n * k));
      f.scales.resize(static_cast<size_t>(n * 4));
      auto* s = reinterpret_cast<float*>(f.scales.data());
      for (int64_t r = 0; r < n; ++r) s[r] = 0.01f * static_cast<float>(1 + r % 7);
      for (int64_t i = 0; i < n * k; ++i) {
        uint8_t b = static_cast<uint8_t>(byte(rng));
        if ((b & 0x7f) == 0x7f) b ^= 1;  // not NaN
        f.data[i] = b;
        f.dense[i] = static_cast<double>(quant::fp8_e4m3_to_f32(b)) * s[i / k];
      }
      w.scales[0] = s;
      break;
    }
    case DType::kI4: {
      const int64_t g = 32, groups = k / g;
      f.data.resize(static_cast<size_t>(n * k / 2));
      f.scales.resize(static_cast<size_t>(n * groups * 2));
      f.zeros.resize(static_cast<size_t>(n * groups));
      auto* s = reinterpret_cast<uint16_t*>(f.scales.data());
      for (int64_t i = 0; i < n * groups; ++i) {
        s[i] = f32_to_f16(0.05f * static_cast<float>(1 + i % 5));
        f.zeros[i] = static_cast<int8_t>(i % 5 - 2);
      }
      for (int64_t i = 0; i < n * k / 2; ++i) f.data[i] = static_cast<uint8_t>(byte(rng));
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < k; ++c) {
          const uint8_t b = f.data[(r * k + c) / 2];
          const int q =
              static_cast<int8_t>(static_cast<uint8_t>((c % 2 ? b >> 4 : b & 15) << 4)) >> 4;
          const int64_t gi = r * groups + c / g;
          f.dense[r * k + c] = static_cast<double>(f16_to_f32(s[gi])) * (q - f.zeros[gi]);
        }
      }
      w.scales[0] = s;
      w.zeros[0] = f.zeros.data();
      w.scale_dtype = DType::kF16;
      w.group_size = g;
      break;
    }
    case DType::kU8: {  // GGUF Q8_0: per 32 elements an f16 scale and 32 int8
      const int64_t blocks = k / 32;
      f.data.resize(static_cast<size_t>(n * blocks * 34));
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t b = 0; b < blocks; ++b) {
          uint8_t* blk = f.data.data() + (r * blocks + b) * 34;
          const uint16_t d = f32_to_f16(0.02f * static_cast<float>(1 + (r + b) % 3));
          std::memcpy(blk, &d, 2);
          for (int e = 0; e < 32; ++e) {
            const auto q = static_cast<int8_t>(byte(rng) - 128);
            blk[2 + e] = static_cast<uint8_t>(q);
            f.dense[r * k + b * 32 + e] = static_cast<double>(f16_to_f32(d)) * q;
          }
        }
      }
      w.ggml_type = GgmlType::kQ8_0;
      break;
    }
    default:
      FAIL("format");
  }
  w.data[0] = f.data.data();
  return f;
}

}  // namespace

TEST_CASE("linear_grad_input (f32 GEMM path) matches the double rule for every weight format",
          "[autograd]") {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  // The f32 path as f32 training runs it (LoraTrainer's exact scope): at the default precision
  // an AMX CPU would run the bf16 panel on tiles with dy split into 16 bits.
  const cpu::ScopedGemmPrecision exact(cpu::GemmPrecision::kF32);
  // 300 output rows: a full 256-row panel and a partial one; k = 64 fits int4 groups and Q8_0.
  const int64_t m = 7, n = 300, k = 64;
  for (DType dt :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kI4, DType::kU8}) {
    const FormatWeights f = make_weights(dt, n, k, rng);
    const Vec dy = random_vec(m * n, rng);
    std::vector<float> dy32(dy.begin(), dy.end()), dx(m * k);
    Vec dy_r(dy32.begin(), dy32.end()), ref(m * k);
    cpu::linear_grad_input(m, dy32.data(), n, f.view, dx.data(), k, pool);
    cpu::linear_grad_input_ref<double>(m, n, k, dy_r.data(), f.dense.data(), ref.data());
    // f32 sums of 300 products of exactly converted operands: ~1e-7 typical, 1e-5 bounds it.
    const double e = rel_l2(Vec(dx.begin(), dx.end()), ref);
    INFO(dtype_name(dt) << ": relative error " << e);
    CHECK(e <= 1e-5);
  }
  SECTION("two weight blocks (fused) and linear_grad_weight") {
    // k = 300: a full 256-column panel and a partial one, per block.
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      INFO(dtype_name(dt));
      FormatWeights a = make_weights(dt, 100, 300, rng), b = make_weights(dt, 45, 300, rng);
      GemmWeights w = a.view;
      w.n_blocks = 2;
      w.data[1] = b.view.data[0];
      w.rows[1] = 45;
      Vec dense = a.dense;
      dense.insert(dense.end(), b.dense.begin(), b.dense.end());
      const Vec dy = random_vec(m * 145, rng);
      std::vector<float> dy32(dy.begin(), dy.end()), dx(m * 300);
      Vec ref(m * 300);
      cpu::linear_grad_input(m, dy32.data(), 145, w, dx.data(), 300, pool);
      cpu::linear_grad_input_ref<double>(m, 145, 300, Vec(dy32.begin(), dy32.end()).data(),
                                         dense.data(), ref.data());
      CHECK(rel_l2(Vec(dx.begin(), dx.end()), ref) <= 1e-5);
    }

    const int64_t rows = 37, out = 13, in = 19;
    const Vec g = random_vec(rows * out, rng), x = random_vec(rows * in, rng);
    std::vector<float> g32(g.begin(), g.end()), x32(x.begin(), x.end()), dw(out * in, 1.0f);
    Vec dwr(out * in);
    cpu::linear_grad_weight_ref<double>(rows, out, in, Vec(g32.begin(), g32.end()).data(),
                                        Vec(x32.begin(), x32.end()).data(), dwr.data());
    cpu::linear_grad_weight(rows, out, in, g32.data(), out, x32.data(), in, dw.data(), true, pool);
    for (double& r : dwr) r += 1.0;  // accumulated onto ones
    CHECK(rel_l2(Vec(dw.begin(), dw.end()), dwr) <= 1e-6);

    // Several 32 x 32 transpose tiles with 8 x 8 blocks and edges, row strides past the widths.
    const int64_t rows2 = 70, out2 = 40, in2 = 75, ldg2 = out2 + 3, ldx2 = in2 + 5;
    const Vec g2 = random_vec(rows2 * ldg2, rng), x2 = random_vec(rows2 * ldx2, rng);
    std::vector<float> g2f(g2.begin(), g2.end()), x2f(x2.begin(), x2.end()), dw2(out2 * in2);
    Vec gd(rows2 * out2), xd(rows2 * in2), dwr2(out2 * in2);
    for (int64_t r = 0; r < rows2; ++r) {
      for (int64_t c = 0; c < out2; ++c) gd[r * out2 + c] = g2f[r * ldg2 + c];
      for (int64_t c = 0; c < in2; ++c) xd[r * in2 + c] = x2f[r * ldx2 + c];
    }
    cpu::linear_grad_weight_ref<double>(rows2, out2, in2, gd.data(), xd.data(), dwr2.data());
    cpu::linear_grad_weight(rows2, out2, in2, g2f.data(), ldg2, x2f.data(), ldx2, dw2.data(), false,
                            pool);
    CHECK(rel_l2(Vec(dw2.begin(), dw2.end()), dwr2) <= 1e-6);
  }
}

namespace {

Tensor f32_tensor(const Shape& shape, const Vec& v) {
  return Tensor::from_f32(shape, std::vector<float>(v.begin(), v.end()));
}

// A [n, k] weight constant stored as `dt` (f32, f16 or bf16) and its exact values in double.
Tensor weight_as(DType dt, int64_t n, int64_t k, Vec& values, std::mt19937& rng, double scale) {
  values = random_vec(n * k, rng, scale);
  if (dt == DType::kF32) {
    for (double& v : values) v = static_cast<float>(v);
    return f32_tensor({n, k}, values);
  }
  Tensor t = Tensor::empty({n, k}, dt);
  auto* p = t.data<uint16_t>();
  for (int64_t i = 0; i < n * k; ++i) {
    p[i] = dt == DType::kF16 ? f32_to_f16(static_cast<float>(values[i]))
                             : f32_to_bf16(static_cast<float>(values[i]));
    values[i] = dt == DType::kF16 ? f16_to_f32(p[i]) : bf16_to_f32(p[i]);
  }
  return t;
}

Vec vec_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return Vec(c.data<float>(), c.data<float>() + c.numel());
}

Vec add(Vec a, const Vec& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

}  // namespace

TEST_CASE("autograd: a composed graph's f32 gradients match the double rules, and pruning",
          "[autograd]") {
  using graph::Dim;
  using graph::ValueId;
  std::mt19937 rng(11);
  // Two sequences of 5 rows (the second with 2 padding rows), hidden 12, 4 query heads and 2 kv
  // heads of dim 4, LoRA rank 3 on q_proj, FFN 10, vocab 9.
  const int64_t B = 2, T = 5, N = B * T, d = 12, H = 4, Hkv = 2, D = 4, r = 3, F = 10, V = 9;
  const double s = 1.5, eps = 1e-5, att_scale = 0.5;
  const std::vector<int32_t> lengths = {5, 3};
  std::vector<int32_t> pos(N), targets(N, -100);
  for (int64_t i = 0; i < N; ++i) pos[i] = static_cast<int32_t>(i % T);
  for (int64_t t = 0; t < T - 1; ++t) targets[t] = static_cast<int32_t>((3 * t + 1) % V);
  targets[T + 0] = 4;
  targets[T + 1] = 8;  // rows T+2.. are padding or last: ignored
  const std::vector<float> inv_freq = {1.0f, 0.1f};

  Vec x = random_vec(N * d, rng), wn = random_vec(d, rng, 0.3), A = random_vec(r * d, rng, 0.3),
      Bm = random_vec(H * D * r, rng, 0.3);
  for (double& v : wn) v = static_cast<float>(1.0 + v);
  for (Vec* v : {&x, &A, &Bm}) {
    for (double& e : *v) e = static_cast<float>(e);
  }
  Vec Wq, Wk, Wv, Wo, Wg, Wu, Wl;
  graph::Graph g;
  const ValueId xv = g.add_input("x", DType::kF32, {Dim::fixed(N), Dim::fixed(d)});
  const ValueId posv = g.add_input("positions", DType::kI32, {Dim::fixed(N)});
  const ValueId lenv = g.add_input("lengths", DType::kI32, {Dim::fixed(B)});
  const ValueId tgtv = g.add_input("targets", DType::kI32, {Dim::fixed(N)});
  const ValueId seedv = g.add_input("seed", DType::kI32, {Dim::fixed(2)});
  const ValueId av = g.add_input("A", DType::kF32, {Dim::fixed(r), Dim::fixed(d)});
  const ValueId bv = g.add_input("B", DType::kF32, {Dim::fixed(H * D), Dim::fixed(r)});
  const ValueId invf = g.add_constant("inv_freq", Tensor::from_f32({2}, inv_freq));
  auto lin = [&](const std::string& name, ValueId in, DType dt, int64_t n, int64_t k, Vec& w) {
    return g.add("linear", name,
                 {in, g.add_constant(name + ".w", weight_as(dt, n, k, w, rng, 0.4))});
  };
  const ValueId n1 = g.add("rms_norm", "norm", {xv, g.add_constant("norm.w", f32_tensor({d}, wn))},
                           {{"eps", eps}});
  const ValueId q0 = lin("q", n1, DType::kBF16, H * D, d, Wq);
  const ValueId xd = g.add("scaled_dropout", "drop", {n1, seedv}, {{"p", 0.0}, {"scale", s}});
  const ValueId u = g.add("linear", "lora_a", {xd, av});
  const ValueId v2 = g.add("linear", "lora_b", {u, bv});
  const ValueId q = g.add("add", "q_lora", {q0, v2});
  const ValueId k = lin("k", n1, DType::kF32, Hkv * D, d, Wk);
  const ValueId v = lin("v", n1, DType::kF16, Hkv * D, d, Wv);
  const ValueId qr = g.add("rope", "q_rope", {q, posv, invf}, {{"n_heads", H}, {"head_dim", D}});
  const ValueId kr = g.add("rope", "k_rope", {k, posv, invf}, {{"n_heads", Hkv}, {"head_dim", D}});
  const ValueId att = g.add_node(
      "causal_attention", "attn", {qr, kr, v, lenv},
      {{"n_heads", H}, {"n_kv_heads", Hkv}, {"head_dim", D}, {"scale", att_scale}}, 2)[0];
  const ValueId o = lin("o", att, DType::kF32, d, H * D, Wo);
  const ValueId h = g.add("add", "residual", {xv, o});
  const ValueId gate = lin("gate", h, DType::kF32, F, d, Wg);
  const ValueId up = lin("up", h, DType::kF32, F, d, Wu);
  const ValueId act = g.add("silu_mul", "act", {gate, up});
  const ValueId logits = lin("lm_head", act, DType::kF32, V, F, Wl);
  const ValueId loss = g.add_node("cross_entropy", "loss", {logits, tgtv}, {}, 2)[0];
  g.mark_output(loss);
  const std::vector<ValueId> grads = train::build_backward(g, loss, {av, bv, xv});
  g.validate();

  // Pruning: only the trained path gets backward nodes; frozen weights get no gradient.
  std::map<std::string, int> ops;
  for (const graph::Node& n : g.nodes()) ops[n.op]++;
  CHECK(ops["linear_grad_weight"] == 2);  // dA, dB only
  CHECK(ops["linear_grad_input"] == 9);   // lm_head, gate, up, o, q, k, v, lora_b, lora_a
  CHECK(ops["rms_norm_grad"] == 1);
  for (const graph::Node& n : g.nodes()) {
    if (n.op == "rms_norm_grad") CHECK(n.attrs.get_int("weight_grad") == 0);
  }

  ThreadPool pool(2);
  graph::Executor ex(g, pool);
  // f32 gradients: the GEMMs exact in f32, as LoraTrainer runs them at f32 precision (on AMX
  // CPUs the default precision splits x into 16 bits and rounds the f16 weight to bf16).
  const cpu::ScopedGemmPrecision exact(cpu::GemmPrecision::kF32);
  const std::vector<Tensor> out = ex.run({{"x", f32_tensor({N, d}, x)},
                                          {"positions", Tensor::from_i32({N}, pos)},
                                          {"lengths", Tensor::from_i32({B}, lengths)},
                                          {"targets", Tensor::from_i32({N}, targets)},
                                          {"seed", Tensor::from_i32({2}, {1, 2})},
                                          {"A", f32_tensor({r, d}, A)},
                                          {"B", f32_tensor({H * D, r}, Bm)}});
  REQUIRE(out.size() == 4);
  // The backward is planned with the forward: activations die at their last (backward) reader,
  // so the arena is well below the sum of every intermediate.
  CHECK(ex.plan().arena_bytes < ex.plan().naive_bytes / 2);
  WARN("training graph arena " << ex.plan().arena_bytes << " bytes of " << ex.plan().naive_bytes
                               << " without reuse");

  // The same chain in double, forward then backward, from the double rules.
  cpu::SerialRunner serial;
  auto fwd = [](const Vec& in, const Vec& w, int64_t m, int64_t n, int64_t kk) {
    Vec y(m * n);
    cpu::linear_forward_ref<double>(m, n, kk, in.data(), w.data(), y.data());
    return y;
  };
  auto bwd_x = [](const Vec& dy, const Vec& w, int64_t m, int64_t n, int64_t kk) {
    Vec dx(m * kk);
    cpu::linear_grad_input_ref<double>(m, n, kk, dy.data(), w.data(), dx.data());
    return dx;
  };
  auto bwd_w = [](const Vec& dy, const Vec& in, int64_t m, int64_t n, int64_t kk) {
    Vec dw(n * kk);
    cpu::linear_grad_weight_ref<double>(m, n, kk, dy.data(), in.data(), dw.data());
    return dw;
  };
  Vec n1d(N * d);
  cpu::rms_norm_ref<double>(N, d, x.data(), wn.data(), eps, n1d.data());
  Vec xdd = n1d;
  for (double& e : xdd) e *= s;
  const Vec ud = fwd(xdd, A, N, r, d);
  const Vec qd = add(fwd(n1d, Wq, N, H * D, d), fwd(ud, Bm, N, H * D, r));
  const Vec kd = fwd(n1d, Wk, N, Hkv * D, d), vd = fwd(n1d, Wv, N, Hkv * D, d);
  Vec qrd(N * H * D), krd(N * Hkv * D);
  cpu::rope_ref<double>(N, H, D, qd.data(), pos.data(), inv_freq.data(), 1.0, qrd.data());
  cpu::rope_ref<double>(N, Hkv, D, kd.data(), pos.data(), inv_freq.data(), 1.0, krd.data());
  cpu::CausalAttentionDims ad{B, T, H, Hkv, D, att_scale, 0};
  Vec attd(N * H * D), lse(N * H);
  cpu::causal_attention_forward<double>(ad, qrd.data(), H * D, krd.data(), Hkv * D, vd.data(),
                                        Hkv * D, lengths.data(), attd.data(), H * D, lse.data(),
                                        serial);
  const Vec hd = add(x, fwd(attd, Wo, N, d, H * D));
  const Vec gd = fwd(hd, Wg, N, F, d), upd = fwd(hd, Wu, N, F, d);
  Vec actd(N * F);
  cpu::silu_mul_ref<double>(N, F, gd.data(), upd.data(), actd.data());
  const Vec logd = fwd(actd, Wl, N, V, F);
  const double lossd =
      cpu::cross_entropy_forward<double>(N, V, logd.data(), V, targets.data(), -100, serial);
  CHECK(std::abs(vec_of(out[0])[0] - lossd) <= 1e-5 * std::abs(lossd));

  Vec dlog(N * V);
  cpu::cross_entropy_backward<double>(N, V, logd.data(), V, targets.data(), -100, 1.0, dlog.data(),
                                      V, serial);
  const Vec dact = bwd_x(dlog, Wl, N, V, F);
  Vec dg(N * F), dup(N * F);
  cpu::silu_mul_backward<double>(N, F, gd.data(), F, upd.data(), F, dact.data(), F, dg.data(), F,
                                 dup.data(), F, serial);
  const Vec dh = add(bwd_x(dg, Wg, N, F, d), bwd_x(dup, Wu, N, F, d));
  const Vec datt = bwd_x(dh, Wo, N, d, H * D);
  Vec dqr(N * H * D), dkr(N * Hkv * D), dvd(N * Hkv * D), dq(N * H * D), dk(N * Hkv * D);
  cpu::causal_attention_backward<double>(ad, qrd.data(), H * D, krd.data(), Hkv * D, vd.data(),
                                         Hkv * D, lengths.data(), attd.data(), H * D, lse.data(),
                                         datt.data(), H * D, dqr.data(), H * D, dkr.data(), Hkv * D,
                                         dvd.data(), Hkv * D, serial);
  cpu::rope_backward<double>(N, H, D, dqr.data(), H * D, pos.data(), inv_freq.data(), 1.0,
                             dq.data(), H * D, serial);
  cpu::rope_backward<double>(N, Hkv, D, dkr.data(), Hkv * D, pos.data(), inv_freq.data(), 1.0,
                             dk.data(), Hkv * D, serial);
  const Vec dBd = bwd_w(dq, ud, N, H * D, r);
  const Vec du = bwd_x(dq, Bm, N, H * D, r);
  const Vec dAd = bwd_w(du, xdd, N, r, d);
  Vec dxd_branch = bwd_x(du, A, N, r, d);
  for (double& e : dxd_branch) e *= s;
  const Vec dn1 = add(add(add(bwd_x(dq, Wq, N, H * D, d), bwd_x(dk, Wk, N, Hkv * D, d)),
                          bwd_x(dvd, Wv, N, Hkv * D, d)),
                      dxd_branch);
  Vec dx_norm(N * d);
  cpu::rms_norm_backward<double>(N, d, x.data(), d, wn.data(), dn1.data(), d, eps, dx_norm.data(),
                                 d, nullptr, serial);
  const Vec dxd = add(dh, dx_norm);

  // f32 arithmetic through ~12 ops of short sums: ~1e-6 expected; 1e-5 bounds it.
  const double eA = rel_l2(vec_of(out[1]), dAd), eB = rel_l2(vec_of(out[2]), dBd),
               eX = rel_l2(vec_of(out[3]), dxd);
  CHECK(eA <= 1e-5);
  CHECK(eB <= 1e-5);
  CHECK(eX <= 1e-5);
  WARN("graph f32 vs double rules: dA " << eA << ", dB " << eB << ", dx " << eX);
}

TEST_CASE("autograd: an op without a rule on the path, and an unreachable input", "[autograd]") {
  using graph::Dim;
  graph::Graph g;
  const auto x = g.add_input("x", DType::kF32, {Dim::fixed(3), Dim::fixed(4)});
  const auto rows = g.add_input("rows", DType::kI32, {Dim::fixed(2)});
  const auto t = g.add_input("t", DType::kI32, {Dim::fixed(2)});
  const auto unused = g.add_input("unused", DType::kF32, {Dim::fixed(4)});
  const auto picked = g.add("gather_rows", "pick", {x, rows});
  const auto loss = g.add_node("cross_entropy", "loss", {picked, t}, {}, 2)[0];
  g.mark_output(loss);
  graph::Graph g2 = g;
  CHECK_THROWS_WITH(train::build_backward(g, loss, {x}),
                    Catch::Contains("no gradient rule for op 'gather_rows'"));
  CHECK_THROWS_WITH(train::build_backward(g2, loss, {unused}),
                    Catch::Contains("does not depend on 'unused'"));
}

TEST_CASE("causal attention: the f32 GEMM kernels match the double specification", "[autograd]") {
  std::mt19937 rng(3);
  ThreadPool pool(2);
  cpu::SerialRunner serial;
  struct Case {
    int64_t heads, kv_heads, window, seq = 37;
  };
  // 150 keys: three causal blocks of the GEMM kernels (64 rows each, the last partial); a
  // window of 30 over 200 keys: blocks whose keys start past 0 (and rows within a block whose
  // first key lies past the block's); 700 keys: 11 blocks, the scratch of one block's rows.
  for (const Case c : {Case{6, 2, 0}, Case{8, 2, 0}, Case{3, 3, 9}, Case{4, 2, 0, 150},
                       Case{2, 1, 70, 150}, Case{4, 2, 30, 200}, Case{2, 2, 0, 700}}) {
    cpu::CausalAttentionDims d;
    d.batch = 3;
    d.seq_len = c.seq;
    d.n_heads = c.heads;
    d.n_kv_heads = c.kv_heads;
    d.head_dim = 20;
    d.scale = 1.0 / std::sqrt(20.0);
    d.window = c.window;
    // Padding, and a sequence of padding only.
    const std::vector<int32_t> lengths = {static_cast<int32_t>(c.seq), c.seq > 100 ? 97 : 20, 0};
    const int64_t N = d.batch * d.seq_len, qw = c.heads * d.head_dim, kw = c.kv_heads * d.head_dim;
    const Vec q = random_vec(N * qw, rng, 2.0), k = random_vec(N * kw, rng, 2.0),
              v = random_vec(N * kw, rng), dout = random_vec(N * qw, rng);
    auto f32 = [](const Vec& x) { return std::vector<float>(x.begin(), x.end()); };
    auto f64 = [](const std::vector<float>& x) { return Vec(x.begin(), x.end()); };
    const std::vector<float> q32 = f32(q), k32 = f32(k), v32 = f32(v), do32 = f32(dout);
    std::vector<float> o(N * qw), lse(N * c.heads), dq(N * qw, 7.0f), dk(N * kw, 7.0f),
        dv(N * kw, 7.0f);
    cpu::causal_attention_forward_f32(d, q32.data(), qw, k32.data(), kw, v32.data(), kw,
                                      lengths.data(), o.data(), qw, lse.data(), pool);
    cpu::causal_attention_backward_f32(d, q32.data(), qw, k32.data(), kw, v32.data(), kw,
                                       lengths.data(), o.data(), qw, lse.data(), do32.data(), qw,
                                       dq.data(), qw, dk.data(), kw, dv.data(), kw, pool);
    Vec ro(N * qw), rl(N * c.heads), rdq(N * qw), rdk(N * kw), rdv(N * kw);
    const Vec qr = f64(q32), kr = f64(k32), vr = f64(v32), dr = f64(do32);
    cpu::causal_attention_forward<double>(d, qr.data(), qw, kr.data(), kw, vr.data(), kw,
                                          lengths.data(), ro.data(), qw, rl.data(), serial);
    cpu::causal_attention_backward<double>(d, qr.data(), qw, kr.data(), kw, vr.data(), kw,
                                           lengths.data(), ro.data(), qw, rl.data(), dr.data(), qw,
                                           rdq.data(), qw, rdk.data(), kw, rdv.data(), kw, serial);
    INFO("heads " << c.heads << " kv heads " << c.kv_heads << " window " << c.window << " seq "
                  << c.seq);
    // f32 GEMMs over 20- to 150-term sums and f32 exp: ~1e-6; 1e-5 bounds it.
    CHECK(rel_l2(f64(o), ro) <= 1e-5);
    CHECK(rel_l2(f64(lse), rl) <= 1e-5);
    CHECK(rel_l2(f64(dq), rdq) <= 1e-5);
    CHECK(rel_l2(f64(dk), rdk) <= 1e-5);
    CHECK(rel_l2(f64(dv), rdv) <= 1e-5);
    // Every output element was written (the 7.0 fill is gone from the padding rows).
    for (int64_t c2 = 0; c2 < kw; ++c2) CHECK(dk[(2 * c.seq + 5) * kw + c2] == 0.0f);
  }
}

namespace {

double bf(double x) { return bf16_to_f32(f32_to_bf16(static_cast<float>(x))); }

// causal_attention_cpu.h's bf16_products in double: every product operand rounded to bf16
// (Q, K, V, dO, and P, dS as computed), softmax and sums in double. Contiguous rows of width
// H*D (q, o, dout, dq) and Hkv*D (k, v, dk, dv); lse [N, H].
// dq_slack, dk_slack (where given): per element, how far a kernel that computes P and dS in f32
// before rounding them to bf16 may be from dq, dk. dS = P (dP - D) scale cancels where dP and D
// are close, so the f32 error of dP and D (at most D terms of 2^-24 each: 2^-18 of their sums of
// magnitudes, generously) can move dS's f32 value across a bf16 rounding boundary, and the
// rounded dS then differs by up to one bf16 step (2^-7 |dS|): u_ij = 2^-7 |dS_ij| + P_ij scale
// 2^-18 (sum |dO V_j| + sum |dO O|), and dq_ic may move by sum_j u_ij |K_jc|, dk_jc by
// sum_i u_ij |Q_ic|.
void attention_bf16_ref(const cpu::CausalAttentionDims& d, const Vec& q, const Vec& k,
                        const Vec& v, const std::vector<int32_t>& lengths, const Vec& dout,
                        Vec& o, Vec& lse, Vec& dq, Vec& dk, Vec& dv, Vec* dq_slack = nullptr,
                        Vec* dk_slack = nullptr) {
  const int64_t D = d.head_dim, H = d.n_heads, Hkv = d.n_kv_heads, T = d.seq_len;
  const int64_t qw = H * D, kw = Hkv * D;
  if (dq_slack != nullptr) dq_slack->assign(dq.size(), 0.0);
  if (dk_slack != nullptr) dk_slack->assign(dk.size(), 0.0);
  std::fill(o.begin(), o.end(), 0.0);
  std::fill(lse.begin(), lse.end(), 0.0);
  std::fill(dq.begin(), dq.end(), 0.0);
  std::fill(dk.begin(), dk.end(), 0.0);
  std::fill(dv.begin(), dv.end(), 0.0);
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / Hkv);
      for (int64_t t = 0; t < lengths[static_cast<size_t>(b)]; ++t) {
        const int64_t lo = d.window > 0 ? std::max<int64_t>(0, t - d.window + 1) : 0;
        const double* qt = q.data() + (b * T + t) * qw + h * D;
        const double* dot = dout.data() + (b * T + t) * qw + h * D;
        std::vector<double> s(static_cast<size_t>(t + 1)), dp(s.size());
        double mx = -INFINITY;
        for (int64_t j = lo; j <= t; ++j) {
          const double* kj = k.data() + (b * T + j) * kw + g * D;
          const double* vj = v.data() + (b * T + j) * kw + g * D;
          double acc = 0, accd = 0;
          for (int64_t c = 0; c < D; ++c) {
            acc += bf(qt[c]) * bf(kj[c]);
            accd += bf(dot[c]) * bf(vj[c]);
          }
          s[static_cast<size_t>(j)] = d.scale * acc;
          dp[static_cast<size_t>(j)] = accd;
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        double z = 0;
        for (int64_t j = lo; j <= t; ++j) z += std::exp(s[static_cast<size_t>(j)] - mx);
        const double l = mx + std::log(z);
        lse[static_cast<size_t>((b * T + t) * H + h)] = l;
        double* ot = o.data() + (b * T + t) * qw + h * D;
        for (int64_t j = lo; j <= t; ++j) {
          s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - l);  // P
          const double* vj = v.data() + (b * T + j) * kw + g * D;
          for (int64_t c = 0; c < D; ++c) ot[c] += bf(s[static_cast<size_t>(j)]) * bf(vj[c]);
        }
        double di = 0;
        for (int64_t c = 0; c < D; ++c) di += dot[c] * ot[c];
        double* dqt = dq.data() + (b * T + t) * qw + h * D;
        for (int64_t j = lo; j <= t; ++j) {
          const double pj = s[static_cast<size_t>(j)];
          const double ds = bf(pj * (dp[static_cast<size_t>(j)] - di) * d.scale);
          const double* kj = k.data() + (b * T + j) * kw + g * D;
          double* dkj = dk.data() + (b * T + j) * kw + g * D;
          double* dvj = dv.data() + (b * T + j) * kw + g * D;
          for (int64_t c = 0; c < D; ++c) {
            dqt[c] += ds * bf(kj[c]);
            dkj[c] += ds * bf(qt[c]);
            dvj[c] += bf(pj) * bf(dot[c]);
          }
          if (dq_slack != nullptr) {
            const double* vj = v.data() + (b * T + j) * kw + g * D;
            double mag = 0;
            for (int64_t c = 0; c < D; ++c) {
              mag += std::fabs(bf(dot[c]) * bf(vj[c])) + std::fabs(dot[c] * ot[c]);
            }
            const double u = 0x1p-7 * std::fabs(ds) + std::fabs(pj) * d.scale * 0x1p-18 * mag;
            for (int64_t c = 0; c < D; ++c) {
              const auto qi = static_cast<size_t>((b * T + t) * qw + h * D + c);
              const auto ki = static_cast<size_t>((b * T + j) * kw + g * D + c);
              (*dq_slack)[qi] += u * std::fabs(bf(kj[c]));
              (*dk_slack)[ki] += u * std::fabs(bf(qt[c]));
            }
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("causal attention: bf16 products match a double reference with the same roundings",
          "[autograd]") {
  // On each ISA level the machine has: where bf16 multiplies fast (AMX tiles; vdpbf16ps with
  // the panels policy on) the kernels with bf16_products round every product operand: within
  // 1e-5 of attention_bf16_ref (measured <= 8e-7: f32 sums, and P and dS from f32 softmax steps,
  // of which one in ~2^16 may round to the neighbouring bf16 number), and > 1e-3 away from the
  // unrounded specification (measured 4e-3..1.2e-2), which shows the rounding happened.
  // dq and dk: such a neighbouring dS can move a whole (row, head) of them by up to 1 %, where
  // dS cancels (on an Emerald Rapids VM without AMX, vdpbf16ps: one row of 1,200, dq 2.2e-5 and
  // dk 2.6e-5 in relative L2 over all, 3e-7 elsewhere). So every element of dq and dk is held
  // to the reference's slack for it (attention_bf16_ref: one bf16 step of every dS term it sums
  // plus the f32 error that can cause it), and their relative L2 to 1e-5 over all but the 1 %
  // of (row, head) blocks farthest off. Elsewhere the flag changes nothing.
  std::mt19937 rng(13);
  ThreadPool pool(2);
  cpu::SerialRunner serial;
  const cpu::Isa best = cpu::active_isa();
  const cpu::Bf16PanelsPolicy policy = cpu::bf16_panels_policy();
  int fast_levels = 0;
  for (const char* name : {"amx", "avx512_bf16", "avx2"}) {
    const cpu::Isa isa = *cpu::isa_from_name(name);
    if (!cpu::isa_includes(best, isa) || !cpu::set_isa(isa)) continue;
    cpu::set_bf16_panels_policy(cpu::Bf16PanelsPolicy::kOn);
    const bool fast =
        cpu::conv_bf16_native() && (cpu::has_amx() || cpu::bf16_panels_preferred());
    fast_levels += fast;
    struct Case {
      int64_t heads, kv_heads, window, seq;
    };
    for (const Case c : {Case{4, 2, 0, 150}, Case{3, 1, 9, 37}}) {
      INFO(name << ": heads " << c.heads << " kv heads " << c.kv_heads << " window " << c.window
                << " seq " << c.seq);
      cpu::CausalAttentionDims d;
      d.batch = 2;
      d.seq_len = c.seq;
      d.n_heads = c.heads;
      d.n_kv_heads = c.kv_heads;
      d.head_dim = 24;
      d.scale = 1.0 / std::sqrt(24.0);
      d.window = c.window;
      d.bf16_products = true;
      const std::vector<int32_t> lengths = {static_cast<int32_t>(c.seq),
                                            static_cast<int32_t>(c.seq - 11)};
      const int64_t N = d.batch * d.seq_len, qw = c.heads * d.head_dim, kw = c.kv_heads * d.head_dim;
      auto f32v = [](const Vec& x) { return std::vector<float>(x.begin(), x.end()); };
      auto f64 = [](const std::vector<float>& x) { return Vec(x.begin(), x.end()); };
      const std::vector<float> q = f32v(random_vec(N * qw, rng, 2.0)),
                               k = f32v(random_vec(N * kw, rng, 2.0)),
                               v = f32v(random_vec(N * kw, rng)), dout = f32v(random_vec(N * qw, rng));
      std::vector<float> o(N * qw), lse(N * c.heads), dq(N * qw, 7.0f), dk(N * kw, 7.0f),
          dv(N * kw, 7.0f);
      cpu::causal_attention_forward_f32(d, q.data(), qw, k.data(), kw, v.data(), kw, lengths.data(),
                                        o.data(), qw, lse.data(), pool);
      cpu::causal_attention_backward_f32(d, q.data(), qw, k.data(), kw, v.data(), kw,
                                         lengths.data(), o.data(), qw, lse.data(), dout.data(), qw,
                                         dq.data(), qw, dk.data(), kw, dv.data(), kw, pool);
      Vec ro(N * qw), rl(N * c.heads), rdq(N * qw), rdk(N * kw), rdv(N * kw);
      const Vec qd = f64(q), kd = f64(k), vd = f64(v), dd = f64(dout);
      // The unrounded specification.
      cpu::causal_attention_forward<double>(d, qd.data(), qw, kd.data(), kw, vd.data(), kw,
                                            lengths.data(), ro.data(), qw, rl.data(), serial);
      cpu::causal_attention_backward<double>(d, qd.data(), qw, kd.data(), kw, vd.data(), kw,
                                             lengths.data(), ro.data(), qw, rl.data(), dd.data(),
                                             qw, rdq.data(), qw, rdk.data(), kw, rdv.data(), kw,
                                             serial);
      const std::vector<std::pair<const std::vector<float>*, const Vec*>> outs = {
          {&o, &ro}, {&dq, &rdq}, {&dk, &rdk}, {&dv, &rdv}};
      if (!fast) {
        for (const auto& [got, want] : outs) CHECK(rel_l2(f64(*got), *want) <= 1e-5);
        continue;
      }
      for (const auto& [got, want] : outs) CHECK(rel_l2(f64(*got), *want) > 1e-3);
      Vec bo(N * qw), bl(N * c.heads), bdq(N * qw), bdk(N * kw), bdv(N * kw);
      Vec sdq, sdk;
      attention_bf16_ref(d, qd, kd, vd, lengths, dd, bo, bl, bdq, bdk, bdv, &sdq, &sdk);
      const double eo = rel_l2(f64(o), bo), eq = rel_l2_trimmed(f64(dq), bdq, d.head_dim),
                   ek = rel_l2_trimmed(f64(dk), bdk, d.head_dim), ev = rel_l2(f64(dv), bdv);
      INFO("o " << eo << " dq " << eq << " (whole " << rel_l2(f64(dq), bdq) << ") dk " << ek
                << " (whole " << rel_l2(f64(dk), bdk) << ") dv " << ev);
      CHECK(eo <= 1e-5);
      CHECK(rel_l2(f64(lse), bl) <= 1e-5);
      CHECK(eq <= 1e-5);
      CHECK(ek <= 1e-5);
      CHECK(ev <= 1e-5);
      CHECK(count_outside(f64(dq), bdq, sdq) == 0);
      CHECK(count_outside(f64(dk), bdk, sdk) == 0);
      for (int64_t c2 = 0; c2 < kw; ++c2) CHECK(dk[(c.seq + c.seq - 3) * kw + c2] == 0.0f);
    }
  }
  cpu::set_isa(best);
  cpu::set_bf16_panels_policy(policy);
  // Every level above avx2 with AVX512-BF16 takes the bf16 products.
  CHECK(fast_levels == (cpu::isa_includes(best, cpu::Isa::kAvx512Bf16) ? (cpu::has_amx() ? 2 : 1) : 0));
}

namespace {

// `blocks` bf16 blocks of `rows[i]` x k stacked as one GemmWeights; dense: their values, [n, k].
struct StackedBf16 {
  std::vector<FormatWeights> parts;
  GemmWeights w;
  Vec dense;
};

StackedBf16 stacked_bf16(const std::vector<int64_t>& rows, int64_t k, std::mt19937& rng) {
  StackedBf16 s;
  for (int64_t r : rows) s.parts.push_back(make_weights(DType::kBF16, r, k, rng));
  s.w = s.parts[0].view;
  s.w.n_blocks = static_cast<int>(rows.size());
  for (size_t b = 0; b < rows.size(); ++b) {
    s.w.data[b] = s.parts[b].view.data[0];
    s.w.rows[b] = rows[b];
    s.dense.insert(s.dense.end(), s.parts[b].dense.begin(), s.parts[b].dense.end());
  }
  return s;
}

}  // namespace

// The f32-panel path reads W's rows in strips of the panel width (64 on AVX-512, 16 on AVX2)
// without transposing them: every level the CPU has, a partial last strip, three blocks (fused
// Q/K/V) whose rows follow each other in the reduction, dy and dx with row strides past their
// widths (the padding must stay untouched), every 16-bit format widened in the packer.
TEST_CASE("linear_grad_input: f32 panels over W's rows at every ISA level, strided dy and dx",
          "[autograd]") {
  std::mt19937 rng(17);
  ThreadPool pool(2);
  const cpu::ScopedGemmPrecision exact(cpu::GemmPrecision::kF32);
  cpu::IsaRestore restore;
  const int64_t m = 9, k = 150, lddy = 80, lddx = k + 5;
  const int64_t rows[3] = {32, 16, 24};
  int64_t checked = 0;
  for (cpu::Isa isa : cpu::supported_isas()) {
    REQUIRE(cpu::set_isa(isa));
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      INFO(cpu::isa_name(isa) << " " << dtype_name(dt));
      FormatWeights blk[3] = {make_weights(dt, rows[0], k, rng), make_weights(dt, rows[1], k, rng),
                              make_weights(dt, rows[2], k, rng)};
      GemmWeights w = blk[0].view;
      w.n_blocks = 3;
      Vec dense;
      for (int b = 0; b < 3; ++b) {
        w.data[b] = blk[b].view.data[0];
        w.rows[b] = rows[b];
        dense.insert(dense.end(), blk[b].dense.begin(), blk[b].dense.end());
      }
      const int64_t n = w.n();
      std::vector<float> dy(m * lddy, 1e30f), dx(m * lddx, -3.0f);
      Vec dyd(m * n), ref(m * k);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          dy[i * lddy + j] = static_cast<float>(std::normal_distribution<double>()(rng));
          dyd[i * n + j] = dy[i * lddy + j];
        }
      }
      cpu::linear_grad_input(m, dy.data(), lddy, w, dx.data(), lddx, pool);
      cpu::linear_grad_input_ref<double>(m, n, k, dyd.data(), dense.data(), ref.data());
      Vec got(m * k);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < lddx; ++j) {
          if (j >= k) {
            REQUIRE(dx[i * lddx + j] == -3.0f);
            continue;
          }
          got[i * k + j] = dx[i * lddx + j];
        }
      }
      CHECK(rel_l2(got, ref) <= 1e-5);
      ++checked;
    }
  }
  CHECK(checked > 0);
}

TEST_CASE("linear_grad_input: bf16 weights and a bf16-exact dy (bf16 training)", "[autograd]") {
  // bf16 training rounds dy to bf16; at the default GEMM precision dx = dy · W then reads W in
  // place: on AMX CPUs through gemm_amx with a packer that transposes W tile by tile (blocks of
  // a multiple of 32 rows but the last; other stacks take the panels), on AVX512-BF16 CPUs
  // where the vdpbf16ps tile wins through matmul_bf16. Either way the products are exact (dy's
  // rounding changes nothing), so the bound is the f32 one; fused blocks, strided dy and dx,
  // k = 300 (a short last group of 16 columns), last blocks ending mid k-step.
  std::mt19937 rng(9);
  ThreadPool pool(2);
  const int64_t m = 37, k = 300;
  const std::vector<std::vector<int64_t>> stacks = {{100}, {100, 45}, {96, 45}, {64, 32, 45}};
  for (const std::vector<int64_t>& rows : stacks) {
    const StackedBf16 st = stacked_bf16(rows, k, rng);
    const GemmWeights& w = st.w;
    INFO(w.n_blocks << " block(s), " << w.n() << " rows");
    const int64_t n = w.n();
    for (int64_t pad : {0, 3}) {
      INFO("row padding " << pad);
      const int64_t lddy = n + pad, lddx = k + pad;
      std::vector<float> dy(static_cast<size_t>(m * lddy), 7.0f), dx(m * lddx, 12345.0f);
      for (float& v : dy) v = bf16_to_f32(f32_to_bf16(static_cast<float>(random_vec(1, rng)[0])));
      Vec dyd(m * n), ref(m * k);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) dyd[i * n + j] = dy[i * lddy + j];
      }
      cpu::linear_grad_input(m, dy.data(), lddy, w, dx.data(), lddx, pool);
      cpu::linear_grad_input_ref<double>(m, n, k, dyd.data(), st.dense.data(), ref.data());
      Vec got(m * k);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t c = 0; c < k; ++c) got[i * k + c] = dx[i * lddx + c];
        for (int64_t c = k; c < lddx; ++c) CHECK(dx[i * lddx + c] == 12345.0f);
      }
      CHECK(rel_l2(got, ref) <= 1e-6);
      if (cpu::has_amx() && rows[0] % 32 == 0 && (rows.size() < 3 || rows[1] % 32 == 0)) {
        // The dispatch on AMX: gemm_amx_wt at kBf16 (dy exact), bit for bit.
        std::vector<float> fw(m * lddx, 12345.0f);
        const cpu::ScopedGemmPrecision bf16(cpu::GemmPrecision::kBf16);
        cpu::gemm_detail::gemm_amx_wt(m, dy.data(), lddy, w, fw.data(), lddx, pool);
        CHECK(std::memcmp(fw.data(), dx.data(), fw.size() * sizeof(float)) == 0);
      } else if (rows.size() == 1 && pad == 0 && cpu::conv_bf16_native() &&
                 cpu::bf16_panels_preferred()) {
        // The vdpbf16ps tile where it beats the f32 panels: bit for bit what matmul_bf16 gives.
        std::vector<float> mm(m * k);
        cpu::matmul_bf16(m, n, k, dy.data(), static_cast<const uint16_t*>(w.data[0]), mm.data(),
                         pool);
        CHECK(std::memcmp(mm.data(), dx.data(), mm.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("linear_grad_input: bf16 weights at training sizes, any dy", "[autograd]") {
  // 300 rows of dy over 2080 rows of W (QKV-like blocks 1024 + 512 + 544): on AMX gemm_amx_wt's
  // reduction chunks (partial sums between them), m-chunks and unit ranges over threads. A dy
  // that is not bf16 runs at the default precision (hi + lo bf16 on AMX: 16 bits of dy, ~2^-17
  // relative per product). round_dy / round_dx (folded roundings) give bit for bit round_bf16
  // before and after, at the best ISA level (the tiles round) and at avx2 (rounded copies).
  std::mt19937 rng(21);
  ThreadPool pool(2);
  const int64_t m = 300, k = 200;
  const StackedBf16 st = stacked_bf16({1024, 512, 544}, k, rng);
  const int64_t n = st.w.n();
  for (bool exact : {true, false}) {
    INFO((exact ? "bf16-exact dy" : "f32 dy"));
    std::vector<float> dy(static_cast<size_t>(m * n));
    for (float& v : dy) {
      v = static_cast<float>(random_vec(1, rng)[0]);
      if (exact) v = bf16_to_f32(f32_to_bf16(v));
    }
    std::vector<float> dx(m * k);
    Vec ref(m * k);
    cpu::linear_grad_input(m, dy.data(), n, st.w, dx.data(), k, pool);
    cpu::linear_grad_input_ref<double>(m, n, k, Vec(dy.begin(), dy.end()).data(),
                                       st.dense.data(), ref.data());
    const double e = rel_l2(Vec(dx.begin(), dx.end()), ref);
    INFO("relative error " << e);
    CHECK(e <= (exact ? 1e-6 : 2e-5));
    const cpu::Isa best = cpu::active_isa();
    for (cpu::Isa isa : {best, cpu::Isa::kAvx2}) {
      INFO(cpu::isa_name(isa));
      REQUIRE(cpu::set_isa(isa));
      std::vector<float> dy_r(dy.size()), want(m * k), got(m * k);
      cpu::round_bf16(m, n, dy.data(), n, dy_r.data(), n, pool);
      cpu::linear_grad_input(m, dy_r.data(), n, st.w, want.data(), k, pool);
      cpu::round_bf16(m, k, want.data(), k, want.data(), k, pool);
      cpu::linear_grad_input(m, dy.data(), n, st.w, got.data(), k, pool, true, true);
      CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
    }
    cpu::set_isa(best);
  }
}

TEST_CASE("cross_entropy: the float kernels (vector exp) match the double ones", "[autograd]") {
  // Vocabularies around the 8-wide vectors and a real one; logits up to +-30 (a trained LM's
  // range), a row with -inf (masked) entries, ignored rows; the backward also in place. The
  // float path takes e^x from the AVX2 vector exp (~1 ulp) with double sums: the loss within
  // 1e-6 relative of the double kernels, each gradient element within 1e-6 of dloss.
  std::mt19937 rng(77);
  ThreadPool pool(2);
  const double dloss = 0.37;
  for (int64_t vocab : {1, 7, 8, 9, 1000, 32003}) {
    INFO("vocab " << vocab);
    const int64_t rows = 5;
    std::vector<int32_t> targets = {0, -100, static_cast<int32_t>(vocab - 1),
                                    static_cast<int32_t>(vocab / 2), 0};
    std::uniform_real_distribution<double> u(-30.0, 30.0);
    std::vector<float> lf(static_cast<size_t>(rows * vocab));
    for (float& v : lf) v = static_cast<float>(u(rng));
    for (int64_t i = 1; i < vocab; i += 3) lf[4 * vocab + i] = -INFINITY;  // row 4: masked
    const Vec ld(lf.begin(), lf.end());
    const double want = cpu::cross_entropy_forward<double>(rows, vocab, ld.data(), vocab,
                                                           targets.data(), -100, pool);
    const double got = cpu::cross_entropy_forward<float>(rows, vocab, lf.data(), vocab,
                                                         targets.data(), -100, pool);
    CHECK(std::isfinite(got));
    CHECK(std::abs(got - want) <= 1e-6 * std::abs(want) + 1e-9);
    Vec dd(rows * vocab);
    cpu::cross_entropy_backward<double>(rows, vocab, ld.data(), vocab, targets.data(), -100,
                                        dloss, dd.data(), vocab, pool);
    std::vector<float> df(lf.size()), inplace = lf;
    cpu::cross_entropy_backward<float>(rows, vocab, lf.data(), vocab, targets.data(), -100,
                                       dloss, df.data(), vocab, pool);
    cpu::cross_entropy_backward<float>(rows, vocab, inplace.data(), vocab, targets.data(), -100,
                                       dloss, inplace.data(), vocab, pool);
    double worst = 0;
    for (size_t i = 0; i < df.size(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(df[i]) - dd[i]));
    }
    CHECK(worst <= 1e-6 * dloss);
    CHECK(std::memcmp(df.data(), inplace.data(), df.size() * sizeof(float)) == 0);
    // With the forward's row logsumexps (hi + lo floats: what the graph's cross_entropy_grad
    // takes) instead of its own: the same loss, the same bound against the double gradient.
    std::vector<float> lse(static_cast<size_t>(2 * rows), -1.0f), dr(lf.size());
    const double got_lse = cpu::cross_entropy_forward<float>(rows, vocab, lf.data(), vocab,
                                                             targets.data(), -100, pool,
                                                             lse.data());
    CHECK(got_lse == got);
    CHECK(lse[2] == 0.0f);  // row 1 is ignored
    CHECK(lse[3] == 0.0f);
    cpu::cross_entropy_backward<float>(rows, vocab, lf.data(), vocab, targets.data(), -100,
                                       dloss, dr.data(), vocab, pool, lse.data());
    double worst_lse = 0;
    for (size_t i = 0; i < dr.size(); ++i) {
      worst_lse = std::max(worst_lse, std::abs(static_cast<double>(dr[i]) - dd[i]));
    }
    CHECK(worst_lse <= 1e-6 * dloss);
    for (int64_t c = 0; c < vocab; ++c) CHECK(df[static_cast<size_t>(vocab + c)] == 0.0f);
  }
}

TEST_CASE("round_bf16 rounds to nearest even bf16, exactly as half.h", "[autograd]") {
  std::mt19937 rng(8);
  cpu::SerialRunner serial;
  std::vector<float> x = {1.0f,
                          1.00390625f,
                          1.01171875f,
                          -3.3e-39f,
                          65504.0f,
                          -0.0f,
                          std::numeric_limits<float>::infinity()};  // ties both ways, subnormal
  const Vec more = random_vec(57, rng, 100.0);
  x.insert(x.end(), more.begin(), more.end());
  std::vector<float> y(x.size());
  cpu::round_bf16(1, static_cast<int64_t>(x.size()), x.data(), 0, y.data(), 0, serial);
  for (size_t i = 0; i < x.size(); ++i) {
    INFO(x[i]);
    CHECK(y[i] == bf16_to_f32(f32_to_bf16(x[i])));
  }
  CHECK(y[1] == 1.0f);       // 1 + 2^-8 ties to even (down)
  CHECK(y[2] == 1.015625f);  // 1 + 3·2^-8 ties to even (up)

  // Rows with strides and a tail (the vector and scalar parts), NaNs with payloads, the
  // largest float (rounds up to inf), in place: bit for bit as half.h.
  const int64_t rows = 5, cols = 83, ld = 91;
  std::vector<float> m(static_cast<size_t>(rows * ld));
  const Vec r = random_vec(rows * ld, rng, 1e3);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(r[i]);
  const uint32_t specials[] = {0x7fc00001u, 0xffbfffffu, 0x7f800001u, 0x7f7fffffu, 0xff7fffffu,
                               0x00008000u, 0x80018000u, 0x3f808000u};
  for (size_t i = 0; i < std::size(specials); ++i) std::memcpy(&m[i * 11 + 3], &specials[i], 4);
  std::vector<float> out(m.size(), 5.0f), inplace = m;
  cpu::round_bf16(rows, cols, m.data(), ld, out.data(), ld, serial);
  ThreadPool pool(2);
  cpu::round_bf16(rows, cols, inplace.data(), ld, inplace.data(), ld, pool);
  int64_t bad = 0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < ld; ++c) {
      const size_t at = static_cast<size_t>(i * ld + c);
      const float want = c < cols ? bf16_to_f32(f32_to_bf16(m[at])) : 5.0f;
      bad += std::memcmp(&out[at], &want, 4) != 0;
      if (c < cols) bad += std::memcmp(&inplace[at], &want, 4) != 0;
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("round_grad_bf16: the identity forward (a view), the gradient rounded to bf16",
          "[autograd]") {
  // logits = round_grad_bf16(x · Wᵀ) with a frozen f32 W (where bf16 training puts it: on a
  // projection's output), loss = cross_entropy(logits): the logits equal x · Wᵀ (the product
  // passes unchanged), and dx = round_bf16(dlogits) · W with dlogits the graph's own
  // cross_entropy_grad output (softmax - one-hot: bits below bf16).
  std::mt19937 rng(12);
  const int64_t m = 6, k = 19, n = 11;
  const Vec xd = random_vec(m * k, rng), wd = random_vec(n * k, rng);
  graph::Graph g;
  const graph::ValueId xv =
      g.add_input("x", DType::kF32, {graph::Dim::fixed(m), graph::Dim::fixed(k)});
  const graph::ValueId tv = g.add_input("targets", DType::kI32, {graph::Dim::fixed(m)});
  const graph::ValueId p = g.add("linear", "lin", {xv, g.add_constant("w", f32_tensor({n, k}, wd))});
  const graph::ValueId y = g.add("round_grad_bf16", "r", {p});
  const graph::ValueId loss = g.add_node("cross_entropy", "loss", {y, tv}, {}, 2)[0];
  g.mark_output(y);
  g.mark_output(loss);
  const std::vector<graph::ValueId> grads = train::build_backward(g, loss, {xv});
  int rounds = 0;
  graph::ValueId dlogits = graph::kNoValue;
  for (const graph::Node& nd : g.nodes()) {
    rounds += nd.op == "round_bf16";
    if (nd.op == "cross_entropy_grad") dlogits = nd.outputs[0];
  }
  CHECK(rounds == 1);  // the rule's rounding of the gradient, nothing in the forward
  REQUIRE(dlogits != graph::kNoValue);
  g.mark_output(dlogits);
  g.validate();

  ThreadPool pool(2);
  graph::Executor ex(g, pool);
  const cpu::ScopedGemmPrecision exact(cpu::GemmPrecision::kF32);
  const std::vector<Tensor> out = ex.run(
      {{"x", f32_tensor({m, k}, xd)}, {"targets", Tensor::from_i32({m}, {0, 3, 5, 10, 2, 7})}});
  REQUIRE(out.size() == 4);  // y, loss, dx, dlogits
  const Tensor yt = out[0].contiguous(), dxt = out[2].contiguous(), dyt = out[3].contiguous();
  const std::vector<float> x32(xd.begin(), xd.end()), w32(wd.begin(), wd.end());
  cpu::SerialRunner serial;
  std::vector<float> dy16(static_cast<size_t>(m * n));
  cpu::round_bf16(m, n, dyt.data<float>(), n, dy16.data(), n, serial);
  double ey = 0, ny = 0, edx = 0, ndx = 0, moved = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t o = 0; o < n; ++o) {
      double t = 0;
      for (int64_t c = 0; c < k; ++c) t += static_cast<double>(x32[i * k + c]) * w32[o * k + c];
      ey += std::pow(yt.data<float>()[i * n + o] - t, 2);
      ny += t * t;
      moved += dy16[i * n + o] != dyt.data<float>()[i * n + o];
    }
    for (int64_t c = 0; c < k; ++c) {
      double t = 0;
      for (int64_t o = 0; o < n; ++o) t += static_cast<double>(dy16[i * n + o]) * w32[o * k + c];
      edx += std::pow(dxt.data<float>()[i * k + c] - t, 2);
      ndx += t * t;
    }
  }
  CHECK(moved > 0);  // the rounding matters for this dy
  // f32 GEMM sums of 11-19 terms: ~1e-7; an unrounded dy would be off by ~2^-9 relative.
  CHECK(std::sqrt(ey / ny) <= 1e-6);
  CHECK(std::sqrt(edx / ndx) <= 1e-6);
  (void)grads;
}
