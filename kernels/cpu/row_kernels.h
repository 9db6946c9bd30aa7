// Row kernels for rms_norm, add_rms_norm and silu_mul, written once over a SIMD traits type
// (Avx2 from vec_avx2.h or Avx512 from vec_avx512.h) and instantiated in one translation unit
// per instruction set. The dispatching files (rms_norm_cpu.cc, silu_mul_cpu.cc) split the rows
// over the TaskRunner and call the *_avx2 or *_avx512 entry point declared below.
#pragma once

#include <cmath>
#include <cstdint>

namespace sampan::cpu::detail {

// Each entry point processes a block of `rows` rows; the pointers already point at its first row.
// x: [rows, dim] stride ldx; w: [dim]; y: [rows, dim] stride ldy (may equal x).
void rms_norm_rows_avx2(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* w,
                        float eps, float* y, int64_t ldy);
void rms_norm_rows_avx512(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* w,
                          float eps, float* y, int64_t ldy);
// x, r, sum, y: [rows, dim] with their strides; sum may alias x or r, y does not alias sum.
void add_rms_norm_rows_avx2(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* r,
                            int64_t ldr, const float* w, float eps, float* sum, int64_t lds,
                            float* y, int64_t ldy);
void add_rms_norm_rows_avx512(int64_t rows, int64_t dim, const float* x, int64_t ldx,
                              const float* r, int64_t ldr, const float* w, float eps, float* sum,
                              int64_t lds, float* y, int64_t ldy);
// g, u, y: [rows, n] with their strides; y may alias g or u.
void silu_mul_rows_avx2(int64_t rows, int64_t n, const float* g, int64_t ldg, const float* u,
                        int64_t ldu, float* y, int64_t ldy);
void silu_mul_rows_avx512(int64_t rows, int64_t n, const float* g, int64_t ldg, const float* u,
                          int64_t ldu, float* y, int64_t ldy);
// The backward of silu_mul (silu_mul_grad_cpu.h) in f32: g, u, dy, dg, du: [rows, n] with their
// strides; dg and du may alias g, u or dy element for element (each element is read before
// either output of it is written).
void silu_mul_grad_rows_avx2(int64_t rows, int64_t n, const float* g, int64_t ldg, const float* u,
                             int64_t ldu, const float* dy, int64_t lddy, float* dg, int64_t lddg,
                             float* du, int64_t lddu);
void silu_mul_grad_rows_avx512(int64_t rows, int64_t n, const float* g, int64_t ldg,
                               const float* u, int64_t ldu, const float* dy, int64_t lddy,
                               float* dg, int64_t lddg, float* du, int64_t lddu);

}  // namespace sampan::cpu::detail

namespace sampan::cpu {
namespace {

// Squares are summed in f32 vector lanes within blocks of this many elements (each lane then
// adds at most 1024 / 32 terms, far below where f32 accumulation drifts) and the block sums in
// double, so rows of any length (hidden sizes up to 16k and beyond) keep full f32 accuracy.
constexpr int64_t kSquareSumBlock = 1024;

template <class S>
float sum_squares_block(const float* x, int64_t n) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  V a0 = S::zero(), a1 = S::zero(), a2 = S::zero(), a3 = S::zero();
  int64_t i = 0;
  for (; i + 4 * kW <= n; i += 4 * kW) {
    const V x0 = S::load(x + i), x1 = S::load(x + i + kW);
    const V x2 = S::load(x + i + 2 * kW), x3 = S::load(x + i + 3 * kW);
    a0 = S::fma(x0, x0, a0);
    a1 = S::fma(x1, x1, a1);
    a2 = S::fma(x2, x2, a2);
    a3 = S::fma(x3, x3, a3);
  }
  for (; i + kW <= n; i += kW) {
    const V v = S::load(x + i);
    a0 = S::fma(v, v, a0);
  }
  if (i < n) {
    const V v = S::load_n(x + i, static_cast<int>(n - i));
    a1 = S::fma(v, v, a1);
  }
  return S::reduce_add(S::add(S::add(a0, a1), S::add(a2, a3)));
}

// 1 / sqrt(mean + eps) in f32, the order of operations of HF's Llama/Qwen2 RMSNorm.
inline float rms_scale(double sum_squares, int64_t dim, float eps) {
  const float mean = static_cast<float>(sum_squares / static_cast<double>(dim));
  return 1.0f / std::sqrt(mean + eps);
}

// y = (x * scale) * w, the product order HF uses.
template <class S>
void scale_mul_row(int64_t dim, const float* x, float scale, const float* w, float* y) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  const V s = S::set1(scale);
  int64_t i = 0;
  for (; i + kW <= dim; i += kW) S::store(y + i, S::mul(S::mul(S::load(x + i), s), S::load(w + i)));
  if (i < dim) {
    const int n = static_cast<int>(dim - i);
    S::store_n(y + i, S::mul(S::mul(S::load_n(x + i, n), s), S::load_n(w + i, n)), n);
  }
}

template <class S>
void rms_norm_rows(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* w,
                   float eps, float* y, int64_t ldy) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    double ss = 0.0;
    for (int64_t b = 0; b < dim; b += kSquareSumBlock) {
      ss += sum_squares_block<S>(xr + b, dim - b < kSquareSumBlock ? dim - b : kSquareSumBlock);
    }
    scale_mul_row<S>(dim, xr, rms_scale(ss, dim, eps), w, y + r * ldy);
  }
}

template <class S>
void add_rms_norm_rows(int64_t rows, int64_t dim, const float* x, int64_t ldx, const float* res,
                       int64_t ldr, const float* w, float eps, float* sum, int64_t lds, float* y,
                       int64_t ldy) {
  constexpr int kW = S::kWidth;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    const float* rr = res + r * ldr;
    float* sr = sum + r * lds;
    // The sum is stored first and its squares read back from the block just written (still in
    // L1): sum may alias x or res, and each element is read before it is overwritten.
    double ss = 0.0;
    for (int64_t b = 0; b < dim; b += kSquareSumBlock) {
      const int64_t e = dim - b < kSquareSumBlock ? dim : b + kSquareSumBlock;
      int64_t i = b;
      for (; i + kW <= e; i += kW) S::store(sr + i, S::add(S::load(xr + i), S::load(rr + i)));
      if (i < e) {
        const int n = static_cast<int>(e - i);
        S::store_n(sr + i, S::add(S::load_n(xr + i, n), S::load_n(rr + i, n)), n);
      }
      ss += sum_squares_block<S>(sr + b, e - b);
    }
    scale_mul_row<S>(dim, sr, rms_scale(ss, dim, eps), w, y + r * ldy);
  }
}

// silu(g) * u with silu(g) = g / (1 + e^-g), HF's formula (exact division, not a reciprocal
// estimate). For g below about -88, e^-g is inf and the product is -0, as in PyTorch.
template <class S>
void silu_mul_rows(int64_t rows, int64_t n, const float* g, int64_t ldg, const float* u,
                   int64_t ldu, float* y, int64_t ldy) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  const V one = S::set1(1.0f);
  const V zero = S::zero();
  // e^-g is taken no lower than e^-86.6 (a normal float): for g above 86.6, 1 + e^-g is 1
  // either way, and the vector exp's gradual underflow below it makes denormals, a microcode
  // assist per lane (silu_mul over rows with a third of the gates near 100 ran 11.6x slower).
  const V floor = S::set1(-86.6f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* gr = g + r * ldg;
    const float* ur = u + r * ldu;
    float* yr = y + r * ldy;
    int64_t i = 0;
    for (; i + kW <= n; i += kW) {
      const V gv = S::load(gr + i);
      const V s = S::div(gv, S::add(one, S::exp(S::max(floor, S::sub(zero, gv)))));
      S::store(yr + i, S::mul(s, S::load(ur + i)));
    }
    if (i < n) {
      const int m = static_cast<int>(n - i);
      const V gv = S::load_n(gr + i, m);
      const V s = S::div(gv, S::add(one, S::exp(S::max(floor, S::sub(zero, gv)))));
      S::store_n(yr + i, S::mul(s, S::load_n(ur + i, m)), m);
    }
  }
}

// dg = dy u s (1 + g (1 - s)), du = dy g s with s = 1 / (1 + e^-g) (exact division), in f32
// with the vector exp: the double loop of silu_mul_grad_cpu.cc up to f32 rounding and the exp's
// error. For g below about -88 e^-g is inf, s = 0 and both come out 0 (times a finite g).
template <class S>
void silu_mul_grad_rows(int64_t rows, int64_t n, const float* g, int64_t ldg, const float* u,
                        int64_t ldu, const float* dy, int64_t lddy, float* dg, int64_t lddg,
                        float* du, int64_t lddu) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  const V one = S::set1(1.0f);
  const V zero = S::zero();
  // e^-g is taken no lower than e^-86.6 (a normal float): for g above 86.6, 1 + e^-g is 1
  // either way, and the vector exp's gradual underflow below it makes denormals, a microcode
  // assist per lane (silu_mul over rows with a third of the gates near 100 ran 11.6x slower).
  const V floor = S::set1(-86.6f);
  auto step = [&](V gv, V uv, V dv, V& dgv, V& duv) {
    const V s = S::div(one, S::add(one, S::exp(S::max(floor, S::sub(zero, gv)))));
    const V ds = S::mul(dv, s);
    duv = S::mul(ds, gv);
    dgv = S::mul(S::mul(ds, uv), S::fma(gv, S::sub(one, s), one));
  };
  for (int64_t r = 0; r < rows; ++r) {
    const float* gr = g + r * ldg;
    const float* ur = u + r * ldu;
    const float* dr = dy + r * lddy;
    float* dgr = dg + r * lddg;
    float* dur = du + r * lddu;
    int64_t i = 0;
    for (; i + kW <= n; i += kW) {
      V a, b;
      step(S::load(gr + i), S::load(ur + i), S::load(dr + i), a, b);
      S::store(dgr + i, a);
      S::store(dur + i, b);
    }
    if (i < n) {
      const int m = static_cast<int>(n - i);
      V a, b;
      step(S::load_n(gr + i, m), S::load_n(ur + i, m), S::load_n(dr + i, m), a, b);
      S::store_n(dgr + i, a, m);
      S::store_n(dur + i, b, m);
    }
  }
}

}  // namespace
}  // namespace sampan::cpu
