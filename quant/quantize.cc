#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kernels/common/half.h"
#include "kernels/cpu/convert_cpu.h"
#include "kernels/cpu/fp8_quant_cpu.h"
#include "kernels/cpu/int4_quant_cpu.h"
#include "quant/fp8.h"

namespace sampan::quant {
namespace {

template <typename... Args>
[[noreturn]] void fail(QuantError::Kind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw QuantError(kind, fmt::format(f, std::forward<Args>(args)...));
}
constexpr QuantError::Kind kBadArgument = QuantError::Kind::kInvalidArgument;
constexpr QuantError::Kind kBadData = QuantError::Kind::kInvalidData;

const char* float_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    default: return "a non-float type";
  }
}

constexpr float kFp8Max = 448.0f;
constexpr int kInt4Min = -8;
constexpr int kInt4Max = 7;

// Row r of w as f32 into dst (exact; f16 and bf16 widened by cpu::convert_to_f32).
void load_row(const MatrixView& w, int64_t r, float* dst /* [k] */) {
  const int64_t k = w.k;
  switch (w.dtype) {
    case DType::kF32:
      std::memcpy(dst, static_cast<const float*>(w.data) + r * k, static_cast<size_t>(k) * 4);
      return;
    case DType::kF16:
    case DType::kBF16:
      cpu::convert_to_f32(w.dtype, static_cast<const uint16_t*>(w.data) + r * k, dst, k);
      return;
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

// Runs fn(r0, r1) over row ranges on the runner's workers: quantizing on load is a one-off pass
// over every weight, worth spreading when the matrix is big. The runner's tasks must not throw,
// so each task keeps its exception and the first one is rethrown here.
template <typename Fn>
void for_rows(int64_t n, int64_t k, cpu::TaskRunner& runner, Fn fn) {
  const int64_t kMinWork = int64_t{1} << 20;
  int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(4 * runner.concurrency(), n * k / kMinWork));
  tasks = std::min(tasks, std::max<int64_t>(n, 1));
  if (tasks <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(tasks));
  runner.run(tasks, [&](int64_t t) {
    try {
      fn(n * t / tasks, n * (t + 1) / tasks);
    } catch (...) {
      errors[static_cast<size_t>(t)] = std::current_exception();
    }
  });
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

// The first non-finite element of x [n] (elements c0 .. c0 + n - 1 of row r), which the caller's
// vector check found, as the tensor's one-line error.
[[noreturn]] void non_finite(const std::string& name, int64_t r, const float* x, int64_t c0,
                             int64_t n) {
  int64_t c = 0;
  while (c + 1 < n && std::isfinite(x[c])) ++c;
  fail(kBadData, "tensor '{}': element [{}, {}] is {}; cannot quantize it", name, r, c0 + c,
       x[c]);
}

void quantize_fp8(const MatrixView& w, const QuantizedBuffers& out, const std::string& name,
                  cpu::TaskRunner& runner) {
  const int64_t n = w.n, k = w.k;
  uint8_t* data = static_cast<uint8_t*>(out.data);
  float* scales = static_cast<float*>(out.scales);
  for_rows(n, k, runner, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = r0; r < r1; ++r) {
      load_row(w, r, row.data());
      float amax = 0;
      if (!cpu::fp8_row_absmax(row.data(), k, &amax)) non_finite(name, r, row.data(), 0, k);
      const float scale = amax > 0 ? amax / kFp8Max : 1.0f;
      scales[r] = scale;
      cpu::fp8_encode_row(row.data(), k, scale, data + r * k);
    }
  });
}

void quantize_int4(const MatrixView& w, const QuantScheme& s, const QuantizedBuffers& out,
                   const std::string& name, cpu::TaskRunner& runner) {
  const int64_t n = w.n, k = w.k, g = s.group_size;
  const int64_t ng = k / g;
  uint8_t* data = static_cast<uint8_t*>(out.data);
  uint16_t* scales = static_cast<uint16_t*>(out.scales);
  int8_t* zeros = s.symmetric ? nullptr : out.zeros;
  for_rows(n, k, runner, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(k));
    std::vector<int8_t> qs(static_cast<size_t>(g));
    for (int64_t r = r0; r < r1; ++r) {
      load_row(w, r, row.data());
      for (int64_t j = 0; j < ng; ++j) {
        const float* x = row.data() + j * g;
        float lo = 0, hi = 0;
        if (!cpu::int4_group_range(x, g, &lo, &hi)) non_finite(name, r, x, j * g, g);
        float scale = 1.0f;
        int zero = 0;
        if (s.symmetric ? std::max(-lo, hi) > 0 : hi > lo) {
          // Candidate c shrinks the range by kClip[c]; candidate 0 is the full range (plain
          // round-to-nearest). With scale_search the one of least squared error wins (the first
          // on ties), so the result is never worse than plain RTN on its group.
          std::tie(scale, zero) = int4_candidate(lo, hi, kClip[0], s.symmetric, s.scale_dtype);
          if (s.scale_search == ScaleSearch::kOn) {
            float sc[kNumClip];
            int z[kNumClip];
            double e[kNumClip];
            for (int ci = 0; ci < kNumClip; ++ci) {
              std::tie(sc[ci], z[ci]) = int4_candidate(lo, hi, kClip[ci], s.symmetric, s.scale_dtype);
            }
            cpu::int4_group_errors(x, g, sc, z, kNumClip, e);
            double best = e[0];
            for (int ci = 1; ci < kNumClip; ++ci) {
              if (e[ci] < best) {
                best = e[ci];
                scale = sc[ci];
                zero = z[ci];
              }
            }
          }
        }
        const size_t si = static_cast<size_t>(r * ng + j);
        scales[si] = scale_bits(scale, s.scale_dtype);
        if (zeros) zeros[si] = static_cast<int8_t>(zero);
        cpu::int4_group_codes(x, g, scale, zero, qs.data());
        uint8_t* out = data + (r * k + j * g) / 2;
        for (int64_t c = 0; c < g; c += 2) {
          out[c / 2] = static_cast<uint8_t>((qs[static_cast<size_t>(c)] & 0xf) |
                                            ((qs[static_cast<size_t>(c + 1)] & 0xf) << 4));
        }
      }
    }
  });
}

}  // namespace

void check_scheme(const QuantScheme& scheme, int64_t k, const std::string& name) {
  if (scheme.format == WeightFormat::kFp8) return;
  if (scheme.format != WeightFormat::kInt4) {
    fail(kBadArgument, "tensor '{}': quantize_matrix needs format fp8 or int4", name);
  }
  const int64_t g = scheme.group_size;
  if (!int4_group_size_ok(g)) {
    fail(kBadArgument, "tensor '{}': int4 group size {} (expected {})", name, g,
         kInt4GroupSizesText);
  }
  if (scheme.scale_dtype != DType::kF16 && scheme.scale_dtype != DType::kBF16) {
    fail(kBadArgument, "tensor '{}': int4 scale type {} (expected f16 or bf16)", name,
         float_name(scheme.scale_dtype));
  }
  if (k % g != 0) {
    fail(kBadArgument, "tensor '{}': {} columns are not a multiple of the int4 group size {}",
         name, k, g);
  }
}

void quantize_matrix(const MatrixView& w, const QuantScheme& scheme, const QuantizedBuffers& out,
                     const std::string& name, cpu::TaskRunner& runner) {
  check_scheme(scheme, w.k, name);
  if (scheme.format == WeightFormat::kFp8) {
    quantize_fp8(w, out, name, runner);
  } else {
    quantize_int4(w, scheme, out, name, runner);
  }
}

void dequantize_matrix(const QuantizedConstBuffers& q, int64_t n, int64_t k,
                       const QuantScheme& scheme, float* out) {
  const uint8_t* src = static_cast<const uint8_t*>(q.data);
  if (scheme.format == WeightFormat::kFp8) {
    const float* s = static_cast<const float*>(q.scales);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) out[r * k + c] = fp8_e4m3_to_f32(src[r * k + c]) * s[r];
    }
    return;
  }
  const int64_t g = scheme.group_size, ng = k / g;
  const uint16_t* s = static_cast<const uint16_t*>(q.scales);
  const int8_t* z = q.zeros;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const uint8_t byte = src[(r * k + c) / 2];
      const int nib = (c % 2 == 0) ? (byte & 0xf) : (byte >> 4);
      const int qv = nib >= 8 ? nib - 16 : nib;
      const int64_t si = r * ng + c / g;
      const float scale =
          scheme.scale_dtype == DType::kF16 ? f16_to_f32(s[si]) : bf16_to_f32(s[si]);
      out[r * k + c] = static_cast<float>(qv - (z ? z[si] : 0)) * scale;
    }
  }
}

}  // namespace sampan::quant
