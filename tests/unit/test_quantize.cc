// quant/quantize.h: FP8 E4M3 and INT4 weight formats against a plain reference written here.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "kernels/common/half.h"
#include "engine/models/weight_quant.h"

namespace {

using sampan::DType;
using sampan::Error;
using sampan::ErrorCode;
using sampan::Tensor;
using sampan::models::QuantScheme;
using sampan::models::WeightFormat;
using sampan::models::dequantize_matrix;
using sampan::models::quantize_matrix;
using sampan::models::QuantizedMatrix;

// OCP E4M3 decoded from the bit fields, written out independently of quant/fp8.cc.
double fp8_ref(uint8_t code) {
  const int sign = code >> 7, exp = (code >> 3) & 0xf, man = code & 7;
  if (exp == 0xf && man == 7) return std::nan("");
  const double mag = exp == 0 ? man / 8.0 * std::pow(2.0, -6) : (1 + man / 8.0) * std::pow(2.0, exp - 7);
  return sign ? -mag : mag;
}

Tensor f32_matrix(int64_t n, int64_t k, const std::vector<float>& v) { return Tensor::from_f32({n, k}, v); }

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

template <typename Fn>
void expect_error(Fn fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
    FAIL("expected an error containing '" << needle << "'");
  } catch (const Error& e) {
    CHECK(e.code() == code);
    CHECK_THAT(e.what(), Catch::Contains(needle));
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
}

QuantScheme fp8() {
  QuantScheme s;
  s.format = WeightFormat::kFp8;
  return s;
}

// Plain round-to-nearest (absmax scales) unless `search`: the cases below that pin codes and
// scales exactly are written for RTN; the scale search has its own test.
QuantScheme int4(int64_t g, bool symmetric, DType scale_dtype, bool search = false) {
  QuantScheme s;
  s.format = WeightFormat::kInt4;
  s.group_size = g;
  s.symmetric = symmetric;
  s.scale_dtype = scale_dtype;
  s.scale_search = search ? sampan::models::ScaleSearch::kOn : sampan::models::ScaleSearch::kOff;
  return s;
}

float round_to(float v, DType t) {
  return t == DType::kF16 ? sampan::f16_to_f32(sampan::f32_to_f16(v))
                          : sampan::bf16_to_f32(sampan::f32_to_bf16(v));
}

float stored_scale(const Tensor& scales, int64_t i) {
  const uint16_t bits = scales.data<uint16_t>()[i];
  return scales.dtype() == DType::kF16 ? sampan::f16_to_f32(bits) : sampan::bf16_to_f32(bits);
}

int nibble(const Tensor& data, int64_t i) {
  const uint8_t b = data.data<uint8_t>()[i / 2];
  const int v = i % 2 == 0 ? (b & 0xf) : (b >> 4);
  return v >= 8 ? v - 16 : v;
}

}  // namespace

TEST_CASE("fp8: every finite code round-trips through a row whose scale is exactly 1") {
  // A row holding 448 has absmax 448, so scale = 448 / 448 = 1 and each value must encode to the
  // code it was decoded from (the reference decoding above, not quant/fp8.cc).
  int checked = 0;
  for (int c = 0; c < 256; ++c) {
    const double v = fp8_ref(static_cast<uint8_t>(c));
    if (std::isnan(v)) continue;
    const Tensor w = f32_matrix(1, 2, {static_cast<float>(v), 448.0f});
    const QuantizedMatrix q = quantize_matrix(w, fp8(), "t");
    REQUIRE(q.scales.data<float>()[0] == 1.0f);
    CHECK(static_cast<int>(q.data.data<uint8_t>()[0]) == c);
    CHECK(q.data.data<uint8_t>()[1] == 0x7e);
    const Tensor d = dequantize_matrix(q, fp8(), "t");
    CHECK(d.data<float>()[0] == static_cast<float>(v));
    ++checked;
  }
  CHECK(checked == 254);  // 0x7f and 0xff are NaN
}

TEST_CASE("fp8: rounding between neighbouring codes is to nearest, ties to even") {
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = static_cast<float>(fp8_ref(static_cast<uint8_t>(c)));
    const float hi = static_cast<float>(fp8_ref(static_cast<uint8_t>(c + 1)));
    const float mid = (lo + hi) / 2;  // exact: both are short dyadic fractions
    for (float sign : {1.0f, -1.0f}) {
      const Tensor w = f32_matrix(1, 4,
                                  {sign * mid, sign * std::nextafter(mid, 0.0f),
                                   sign * std::nextafter(mid, 1000.0f), 448.0f});
      const QuantizedMatrix q = quantize_matrix(w, fp8(), "t");
      REQUIRE(q.scales.data<float>()[0] == 1.0f);
      const uint8_t* d = q.data.data<uint8_t>();
      const int s = sign < 0 ? 0x80 : 0;
      const int even = (c % 2 == 0) ? c : c + 1;
      CHECK(d[0] == (s | even));
      CHECK(d[1] == (s | c));
      CHECK(d[2] == (s | (c + 1)));
    }
  }
}

TEST_CASE("fp8: per-channel scale, error bound, zero rows, f16/bf16 input") {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 1}, {7, 17}, {33, 769}, {5, 5125}}) {
    std::vector<float> v = random_values(static_cast<size_t>(n * k), static_cast<uint32_t>(n * k), 0.05f);
    // Row 0 all zero: scale 1, never 0 or NaN.
    for (int64_t c = 0; c < k; ++c) v[static_cast<size_t>(c)] = 0;
    const QuantizedMatrix q = quantize_matrix(f32_matrix(n, k, v), fp8(), "t");
    REQUIRE(q.data.dtype() == DType::kF8E4M3);
    REQUIRE(q.scales.shape() == sampan::Shape{n});
    const Tensor d = dequantize_matrix(q, fp8(), "t");
    CHECK(q.scales.data<float>()[0] == 1.0f);
    for (int64_t r = 0; r < n; ++r) {
      float amax = 0;
      for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(v[static_cast<size_t>(r * k + c)]));
      const float scale = q.scales.data<float>()[r];
      if (amax > 0) CHECK(scale == amax / 448.0f);
      for (int64_t c = 0; c < k; ++c) {
        const size_t i = static_cast<size_t>(r * k + c);
        const double want = fp8_ref(q.data.data<uint8_t>()[i]) * scale;
        CHECK(d.data<float>()[i] == Approx(want).margin(0));
        // E4M3 keeps 3 mantissa bits: half an ulp is 2^-4 relative for normals; subnormals
        // (below 2^-6 * scale) have a fixed quantum of 2^-9 * scale.
        const double err = std::fabs(d.data<float>()[i] - v[i]);
        CHECK(err <= std::fabs(v[i]) * 0x1p-4 + scale * 0x1p-10 + 1e-12);
      }
    }
  }
  // f16 and bf16 weights quantize as their exact f32 values.
  const std::vector<float> v = random_values(7 * 33, 3);
  Tensor h = Tensor::empty({7, 33}, DType::kF16), b = Tensor::empty({7, 33}, DType::kBF16);
  std::vector<float> hv(v.size()), bv(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    h.data<uint16_t>()[i] = sampan::f32_to_f16(v[i]);
    b.data<uint16_t>()[i] = sampan::f32_to_bf16(v[i]);
    hv[i] = sampan::f16_to_f32(h.data<uint16_t>()[i]);
    bv[i] = sampan::bf16_to_f32(b.data<uint16_t>()[i]);
  }
  for (auto& [t, f] : {std::pair<Tensor, std::vector<float>>{h, hv}, {b, bv}}) {
    const QuantizedMatrix a = quantize_matrix(t, fp8(), "t");
    const QuantizedMatrix r = quantize_matrix(f32_matrix(7, 33, f), fp8(), "t");
    CHECK(std::memcmp(a.data.raw(), r.data.raw(), 7 * 33) == 0);
    CHECK(std::memcmp(a.scales.raw(), r.scales.raw(), 7 * 4) == 0);
  }
}

TEST_CASE("int4: codes, scales and zero points match the plain reference") {
  for (int64_t g : {32, 64, 128}) {
    for (bool sym : {true, false}) {
      for (DType sd : {DType::kF16, DType::kBF16}) {
        for (auto [n, k] : {std::pair<int64_t, int64_t>{1, g}, {7, 3 * g}, {17, 768}}) {
          CAPTURE(g, sym, sampan::dtype_name(sd), n, k);
          std::vector<float> v = random_values(static_cast<size_t>(n * k), static_cast<uint32_t>(g + n + k));
          // Shapes of group the formats must handle: all zeros, all positive (asymmetric range
          // still includes 0), one outlier.
          for (int64_t c = 0; c < std::min<int64_t>(k, g); ++c) v[static_cast<size_t>(c)] = 0;
          if (n > 1) {
            for (int64_t c = 0; c < g; ++c) v[static_cast<size_t>(k + c)] = 0.5f + 0.01f * static_cast<float>(c);
            v[static_cast<size_t>(k + (k > g ? g : 0) + 3)] = 40.0f;
          }
          const QuantScheme s = int4(g, sym, sd);
          const QuantizedMatrix q = quantize_matrix(f32_matrix(n, k, v), s, "t");
          REQUIRE(q.data.dtype() == DType::kI4);
          REQUIRE(q.data.shape() == sampan::Shape{n, k});
          REQUIRE(q.scales.dtype() == sd);
          REQUIRE(q.scales.shape() == sampan::Shape{n, k / g});
          REQUIRE(q.zeros.defined() == !sym);
          if (!sym) REQUIRE(q.zeros.shape() == sampan::Shape{n, k / g});
          const Tensor d = dequantize_matrix(q, s, "t");
          for (int64_t r = 0; r < n; ++r) {
            for (int64_t j = 0; j < k / g; ++j) {
              const int64_t si = r * (k / g) + j;
              float lo = 0, hi = 0;
              for (int64_t c = 0; c < g; ++c) {
                lo = std::min(lo, v[static_cast<size_t>(r * k + j * g + c)]);
                hi = std::max(hi, v[static_cast<size_t>(r * k + j * g + c)]);
              }
              float scale = 1.0f;
              int zero = 0;
              if (sym && std::max(-lo, hi) > 0) scale = round_to(std::max(-lo, hi) / 7.0f, sd);
              if (!sym && hi > lo) {
                scale = round_to((hi - lo) / 15.0f, sd);
                zero = static_cast<int>(std::max(-128.0f, std::min(127.0f, std::nearbyint(-8.0f - lo / scale))));
              }
              REQUIRE(stored_scale(q.scales, si) == scale);
              if (!sym) REQUIRE(q.zeros.data<int8_t>()[si] == zero);
              for (int64_t c = 0; c < g; ++c) {
                const int64_t i = r * k + j * g + c;
                const float w = v[static_cast<size_t>(i)];
                const int want = static_cast<int>(
                    std::max(-8.0f, std::min(7.0f, std::nearbyint(w / scale) + static_cast<float>(zero))));
                REQUIRE(nibble(q.data, i) == want);
                const float deq = static_cast<float>(want - zero) * scale;
                REQUIRE(d.data<float>()[i] == deq);
                // Symmetric: absmax / 7 maps the group into [-7, 7] (plus the scale's own
                // rounding, < 2^-8 relative), so only rounding error: half a step. Asymmetric:
                // the rounded zero point can push the top of the range one step past 7 and
                // clamp, so up to one step.
                const double bound = (sym ? 0.5 : 1.0) * scale * (1 + 0x1p-7);
                REQUIRE(std::fabs(deq - w) <= bound);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("int4 scale search: least squared error over the clip grid, never worse than RTN") {
  // The reference, written from quant/quantize.h's definition: shrink the range by c in
  // {1, 0.975, ..., 0.75}, round the scale to its type, quantize, keep the c of least squared
  // error (the first on ties).
  CHECK(QuantScheme{}.scale_search == sampan::models::ScaleSearch::kAuto);  // the default
  const float clips[] = {1.0f, 0.975f, 0.95f, 0.925f, 0.9f, 0.875f, 0.85f, 0.825f, 0.8f, 0.775f, 0.75f};
  int strictly_better = 0, groups = 0;
  for (bool sym : {true, false}) {
    for (DType sd : {DType::kF16, DType::kBF16}) {
      for (int64_t g : {32, 128}) {
        const int64_t n = 9, k = 2 * g;
        CAPTURE(sym, sampan::dtype_name(sd), g);
        std::vector<float> v = random_values(static_cast<size_t>(n * k), static_cast<uint32_t>(7 * g + sym));
        for (int64_t c = 0; c < g; ++c) v[static_cast<size_t>(c)] = 0;            // a zero group
        v[static_cast<size_t>(k + 5)] = 12.0f;                                     // an outlier
        for (int64_t c = 0; c < g; ++c) v[static_cast<size_t>(2 * k + c)] = 0.25f;  // constant
        const QuantizedMatrix q = quantize_matrix(f32_matrix(n, k, v), int4(g, sym, sd, true), "t");
        const QuantizedMatrix rtn = quantize_matrix(f32_matrix(n, k, v), int4(g, sym, sd, false), "t");
        const Tensor d = dequantize_matrix(q, int4(g, sym, sd, true), "t");
        const Tensor dr = dequantize_matrix(rtn, int4(g, sym, sd, false), "t");
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t j = 0; j < k / g; ++j) {
            const float* w = v.data() + r * k + j * g;
            float lo = 0, hi = 0;
            for (int64_t c = 0; c < g; ++c) lo = std::min(lo, w[c]), hi = std::max(hi, w[c]);
            float want_scale = 1.0f;
            int want_zero = 0;
            if (sym ? std::max(-lo, hi) > 0 : hi > lo) {
              double best = -1;
              for (float clip : clips) {
                float sc;
                int z = 0;
                if (sym) {
                  sc = round_to(std::max(-lo, hi) * clip / 7.0f, sd);
                } else {
                  sc = round_to((hi - lo) * clip / 15.0f, sd);
                  z = static_cast<int>(std::max(-128.0f, std::min(127.0f, std::nearbyint(-8.0f - lo * clip / sc))));
                }
                // The squared error as kernels/cpu/int4_quant_cpu.h sums it: 8 partial sums by
                // fma, element c into sum c % 8, then a fixed tree.
                double ps[8] = {};
                for (int64_t c = 0; c < g; ++c) {
                  const float qv = std::max(-8.0f, std::min(7.0f, std::nearbyint(w[c] / sc) + static_cast<float>(z)));
                  const double diff = static_cast<double>(w[c]) - static_cast<double>((qv - static_cast<float>(z)) * sc);
                  ps[c % 8] = std::fma(diff, diff, ps[c % 8]);
                }
                const double e = ((ps[0] + ps[1]) + (ps[2] + ps[3])) + ((ps[4] + ps[5]) + (ps[6] + ps[7]));
                if (best < 0 || e < best) best = e, want_scale = sc, want_zero = z;
              }
            }
            const int64_t si = r * (k / g) + j;
            REQUIRE(stored_scale(q.scales, si) == want_scale);
            if (!sym) REQUIRE(q.zeros.data<int8_t>()[si] == want_zero);
            double e_search = 0, e_rtn = 0;
            for (int64_t c = 0; c < g; ++c) {
              const int64_t i = r * k + j * g + c;
              const float qv = std::max(-8.0f, std::min(7.0f, std::nearbyint(v[static_cast<size_t>(i)] / want_scale) +
                                                                   static_cast<float>(want_zero)));
              REQUIRE(nibble(q.data, i) == static_cast<int>(qv));
              e_search += std::pow(static_cast<double>(d.data<float>()[i]) - v[static_cast<size_t>(i)], 2);
              e_rtn += std::pow(static_cast<double>(dr.data<float>()[i]) - v[static_cast<size_t>(i)], 2);
            }
            REQUIRE(e_search <= e_rtn);
            ++groups;
            if (e_search < 0.99 * e_rtn) ++strictly_better;
          }
        }
      }
    }
  }
  // Gaussian groups of 32..128: clipping pays on most of them (measured: all but the zero,
  // constant and a few small groups).
  CHECK(strictly_better * 2 > groups);
}

TEST_CASE("int4: packing, ties to even, zero groups, tiny groups") {
  // absmax 7 -> scale exactly 1 in f16 and bf16: q = w, and x.5 ties round to even.
  std::vector<float> v(32, 0.0f);
  const float vals[] = {7, -7, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f, 6.4f, -6.6f, 1, -1};
  for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); ++i) v[i] = vals[i];
  const int want[] = {7, -7, 2, 4, -2, 0, 0, 2, 6, -7, 1, -1};
  for (DType sd : {DType::kF16, DType::kBF16}) {
    const QuantizedMatrix q = quantize_matrix(f32_matrix(1, 32, v), int4(32, true, sd), "t");
    REQUIRE(stored_scale(q.scales, 0) == 1.0f);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); ++i) CHECK(nibble(q.data, static_cast<int64_t>(i)) == want[i]);
    // Element 2j in the low nibble of byte j.
    const uint8_t b0 = q.data.data<uint8_t>()[0];
    CHECK((b0 & 0xf) == (7 & 0xf));
    CHECK((b0 >> 4) == (-7 & 0xf));
  }
  // A group of zeros: scale 1 (never 0 or NaN), codes 0, zero point 0.
  for (bool sym : {true, false}) {
    const QuantizedMatrix q =
        quantize_matrix(f32_matrix(2, 64, std::vector<float>(128, 0.0f)), int4(64, sym, DType::kF16), "t");
    for (int64_t i = 0; i < 2; ++i) CHECK(stored_scale(q.scales, i) == 1.0f);
    for (int64_t i = 0; i < 128; ++i) CHECK(nibble(q.data, i) == 0);
    if (!sym) CHECK(q.zeros.data<int8_t>()[0] == 0);
    const Tensor d = dequantize_matrix(q, int4(64, sym, DType::kF16), "t");
    for (int64_t i = 0; i < 128; ++i) CHECK(d.data<float>()[i] == 0.0f);
  }
  // A group too small for an f16 scale still gets a positive one and finite codes.
  std::vector<float> tiny(32, 1e-9f);
  const QuantizedMatrix q = quantize_matrix(f32_matrix(1, 32, tiny), int4(32, true, DType::kF16), "t");
  CHECK(stored_scale(q.scales, 0) > 0.0f);
  const Tensor d = dequantize_matrix(q, int4(32, true, DType::kF16), "t");
  CHECK(std::isfinite(d.data<float>()[0]));
  CHECK(std::fabs(d.data<float>()[0] - 1e-9f) <= stored_scale(q.scales, 0));
}

TEST_CASE("quantize: bad inputs are one-line errors naming the tensor") {
  std::vector<float> v(64, 1.0f);
  v[37] = std::nanf("");
  expect_error([&] { quantize_matrix(f32_matrix(2, 32, v), fp8(), "layer.w"); },
               ErrorCode::kInvalidModel, "'layer.w'");
  v[37] = INFINITY;
  expect_error([&] { quantize_matrix(f32_matrix(1, 64, v), int4(32, true, DType::kF16), "layer.w"); },
               ErrorCode::kInvalidModel, "'layer.w': element [0, 37]");
  expect_error([&] { quantize_matrix(f32_matrix(1, 48, std::vector<float>(48, 1)), int4(32, true, DType::kF16), "x"); },
               ErrorCode::kInvalidArgument, "48 columns are not a multiple of the int4 group size 32");
  expect_error([&] { quantize_matrix(f32_matrix(1, 48, std::vector<float>(48, 1)), int4(48, true, DType::kF16), "x"); },
               ErrorCode::kInvalidArgument, "group size 48");
  expect_error([&] { quantize_matrix(f32_matrix(1, 32, std::vector<float>(32, 1)), int4(32, true, DType::kF32), "x"); },
               ErrorCode::kInvalidArgument, "scale type f32");
  expect_error([&] { quantize_matrix(Tensor::from_f32({4}, {1, 2, 3, 4}), fp8(), "vec"); },
               ErrorCode::kInvalidArgument, "'vec'");
  expect_error([&] { quantize_matrix(Tensor::zeros({2, 32}, DType::kI8), fp8(), "ints"); },
               ErrorCode::kInvalidArgument, "'ints'");
  expect_error([&] { quantize_matrix(f32_matrix(1, 32, std::vector<float>(32, 1)), QuantScheme{}, "n"); },
               ErrorCode::kInvalidArgument, "'n'");

  // Dequantization checks what a corrupt model file could get wrong.
  const QuantScheme s4 = int4(32, false, DType::kF16);
  const QuantizedMatrix good = quantize_matrix(f32_matrix(4, 64, random_values(256, 9)), s4, "m");
  QuantizedMatrix q = good;
  q.scales = Tensor();
  expect_error([&] { dequantize_matrix(q, s4, "m.weight"); }, ErrorCode::kInvalidModel,
               "tensor 'm.weight': the scale is missing, expected f16[4, 2]");
  q = good;
  q.scales = Tensor::zeros({4, 4}, DType::kF16);  // wrong group count
  expect_error([&] { dequantize_matrix(q, s4, "m.weight"); }, ErrorCode::kInvalidModel,
               "the scale is f16[4, 4], expected f16[4, 2]");
  q = good;
  q.scales = Tensor::zeros({4, 2}, DType::kBF16);
  expect_error([&] { dequantize_matrix(q, s4, "m.weight"); }, ErrorCode::kInvalidModel,
               "the scale is bf16[4, 2]");
  q = good;
  q.zeros = Tensor();
  expect_error([&] { dequantize_matrix(q, s4, "m.weight"); }, ErrorCode::kInvalidModel,
               "the zero point is missing");
  expect_error([&] { dequantize_matrix(good, int4(128, false, DType::kF16), "m.weight"); },
               ErrorCode::kInvalidModel, "64 columns are not a multiple of the int4 group size 128");
  const QuantizedMatrix f = quantize_matrix(f32_matrix(3, 8, random_values(24, 1)), fp8(), "f");
  q = f;
  q.scales = Tensor::zeros({4}, DType::kF32);
  expect_error([&] { dequantize_matrix(q, fp8(), "f.weight"); }, ErrorCode::kInvalidModel,
               "the scale is f32[4], expected f32[3]");
  expect_error([&] { dequantize_matrix(f, s4, "f.weight"); }, ErrorCode::kInvalidModel,
               "data is f8_e4m3[3, 8]");
}
