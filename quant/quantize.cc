#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "kernels/common/half.h"
#include "quant/fp8.h"

namespace sampan::quant {
namespace {

using models::QuantScheme;
using models::WeightFormat;

constexpr float kFp8Max = 448.0f;
constexpr int kInt4Min = -8;
constexpr int kInt4Max = 7;

// Bit-exact with f32_to_fp8_e4m3 (quant/fp8.h) for finite input, without its frexp/ldexp, so
// quantizing a billion weights on load takes seconds rather than tens of seconds.
inline uint8_t fp8_encode(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const float a = std::fabs(f);
  if (a >= kFp8Max) return sign | 0x7e;
  if (a < 0x1p-6f) {
    // Subnormals (and the smallest normal, code 8) are multiples of 2^-9: the code is the count.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 0x1p9f));
  }
  uint32_t b = u & 0x7fffffffu;
  b += 0x7ffffu + ((b >> 20) & 1u);  // round the mantissa to 3 bits, ties to even
  const uint32_t exp = (b >> 23) - 127 + 7;
  const uint32_t code = (exp << 3) | ((b >> 20) & 7u);
  return sign | static_cast<uint8_t>(std::min<uint32_t>(code, 0x7e));
}

// Row r of w as f32 into dst.
void load_row(const Tensor& w, int64_t r, float* dst /* [k] */) {
  const int64_t k = w.dim(1);
  switch (w.dtype()) {
    case DType::kF32:
      std::memcpy(dst, w.data<float>() + r * k, static_cast<size_t>(k) * 4);
      return;
    case DType::kF16: {
      const uint16_t* src = w.data<uint16_t>() + r * k;
      for (int64_t c = 0; c < k; ++c) dst[c] = f16_to_f32(src[c]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* src = w.data<uint16_t>() + r * k;
      for (int64_t c = 0; c < k; ++c) dst[c] = bf16_to_f32(src[c]);
      return;
    }
    default:
      break;
  }
}

// The scale as scale_dtype will store it. A group too small for the format's smallest positive
// value gets that value, so the scale is never 0 and every q stays finite.
float round_scale(float s, DType scale_dtype) {
  if (scale_dtype == DType::kF16) {
    float r = f16_to_f32(f32_to_f16(s));
    return r > 0 ? r : 0x1p-24f;
  }
  float r = bf16_to_f32(f32_to_bf16(s));
  return r > 0 ? r : 0x1p-133f;
}

uint16_t scale_bits(float s, DType scale_dtype) {
  return scale_dtype == DType::kF16 ? f32_to_f16(s) : f32_to_bf16(s);
}

// Runs fn(r0, r1) over row ranges on a few threads: quantizing on load is a one-off pass over
// every weight, worth spreading when the matrix is big.
template <typename Fn>
void for_rows(int64_t n, int64_t k, Fn fn) {
  const int64_t kMinWork = int64_t{1} << 20;
  int64_t threads = std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()), 16);
  threads = std::max<int64_t>(1, std::min(threads, n * k / kMinWork));
  if (threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        fn(n * t / threads, n * (t + 1) / threads);
      } catch (...) {
        errors[static_cast<size_t>(t)] = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Range shrink factors the INT4 scale search tries (1 first: plain RTN). Clipping the group's
// extremes by up to 25 % trades their error for finer steps on every other weight; for
// Gaussian-like groups of 32..128 the optimum is typically 0.8..0.95 of the absmax.
constexpr float kClip[] = {1.0f, 0.975f, 0.95f, 0.925f, 0.9f, 0.875f, 0.85f, 0.825f, 0.8f, 0.775f, 0.75f};
constexpr int kNumClip = sizeof(kClip) / sizeof(kClip[0]);

// The scale (rounded to its stored type) and zero point of an INT4 group whose range
// [lo, hi] (lo <= 0 <= hi) is shrunk by `clip`. Symmetric: absmax * clip / 7. Asymmetric:
// (hi - lo) * clip / 15 with the zero point that puts lo * clip on -8.
std::pair<float, int> int4_candidate(float lo, float hi, float clip, bool symmetric, DType sd) {
  if (symmetric) return {round_scale(std::max(-lo, hi) * clip / kInt4Max, sd), 0};
  const float scale = round_scale((hi - lo) * clip / (kInt4Max - kInt4Min), sd);
  return {scale, static_cast<int>(std::clamp(std::nearbyint(kInt4Min - lo * clip / scale), -128.0f, 127.0f))};
}

// Squared error of a group quantized with (scale, zero): q = clamp(round(w / scale) + zero).
double int4_group_error(const float* w /* [g] */, int64_t g, float scale, int zero) {
  double e = 0;
  for (int64_t c = 0; c < g; ++c) {
    const float q = std::clamp(std::nearbyint(w[c] / scale) + static_cast<float>(zero),
                               static_cast<float>(kInt4Min), static_cast<float>(kInt4Max));
    const double d = static_cast<double>(w[c]) - static_cast<double>((q - static_cast<float>(zero)) * scale);
    e += d * d;
  }
  return e;
}

[[noreturn]] void non_finite(const std::string& name, int64_t r, int64_t c, float v) {
  fail(ErrorCode::kInvalidModel, "tensor '{}': element [{}, {}] is {}; cannot quantize it", name,
       r, c, v);
}

QuantizedMatrix quantize_fp8(const Tensor& w, const std::string& name) {
  const int64_t n = w.dim(0), k = w.dim(1);
  QuantizedMatrix q;
  q.data = Tensor::empty({n, k}, DType::kF8E4M3);
  q.scales = Tensor::empty({n}, DType::kF32);
  uint8_t* data = q.data.data<uint8_t>();
  float* scales = q.scales.data<float>();
  for_rows(n, k, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = r0; r < r1; ++r) {
      load_row(w, r, row.data());
      float amax = 0;
      for (int64_t c = 0; c < k; ++c) {
        const float v = row[static_cast<size_t>(c)];
        if (!std::isfinite(v)) non_finite(name, r, c, v);
        amax = std::max(amax, std::fabs(v));
      }
      const float scale = amax > 0 ? amax / kFp8Max : 1.0f;
      scales[r] = scale;
      for (int64_t c = 0; c < k; ++c) data[r * k + c] = fp8_encode(row[static_cast<size_t>(c)] / scale);
    }
  });
  return q;
}

QuantizedMatrix quantize_int4(const Tensor& w, const QuantScheme& s, const std::string& name) {
  const int64_t n = w.dim(0), k = w.dim(1), g = s.group_size;
  SAMPAN_CHECK(g == 32 || g == 64 || g == 128, ErrorCode::kInvalidArgument,
               "tensor '{}': int4 group size {} (expected 32, 64 or 128)", name, g);
  SAMPAN_CHECK(s.scale_dtype == DType::kF16 || s.scale_dtype == DType::kBF16,
               ErrorCode::kInvalidArgument, "tensor '{}': int4 scale type {} (expected f16 or bf16)",
               name, dtype_name(s.scale_dtype));
  SAMPAN_CHECK(k % g == 0, ErrorCode::kInvalidArgument,
               "tensor '{}': {} columns are not a multiple of the int4 group size {}", name, k, g);
  const int64_t ng = k / g;
  QuantizedMatrix q;
  q.data = Tensor::empty({n, k}, DType::kI4);
  q.scales = Tensor::empty({n, ng}, s.scale_dtype);
  if (!s.symmetric) q.zeros = Tensor::empty({n, ng}, DType::kI8);
  uint8_t* data = q.data.data<uint8_t>();
  uint16_t* scales = q.scales.data<uint16_t>();
  int8_t* zeros = s.symmetric ? nullptr : q.zeros.data<int8_t>();
  for_rows(n, k, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(k));
    std::vector<int> qs(static_cast<size_t>(g));
    for (int64_t r = r0; r < r1; ++r) {
      load_row(w, r, row.data());
      for (int64_t j = 0; j < ng; ++j) {
        const float* x = row.data() + j * g;
        float lo = 0, hi = 0;
        for (int64_t c = 0; c < g; ++c) {
          if (!std::isfinite(x[c])) non_finite(name, r, j * g + c, x[c]);
          lo = std::min(lo, x[c]);
          hi = std::max(hi, x[c]);
        }
        float scale = 1.0f;
        int zero = 0;
        if (s.symmetric ? std::max(-lo, hi) > 0 : hi > lo) {
          // Candidate c shrinks the range by kClip[c]; candidate 0 is the full range (plain
          // round-to-nearest). With scale_search the one of least squared error wins (the first
          // on ties), so the result is never worse than plain RTN on its group.
          const int n_cand = s.scale_search == models::ScaleSearch::kOn ? kNumClip : 1;
          double best = -1;
          for (int ci = 0; ci < n_cand; ++ci) {
            const auto [sc, z] = int4_candidate(lo, hi, kClip[ci], s.symmetric, s.scale_dtype);
            const double e = int4_group_error(x, g, sc, z);
            if (best < 0 || e < best) {
              best = e;
              scale = sc;
              zero = z;
            }
          }
        }
        const size_t si = static_cast<size_t>(r * ng + j);
        scales[si] = scale_bits(scale, s.scale_dtype);
        if (zeros) zeros[si] = static_cast<int8_t>(zero);
        for (int64_t c = 0; c < g; ++c) {
          const float v = std::nearbyint(x[c] / scale) + static_cast<float>(zero);
          qs[static_cast<size_t>(c)] =
              static_cast<int>(std::clamp(v, static_cast<float>(kInt4Min), static_cast<float>(kInt4Max)));
        }
        uint8_t* out = data + (r * k + j * g) / 2;
        for (int64_t c = 0; c < g; c += 2) {
          out[c / 2] = static_cast<uint8_t>((qs[static_cast<size_t>(c)] & 0xf) |
                                            ((qs[static_cast<size_t>(c + 1)] & 0xf) << 4));
        }
      }
    }
  });
  return q;
}

void expect(bool cond, const std::string& name, const std::string& what, const Tensor& t,
            const std::string& wanted) {
  SAMPAN_CHECK(cond, ErrorCode::kInvalidModel, "tensor '{}': {} is {}, expected {}", name, what,
               t.defined() && t.numel() > 0 ? t.str() : std::string("missing"), wanted);
}

bool present(const Tensor& t) { return t.defined() && t.numel() > 0; }

}  // namespace

QuantizedMatrix quantize_matrix(const Tensor& w, const QuantScheme& scheme,
                                const std::string& name) {
  SAMPAN_CHECK(w.rank() == 2 && w.device().type == DeviceType::kCPU && w.is_contiguous() &&
                   (w.dtype() == DType::kF32 || w.dtype() == DType::kF16 ||
                    w.dtype() == DType::kBF16),
               ErrorCode::kInvalidArgument,
               "tensor '{}': cannot quantize {} (expected a contiguous 2-D f32, f16 or bf16 CPU "
               "tensor)",
               name, w.str());
  switch (scheme.format) {
    case WeightFormat::kFp8: return quantize_fp8(w, name);
    case WeightFormat::kInt4: return quantize_int4(w, scheme, name);
    case WeightFormat::kNone: break;
  }
  fail(ErrorCode::kInvalidArgument, "tensor '{}': quantize_matrix needs format fp8 or int4", name);
}

Tensor dequantize_matrix(const QuantizedMatrix& q, const QuantScheme& scheme,
                         const std::string& name) {
  const Tensor& d = q.data;
  if (scheme.format == WeightFormat::kFp8) {
    expect(present(d) && d.rank() == 2 && d.dtype() == DType::kF8E4M3 && d.is_contiguous(), name,
           "data", d, "a contiguous f8_e4m3 [n, k] matrix");
    const int64_t n = d.dim(0), k = d.dim(1);
    expect(present(q.scales) && q.scales.dtype() == DType::kF32 && q.scales.shape() == Shape{n} &&
               q.scales.is_contiguous(),
           name, "the scale", q.scales, fmt::format("f32[{}]", n));
    Tensor out = Tensor::empty({n, k}, DType::kF32);
    const uint8_t* src = d.data<uint8_t>();
    const float* s = q.scales.data<float>();
    float* y = out.data<float>();
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) y[r * k + c] = fp8_e4m3_to_f32(src[r * k + c]) * s[r];
    }
    return out;
  }
  SAMPAN_CHECK(scheme.format == WeightFormat::kInt4, ErrorCode::kInvalidArgument,
               "tensor '{}': dequantize_matrix needs format fp8 or int4", name);
  expect(present(d) && d.rank() == 2 && d.dtype() == DType::kI4 && d.is_contiguous(), name, "data",
         d, "a contiguous i4 [n, k] matrix");
  const int64_t n = d.dim(0), k = d.dim(1), g = scheme.group_size;
  SAMPAN_CHECK(g > 0 && k % g == 0, ErrorCode::kInvalidModel,
               "tensor '{}': {} columns are not a multiple of the int4 group size {}", name, k, g);
  const int64_t ng = k / g;
  const std::string scale_shape = fmt::format("{}[{}, {}]", dtype_name(scheme.scale_dtype), n, ng);
  expect(present(q.scales) && q.scales.dtype() == scheme.scale_dtype &&
             q.scales.shape() == Shape{n, ng} && q.scales.is_contiguous(),
         name, "the scale", q.scales, scale_shape);
  const bool has_zero = present(q.zeros);
  if (!scheme.symmetric || has_zero) {
    expect(has_zero && q.zeros.dtype() == DType::kI8 && q.zeros.shape() == Shape{n, ng} &&
               q.zeros.is_contiguous(),
           name, "the zero point", q.zeros, fmt::format("i8[{}, {}]", n, ng));
  }
  Tensor out = Tensor::empty({n, k}, DType::kF32);
  const uint8_t* src = d.data<uint8_t>();
  const uint16_t* s = q.scales.data<uint16_t>();
  const int8_t* z = has_zero ? q.zeros.data<int8_t>() : nullptr;
  float* y = out.data<float>();
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const uint8_t byte = src[(r * k + c) / 2];
      const int nib = (c % 2 == 0) ? (byte & 0xf) : (byte >> 4);
      const int qv = nib >= 8 ? nib - 16 : nib;
      const int64_t si = r * ng + c / g;
      const float scale =
          scheme.scale_dtype == DType::kF16 ? f16_to_f32(s[si]) : bf16_to_f32(s[si]);
      y[r * k + c] = static_cast<float>(qv - (z ? z[si] : 0)) * scale;
    }
  }
  return out;
}

}  // namespace sampan::quant
