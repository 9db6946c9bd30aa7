// Broadcasting element-wise kernels (see binary_cpu.h). The strides are collapsed first (size-1
// dimensions dropped, dimensions merged wherever every operand stays linear across them), so
// same-shape inputs become one long row, a scalar operand a row with stride 0, and a bias add
// [rows, n] + [n] rows of n with the bias at stride 1: each row then runs one of four
// specialised loops (both contiguous, one broadcast, or general strides) that the compiler
// vectorises under the kernel baseline flags (AVX2+FMA).
#include "kernels/cpu/binary_cpu.h"

#include <immintrin.h>

#include <cassert>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/activation_impl.h"
#include "kernels/cpu/bias_activation_avx512.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_avx2.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {
namespace {

// Operand strides after collapsing; dimension rank-1 is the row.
template <int N>
struct Loop {
  int rank = 0;
  int64_t shape[kMaxElementwiseRank] = {};
  int64_t strides[N][kMaxElementwiseRank] = {};
};

template <int N>
Loop<N> collapse(int rank, const int64_t* shape, const int64_t* const (&strides)[N]) {
  Loop<N> l;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 1) continue;
    if (l.rank > 0) {
      const int p = l.rank - 1;
      bool linear = true;
      for (int j = 0; j < N; ++j) linear = linear && l.strides[j][p] == strides[j][d] * shape[d];
      if (linear) {
        l.shape[p] *= shape[d];
        for (int j = 0; j < N; ++j) l.strides[j][p] = strides[j][d];
        continue;
      }
    }
    l.shape[l.rank] = shape[d];
    for (int j = 0; j < N; ++j) l.strides[j][l.rank] = strides[j][d];
    ++l.rank;
  }
  if (l.rank == 0) {  // a single element
    l.rank = 1;
    l.shape[0] = 1;
  }
  return l;
}

// Calls fn(offsets[N], out_offset, n, inner_strides[N]) for pieces of rows covering the output.
// Rows longer than kRowPiece are cut so one huge same-shape row still spreads over the workers.
template <int N, class Fn>
void for_each_row(const Loop<N>& l, TaskRunner& runner, const Fn& fn) {
  constexpr int64_t kRowPiece = 1 << 14;
  constexpr int64_t kTaskElems = 1 << 15;  // below this a task is not worth a hand-off
  const int outer = l.rank - 1;
  const int64_t n = l.shape[outer];
  int64_t rows = 1;
  for (int d = 0; d < outer; ++d) rows *= l.shape[d];
  if (rows == 0 || n == 0) return;
  const int64_t width = n < kRowPiece ? n : kRowPiece;
  const int64_t pieces = util::ceil_div(n, width);
  int64_t inner[N];
  for (int j = 0; j < N; ++j) inner[j] = l.strides[j][outer];
  util::parallel_for(runner, rows * pieces, util::ceil_div(kTaskElems, width),
                     [&](int64_t u0, int64_t u1) {
                       int64_t r = u0 / pieces;
                       int64_t idx[kMaxElementwiseRank] = {};
                       int64_t base[N] = {};
                       for (int64_t rem = r, d = outer - 1; d >= 0; --d) {
                         idx[d] = rem % l.shape[d];
                         rem /= l.shape[d];
                         for (int j = 0; j < N; ++j) base[j] += idx[d] * l.strides[j][d];
                       }
                       for (int64_t u = u0; u < u1; ++u) {
                         if (u / pieces != r) {  // next row: advance the odometer
                           ++r;
                           for (int d = outer - 1; d >= 0; --d) {
                             for (int j = 0; j < N; ++j) base[j] += l.strides[j][d];
                             if (++idx[d] < l.shape[d]) break;
                             for (int j = 0; j < N; ++j) base[j] -= l.shape[d] * l.strides[j][d];
                             idx[d] = 0;
                           }
                         }
                         const int64_t c0 = (u % pieces) * width;
                         const int64_t len = n - c0 < width ? n - c0 : width;
                         int64_t off[N];
                         for (int j = 0; j < N; ++j) off[j] = base[j] + c0 * inner[j];
                         fn(off, r * n + c0, len, inner);
                       }
                     });
}

template <class T, class R, class F>
inline void row_op(const T* a, int64_t sa, const T* b, int64_t sb, R* y, int64_t n, F f) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) y[i] = f(av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i * sa], b[i * sb]);
  }
}

template <class T, class R, class F>
void run_binary(const Loop<2>& l, const void* a, const void* b, void* y, TaskRunner& runner, F f) {
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  R* py = static_cast<R*>(y);
  for_each_row<2>(l, runner, [&](const int64_t* off, int64_t out, int64_t n, const int64_t* s) {
    row_op<T, R>(pa + off[0], s[0], pb + off[1], s[1], py + out, n, f);
  });
}

template <class T>
T int_pow(T base, T exp) {
  if (exp < 0) {  // 1 / base^-exp, truncated
    if (base == 1) return 1;
    if (base == -1) return (exp & 1) ? -1 : 1;
    return 0;
  }
  using U = std::make_unsigned_t<T>;
  U result = 1, b = static_cast<U>(base);
  for (U e = static_cast<U>(exp); e != 0; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return static_cast<T>(result);
}

template <class T>
void binary_numeric(BinaryKind kind, const Loop<2>& l, const void* a, const void* b, void* y,
                    TaskRunner& runner) {
  using B = uint8_t;
  switch (kind) {
    case BinaryKind::kEqual:
      return run_binary<T, B>(l, a, b, y, runner, [](T x, T z) -> B { return x == z; });
    case BinaryKind::kLess:
      return run_binary<T, B>(l, a, b, y, runner, [](T x, T z) -> B { return x < z; });
    case BinaryKind::kLessEqual:
      return run_binary<T, B>(l, a, b, y, runner, [](T x, T z) -> B { return x <= z; });
    case BinaryKind::kGreater:
      return run_binary<T, B>(l, a, b, y, runner, [](T x, T z) -> B { return x > z; });
    case BinaryKind::kGreaterEqual:
      return run_binary<T, B>(l, a, b, y, runner, [](T x, T z) -> B { return x >= z; });
    case BinaryKind::kMax:
      return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) { return z > x ? z : x; });
    case BinaryKind::kMin:
      return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) { return z < x ? z : x; });
    default: break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (kind) {
      case BinaryKind::kAdd:
        return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) { return x + z; });
      case BinaryKind::kSub:
        return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) { return x - z; });
      case BinaryKind::kMul:
        return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) { return x * z; });
      case BinaryKind::kDiv:
        return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) { return x / z; });
      case BinaryKind::kPow:
        return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) { return std::pow(x, z); });
      case BinaryKind::kMod:
        return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) {
          T r = std::fmod(x, z);
          return r != 0 && ((r < 0) != (z < 0)) ? r + z : r;
        });
      case BinaryKind::kFmod:
        return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) { return std::fmod(x, z); });
      default: break;
    }
  } else {
    using U = std::make_unsigned_t<T>;
    switch (kind) {
      case BinaryKind::kAdd:
        return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) {
          return static_cast<T>(static_cast<U>(x) + static_cast<U>(z));
        });
      case BinaryKind::kSub:
        return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) {
          return static_cast<T>(static_cast<U>(x) - static_cast<U>(z));
        });
      case BinaryKind::kMul:
        return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) {
          return static_cast<T>(static_cast<U>(x) * static_cast<U>(z));
        });
      // x / -1 is done as a negation: the hardware division traps on INT_MIN / -1.
      case BinaryKind::kDiv:
        return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) {
          return z == -1 ? static_cast<T>(U{0} - static_cast<U>(x)) : static_cast<T>(x / z);
        });
      case BinaryKind::kMod:
        return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) {
          if (z == -1) return T{0};
          const T r = static_cast<T>(x % z);
          return r != 0 && ((r < 0) != (z < 0)) ? static_cast<T>(r + z) : r;
        });
      // C's %: the remainder takes the dividend's sign (ONNX Mod with fmod = 1).
      case BinaryKind::kFmod:
        return run_binary<T, T>(l, a, b, y, runner, [](T x, T z) {
          return z == -1 ? T{0} : static_cast<T>(x % z);
        });
      case BinaryKind::kPow: return run_binary<T, T>(l, a, b, y, runner, int_pow<T>);
      default: break;
    }
  }
  assert(false && "binary: kind not valid for this dtype");
}

void binary_bool(BinaryKind kind, const Loop<2>& l, const void* a, const void* b, void* y,
                 TaskRunner& runner) {
  using B = uint8_t;
  switch (kind) {
    case BinaryKind::kAnd:
      return run_binary<B, B>(l, a, b, y, runner,
                              [](B x, B z) -> B { return (x != 0) & (z != 0); });
    case BinaryKind::kOr:
      return run_binary<B, B>(l, a, b, y, runner,
                              [](B x, B z) -> B { return (x != 0) | (z != 0); });
    case BinaryKind::kXor:
      return run_binary<B, B>(l, a, b, y, runner,
                              [](B x, B z) -> B { return (x != 0) ^ (z != 0); });
    case BinaryKind::kEqual:
      return run_binary<B, B>(l, a, b, y, runner,
                              [](B x, B z) -> B { return (x != 0) == (z != 0); });
    default: break;
  }
  assert(false && "binary: kind not valid for bool");
}

template <class T>
void where_typed(const Loop<3>& l, const uint8_t* c, const void* a, const void* b, void* y,
                 TaskRunner& runner) {
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  T* py = static_cast<T*>(y);
  for_each_row<3>(l, runner, [&](const int64_t* off, int64_t out, int64_t n, const int64_t* s) {
    const uint8_t* rc = c + off[0];
    const T* ra = pa + off[1];
    const T* rb = pb + off[2];
    T* ry = py + out;
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      for (int64_t i = 0; i < n; ++i) ry[i] = rc[i] ? ra[i] : rb[i];
    } else {
      for (int64_t i = 0; i < n; ++i) ry[i] = rc[i * s[0]] ? ra[i * s[1]] : rb[i * s[2]];
    }
  });
}

}  // namespace

void binary(BinaryKind kind, DType dtype, int rank, const int64_t* shape, const void* a,
            const int64_t* a_strides, const void* b, const int64_t* b_strides, void* y,
            TaskRunner& runner) {
  const int64_t* const strides[2] = {a_strides, b_strides};
  const Loop<2> l = collapse<2>(rank, shape, strides);
  switch (dtype) {
    case DType::kF32: return binary_numeric<float>(kind, l, a, b, y, runner);
    case DType::kI32: return binary_numeric<int32_t>(kind, l, a, b, y, runner);
    case DType::kI64: return binary_numeric<int64_t>(kind, l, a, b, y, runner);
    case DType::kBool: return binary_bool(kind, l, a, b, y, runner);
    default: break;
  }
  assert(false && "binary: unsupported dtype");
}

void where(int rank, const int64_t* shape, const uint8_t* cond, const int64_t* cond_strides,
           const void* a, const int64_t* a_strides, const void* b, const int64_t* b_strides,
           int elem_bytes, void* y, TaskRunner& runner) {
  const int64_t* const strides[3] = {cond_strides, a_strides, b_strides};
  const Loop<3> l = collapse<3>(rank, shape, strides);
  switch (elem_bytes) {
    case 1: return where_typed<uint8_t>(l, cond, a, b, y, runner);
    case 2: return where_typed<uint16_t>(l, cond, a, b, y, runner);
    case 4: return where_typed<uint32_t>(l, cond, a, b, y, runner);
    case 8: return where_typed<uint64_t>(l, cond, a, b, y, runner);
    default: break;
  }
  assert(false && "where: unsupported element size");
}

void bias_activation_rows(int64_t rows, int64_t n, float* y, int64_t ldy, float alpha,
                          const float* bias, Activation act) {
  if (has_avx512()) return detail::bias_activation_rows_avx512(rows, n, y, ldy, alpha, bias, act);
  const __m256 va = _mm256_set1_ps(alpha);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * ldy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(row + i), va);
      if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
      _mm256_storeu_ps(row + i, vec_math::activate<Avx2>(v, act));
    }
    if (i < n) {
      const int rest = static_cast<int>(n - i);
      __m256 v = _mm256_mul_ps(Avx2::load_n(row + i, rest), va);
      if (bias) v = _mm256_add_ps(v, Avx2::load_n(bias + i, rest));
      Avx2::store_n(row + i, vec_math::activate<Avx2>(v, act), rest);
    }
  }
}

void bias_activation(int64_t rows, int64_t n, float* y, int64_t ldy, float alpha, const float* bias,
                     Activation act, TaskRunner& runner) {
  if (rows <= 0 || n <= 0) return;
  const int64_t grain = util::ceil_div(8192, n);
  util::parallel_for(runner, rows, grain, [&](int64_t r0, int64_t r1) {
    bias_activation_rows(r1 - r0, n, y + r0 * ldy, ldy, alpha, bias, act);
  });
}

}  // namespace sampan::cpu
