// cpu::gemm with quantized weights (kI4 group-wise, kF8E4M3 per-row) against a plain reference
// written here: unpack the nibbles, w = (q - z) * s, decode E4M3 with quant::fp8_e4m3_to_f32 and
// multiply by the row scale, sum in double. Every instruction set this CPU has (AVX2, AVX-512,
// AMX), serial / two-thread / wide-serial runners, both epilogues, 1..3 blocks, biases, padded
// strides, decode (m < 16: in-register dequantization; up to 16 on the AVX2 batched kernels) and
// prefill (m >= 16: dequantized chunks).
//
// Tolerances are relative to M = sum_k |x| (|q| + |z|) |s| per output (int4; for fp8 and
// symmetric int4 this is sum |x||w|), a bound on the magnitude of every partial sum.
//  - Decode of fp8 (every ISA; for |x| < 2^64 on AVX2 and AVX512-VNNI) and prefill without
//    AMX: the kernels form (q - z) * s and fp8 * scale exactly in f32 (or apply the f32 row scale
//    once at the end) and keep x in f32, so only f32 summation error remains: under 1e-5 * M for
//    every k here (as in test_gemm.cc).
//  - int4 decode (AVX2 kernels, one-row and batched (up to m = 16), the AVX512-VNNI one from that
//    level up, and on AMX CPUs the AMX-INT8 one for m = 4..16) rounds x per (row of x, group) to
//    absmax_g / 32639 steps
//    (gemm_quant.h):
//    we allow kI4DecodeXError * sum_g absmax_g(x) * sum_{c in g} |w_c| on top of 1e-5 * M.
//  - AMX-BF16 tiles with fp8 weights dequantized into the panels (from kF8AmxMinM, on an AMX
//    CPU): x split into bf16 hi + lo, the weights exact: 2^-16 on top of 1e-5 * M.
//  - AMX prefill (m >= 16 on an AMX CPU): the dequantized weights are rounded to bf16
//    (|dw| <= 2^-9 |w|) and x is split into bf16 hi + lo (2^-16): we allow 2^-8.
// kSiluMul: as test_gemm.cc, |dy| <= 1.1 |u| eg + |silu(g)| eu + 1e-6 |y|, with eg and eu the
// allowed errors of the two dot products.
// Weight blocks are allocated to their exact size at an odd address, so ASan (Sanitize build)
// reports any read past a block, and y's padding holds a sentinel.
#include <immintrin.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "engine/core/thread_pool.h"
#include "kernels/common/half.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/isa.h"
#include "quant/fp8.h"
#include "tests/kernels/kernel_test_util.h"

namespace sampan::cpu {
namespace {

// The cases of this file run the vdpbf16ps panels (bf16 dequantized prefill with kBf16) wherever
// a level has AVX512-BF16, so that they cover them on every CPU (bf16_panels_preferred keeps the
// f32 panels on Intel cores by default; test_gemm.cc checks that choice).
[[maybe_unused]] const bool kBf16PanelsForced =
    (set_bf16_panels_policy(Bf16PanelsPolicy::kOn), true);

constexpr float kSentinel = -12345.0f;

enum class XFill {
  kUniform,  // x in [-1, 1]
  kZeros,    // x = 0
  kSpike,    // x in [-1, 1] and one element per 32 of +-1e4 (an outlier in every int4 group)
  kWide,     // x in [-1, 1] times 2^e, e uniform in [-40, 40]
};

struct Case {
  DType dtype = DType::kI4;
  int64_t m = 1, k = 32;
  std::vector<int64_t> rows;  // per block
  std::vector<bool> bias;     // per block
  int64_t group = 128;
  bool asym = false;
  DType scale_dtype = DType::kF16;
  GemmEpilogue ep = GemmEpilogue::kStore;
  int64_t ldx_pad = 0, ldy_pad = 0;
  XFill x_fill = XFill::kUniform;
  bool fp8_subnormal = false;  // fp8 weights: only E4M3 subnormal codes (exponent 0)
  bool daz_ftz = false;        // run gemm with MXCSR.DAZ and FTZ set on the calling thread
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << (c.dtype == DType::kI4 ? "int4" : "fp8") << " m=" << c.m << " k=" << c.k << " rows=";
  for (size_t b = 0; b < c.rows.size(); ++b) s << (b ? "," : "") << c.rows[b] << (c.bias[b] ? "+b" : "");
  if (c.dtype == DType::kI4) {
    s << " group=" << c.group << (c.asym ? " asym" : " sym")
      << (c.scale_dtype == DType::kBF16 ? " bf16-scales" : " f16-scales");
  }
  s << " ep=" << (c.ep == GemmEpilogue::kStore ? "store" : "silu_mul") << " ldx_pad=" << c.ldx_pad
    << " ldy_pad=" << c.ldy_pad;
  switch (c.x_fill) {
    case XFill::kUniform: break;
    case XFill::kZeros: s << " x=0"; break;
    case XFill::kSpike: s << " x=spike"; break;
    case XFill::kWide: s << " x=wide"; break;
  }
  if (c.fp8_subnormal) s << " fp8-subnormal";
  if (c.daz_ftz) s << " daz+ftz";
  return s.str();
}

// One block: storage as the kernel reads it, and the plain dequantized values.
struct Block {
  std::vector<uint8_t> data;    // 1 byte of lead, then the packed weights (odd address)
  std::vector<uint8_t> scales;  // 2 bytes of lead (scales stay 2-byte aligned), then scales
  std::vector<int8_t> zeros;
  std::vector<double> value;    // [rows, k] dequantized
  std::vector<double> mag;      // [rows, k] |q| + |z| times |s| (int4), |w| (fp8)
  std::vector<float> bias;
};

Block make_block(const Case& c, int64_t rows, bool bias, std::mt19937& rng) {
  std::uniform_real_distribution<float> scale_dist(0.005f, 0.05f);
  Block b;
  const int64_t k = c.k;
  b.value.resize(rows * k);
  b.mag.resize(rows * k);
  if (c.dtype == DType::kI4) {
    const int64_t ng = k / c.group;
    b.data.resize(1 + rows * k / 2);
    b.scales.resize(2 + rows * ng * 2);
    if (c.asym) b.zeros.resize(rows * ng);
    for (int64_t i = 0; i < rows * k / 2; ++i) b.data[1 + i] = static_cast<uint8_t>(rng());
    std::vector<double> s(rows * ng);
    for (int64_t i = 0; i < rows * ng; ++i) {
      const float v = (rng() & 1 ? -1.0f : 1.0f) * scale_dist(rng);
      const uint16_t h = c.scale_dtype == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
      std::memcpy(b.scales.data() + 2 + i * 2, &h, 2);
      s[i] = c.scale_dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
      if (c.asym) b.zeros[i] = static_cast<int8_t>(static_cast<int>(rng() % 16) - 8);
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < k; ++j) {
        const uint8_t byte = b.data[1 + (r * k + j) / 2];
        const int nib = j % 2 == 0 ? byte & 0xf : byte >> 4;  // element 2i: low nibble
        const int q = nib >= 8 ? nib - 16 : nib;
        const int z = c.asym ? b.zeros[r * ng + j / c.group] : 0;
        const double sc = s[r * ng + j / c.group];
        b.value[r * k + j] = (q - z) * sc;
        b.mag[r * k + j] = (std::abs(q) + std::abs(z)) * std::fabs(sc);
      }
    }
  } else {
    b.data.resize(1 + rows * k);
    b.scales.resize(2 + rows * 4);
    for (int64_t r = 0; r < rows; ++r) {
      const float sc = scale_dist(rng);
      std::memcpy(b.scales.data() + 2 + r * 4, &sc, 4);
      for (int64_t j = 0; j < k; ++j) {
        uint8_t v;
        do v = static_cast<uint8_t>(rng());
        while ((v & 0x7f) == 0x7f);  // the NaN codes: no quantizer writes them
        if (c.fp8_subnormal) v &= 0x87;
        b.data[1 + r * k + j] = v;
        b.value[r * k + j] = static_cast<double>(quant::fp8_e4m3_to_f32(v)) * sc;
        b.mag[r * k + j] = std::fabs(b.value[r * k + j]);
      }
    }
  }
  if (bias) {
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    b.bias.resize(rows);
    for (auto& v : b.bias) v = d(rng);
  }
  return b;
}

// fp8 on AMX-BF16 tiles (gemm_quant_f8_amx.cc, from kF8AmxMinM): x split into bf16 hi + lo (2^-16),
// the weights exact in bf16 (row scale applied in f32): 2^-16 of M, plus f32 summation.
// (Called with the ISA already set.)
bool amx_decode(Isa isa, const Case& c) {
  return isa_includes(isa, Isa::kAmx) && c.dtype == DType::kF8E4M3 &&
         gemm_detail::quant_on_amx_tiles(c.dtype, c.m);
}

double tolerance(Isa isa, const Case& c) {
  // fp8 decode on vdpbf16ps (gemm_quant_f8_avx512_bf16.cc): x = hi + lo bf16 (2^-16) or, with
  // kBf16, bf16 (2^-8); weights exact, sums in f32.
  if (c.dtype == DType::kF8E4M3 && gemm_detail::f8_decode_on_dpbf16(c.m) &&
      has_avx512_vnni() && !amx_decode(isa, c)) {
    const bool hi_only = sampan::cpu::gemm_precision() == sampan::cpu::GemmPrecision::kBf16;
    return std::ldexp(1.0, hi_only ? -8 : -16) + 1e-5;
  }
  if (amx_decode(isa, c)) {
    if (sampan::cpu::gemm_precision() == sampan::cpu::GemmPrecision::kBf16) {
      return std::ldexp(1.0, -7);
    }
    return std::ldexp(1.0, -16) + 1e-5;
  }
  // int4 on AMX-INT8 tiles (gemm_quant_i4_amx.cc) and int4 prefill in integers without AMX
  // (gemm_prefill_int_avx512_vnni.cc, _avx2.cc): integer sums, the x rounding added by
  // x_rounding below.
  const bool amx_i4 = isa_includes(isa, Isa::kAmx) && gemm_detail::i4_on_amx_int8(c.m, c.group);
  if (c.dtype == DType::kI4 && (amx_i4 || gemm_detail::i4_on_int_prefill(c.m))) {
    return 1e-5;
  }
  const bool prefill = !gemm_detail::decode_kernels_take(c.dtype, c.m);
  // Prefill multiplies in bf16 on AMX, and with GemmPrecision::kBf16 on AVX512-BF16 too
  // (gemm_quant.h): weights (and x with kBf16) rounded to bf16.
  const bool bf16 = isa_includes(isa, Isa::kAmx) ||
                    (isa_includes(isa, Isa::kAvx512Bf16) &&
                     sampan::cpu::gemm_precision() == sampan::cpu::GemmPrecision::kBf16);
  if (!prefill || !bf16) return 1e-5;
  return sampan::cpu::gemm_precision() == sampan::cpu::GemmPrecision::kBf16 ? std::ldexp(1.0, -7)
                                                                             : std::ldexp(1.0, -8);
}

// The rounding of x on this ISA, relative to sum_g absmax_g(x) sum_{c in g} |w_c|: every int4
// decode kernel (AVX2, AVX512-VNNI, AMX-INT8) rounds x per group to x16, and they take m = 16 too
// unless GemmPrecision is kF32 (decode_kernels_take); so does int4 prefill in integers on CPUs
// without AMX (i4_on_int_prefill); to x8 with GemmPrecision::kBf16 (vnni_x8) there and in every
// decode kernel but AMX-INT8's (i4_decode_x8: AVX512-VNNI, AVX2 one-row and batched).
double x_rounding(Isa isa, const Case& c) {
  if (c.dtype != DType::kI4) return 0.0;
  if ((gemm_detail::i4_on_int_prefill(c.m) && gemm_detail::vnni_x8()) ||
      gemm_detail::i4_decode_x8(c.m, c.group)) {
    return gemm_detail::kX8Error;
  }
  const bool rounds = (isa_includes(isa, Isa::kAmx) && gemm_detail::i4_on_amx_int8(c.m, c.group)) ||
                      gemm_detail::decode_kernels_take(c.dtype, c.m) ||
                      gemm_detail::i4_on_int_prefill(c.m);
  return rounds ? gemm_detail::kI4DecodeXError : 0.0;
}

// Restores the process-wide GemmPrecision when it goes out of scope.
struct PrecisionRestore {
  GemmPrecision saved = gemm_precision();
  ~PrecisionRestore() { set_gemm_precision(saved); }
};

// Sets MXCSR.DAZ and FTZ while alive (when asked).
struct DazFtz {
  explicit DazFtz(bool on) : saved(_mm_getcsr()) {
    if (on) _mm_setcsr(saved | 0x8040);
  }
  ~DazFtz() { _mm_setcsr(saved); }
  unsigned saved;
};

void check_case(const Case& c, uint32_t seed) {
  INFO(describe(c));
  std::mt19937 rng(seed);
  const int n_blocks = static_cast<int>(c.rows.size());
  std::vector<Block> blocks;
  for (int b = 0; b < n_blocks; ++b) blocks.push_back(make_block(c, c.rows[b], c.bias[b], rng));
  GemmWeights w;
  w.dtype = c.dtype;
  w.k = c.k;
  w.n_blocks = n_blocks;
  w.group_size = c.dtype == DType::kI4 ? c.group : 0;
  w.scale_dtype = c.scale_dtype;
  for (int b = 0; b < n_blocks; ++b) {
    w.data[b] = blocks[b].data.data() + 1;
    w.rows[b] = c.rows[b];
    w.bias[b] = c.bias[b] ? blocks[b].bias.data() : nullptr;
    w.scales[b] = blocks[b].scales.data() + 2;
    w.zeros[b] = c.asym ? blocks[b].zeros.data() : nullptr;
  }
  const int64_t ldx = c.k + c.ldx_pad;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp_dist(-40, 40);
  // Exactly up to the end of the last row; padding between rows is NaN, so reading it shows.
  std::vector<float> x((c.m - 1) * ldx + c.k, std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.k; ++j) {
      float v = c.x_fill == XFill::kZeros ? 0.0f : dist(rng);
      if (c.x_fill == XFill::kWide) v = std::ldexp(v, exp_dist(rng));
      x[i * ldx + j] = v;
    }
    if (c.x_fill == XFill::kSpike) {
      for (int64_t j = 0; j < c.k; j += 32) {
        const int64_t at = j + static_cast<int64_t>(rng() % std::min<int64_t>(32, c.k - j));
        x[i * ldx + at] = rng() % 2 ? 1e4f : -1e4f;
      }
    }
  }

  // Per output: the dot product, M, and sum_g absmax_g(x) sum_{c in g} |w_c| (int4 groups).
  const int64_t n_total = w.n();
  const int64_t xg = c.dtype == DType::kI4 ? c.group : c.k;
  std::vector<double> dot(c.m * n_total), mag(c.m * n_total), xmag(c.m * n_total);
  int64_t col = 0;
  for (int b = 0; b < n_blocks; ++b) {
    for (int64_t r = 0; r < c.rows[b]; ++r, ++col) {
      for (int64_t i = 0; i < c.m; ++i) {
        double s = c.bias[b] ? blocks[b].bias[r] : 0.0, a = std::fabs(s), xa = 0.0;
        for (int64_t g0 = 0; g0 < c.k; g0 += xg) {
          double amax = 0.0, wsum = 0.0;
          for (int64_t j = g0; j < g0 + xg; ++j) {
            s += x[i * ldx + j] * blocks[b].value[r * c.k + j];
            a += std::fabs(x[i * ldx + j]) * blocks[b].mag[r * c.k + j];
            amax = std::max(amax, static_cast<double>(std::fabs(x[i * ldx + j])));
            wsum += std::fabs(blocks[b].value[r * c.k + j]);
          }
          xa += amax * wsum;
        }
        dot[i * n_total + col] = s;
        mag[i * n_total + col] = a;
        xmag[i * n_total + col] = xa;
      }
    }
  }
  const bool silu = c.ep == GemmEpilogue::kSiluMul;
  const int64_t n_out = silu ? c.rows[0] : n_total;
  const int64_t ldy = n_out + c.ldy_pad;

  IsaRestore restore;
  Runners runners;
  for (Isa isa : supported_isas()) {
    REQUIRE(set_isa(isa));
    const double tol = tolerance(isa, c);
    const double xtol = x_rounding(isa, c);
    auto allowed_at = [&](int64_t idx) { return tol * mag[idx] + xtol * xmag[idx]; };
    for (auto [name, runner] : runners.all()) {
      INFO("isa=" << isa_name(isa) << " runner=" << name);
      std::vector<float> y(c.m * ldy, kSentinel);
      {
        DazFtz mode(c.daz_ftz);
        gemm(c.m, x.data(), ldx, w, c.ep, y.data(), ldy, *runner);
      }
      check_gemm_output(y, c.m, ldy, n_out, n_total, silu, dot, allowed_at, kSentinel);
    }
  }
}

struct Shape {
  int64_t m, n, k;
};

TEST_CASE("gemm int4: awkward m, rows, k over every group, sym/asym, scale dtype",
          "[kernels][gemm_quant]") {
  const Shape shapes[] = {{1, 1, 32},   {2, 7, 64},    {3, 17, 128},  {7, 769, 896},
                          {8, 17, 2112}, {9, 7, 896},  {1, 769, 2048}, {4, 33, 160},
                          {15, 17, 96}, {16, 7, 64},   {33, 17, 128}, {128, 769, 2048},
                          {2, 5, 32},   {5, 40, 2176}};
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    for (int64_t g : {32, 64, 128}) {
      if (s.k % g != 0) continue;
      // sym/asym, scale dtype and strides cycle with the seed across shapes and groups.
      Case c;
      c.m = s.m;
      c.k = s.k;
      c.rows = {s.n};
      c.bias = {seed % 2 == 0};
      c.group = g;
      c.asym = seed % 2 == 1;
      c.scale_dtype = (seed / 2) % 2 == 0 ? DType::kF16 : DType::kBF16;
      c.ldx_pad = seed % 3 == 0 ? 0 : 3;
      c.ldy_pad = seed % 4 == 0 ? 0 : 5;
      check_case(c, seed++);
    }
  }
}

TEST_CASE("gemm int4: every sym/asym x scale dtype x group at decode and prefill sizes",
          "[kernels][gemm_quant]") {
  uint32_t seed = 1000;
  for (int64_t m : {1, 8, 33}) {
    for (int64_t g : {32, 64, 128}) {
      for (bool asym : {false, true}) {
        for (DType sd : {DType::kF16, DType::kBF16}) {
          Case c;
          c.m = m;
          c.k = 384;
          c.rows = {19};
          c.bias = {asym};
          c.group = g;
          c.asym = asym;
          c.scale_dtype = sd;
          c.ldx_pad = 1;
          check_case(c, seed++);
        }
      }
    }
  }
}

TEST_CASE("gemm int4: two and three blocks, SiLU-mul", "[kernels][gemm_quant]") {
  uint32_t seed = 100;
  for (int64_t m : {1, 3, 8, 9, 17, 64}) {
    Case c;
    c.m = m;
    c.k = m == 17 ? 896 : 128;
    c.group = m % 2 ? 64 : 32;
    c.asym = m % 3 == 0;
    c.scale_dtype = m % 2 ? DType::kBF16 : DType::kF16;
    c.rows = {40, 17, 23};
    c.bias = {true, false, true};
    c.ldx_pad = 1;
    c.ldy_pad = 2;
    check_case(c, seed++);
    c.rows = {64, 33};
    c.bias = {false, true};
    check_case(c, seed++);
    c.rows = {33, 33};
    c.bias = {m % 2 == 0, true};
    c.ep = GemmEpilogue::kSiluMul;
    check_case(c, seed++);
    c.rows = {1, 1};
    c.k = 32;
    c.group = 32;
    check_case(c, seed++);
  }
}

// The decode kernels round x per group (the bound in gemm_quant.h) and have their own paths for
// group 32 and 64 (several groups per step of 64 (AVX2) or 128 (VNNI) weights), a k that is not
// a multiple of the step (a half or masked step at the end), zero points, bf16 and f16 scales,
// and tiles of rows of x (m = 1..4 per call on AVX2, 1..8 on VNNI, m up to 15 in several calls). Outliers (one +-1e4 per group) and x = 0 are the edges of the rounding.
TEST_CASE("gemm int4 decode: groups, half steps, zeros, scale dtypes, m = 1..15, outliers",
          "[kernels][gemm_quant]") {
  struct KG {
    int64_t k, group;
  };
  const KG kgs[] = {{32, 32},  {64, 64},  {128, 128}, {96, 32},   {160, 32},  {192, 64},
                    {384, 128}, {2080, 32}, {2112, 64}, {1152, 128}};
  const XFill fills[] = {XFill::kUniform, XFill::kSpike, XFill::kZeros, XFill::kWide};
  PrecisionRestore restore;
  uint32_t seed = 2000;
  // kBf16: the decode kernels round x to x8 (i4_decode_x8), below AVX512-VNNI the AVX2 one-row
  // kernel at m = 1..2 and the batched one from m = 3.
  for (GemmPrecision prec : {GemmPrecision::kSplitBf16, GemmPrecision::kBf16}) {
    set_gemm_precision(prec);
    INFO("precision=" << static_cast<int>(prec));
    for (int64_t m = 1; m <= 15; ++m) {
      for (const KG& kg : kgs) {
        Case c;
        c.m = m;
        c.k = kg.k;
        c.group = kg.group;
        c.rows = {seed % 3 == 0 ? 9 : 5};  // 4 rows per call: full and short last calls
        c.bias = {seed % 2 == 0};
        c.asym = (seed / 2) % 2 == 1;
        c.scale_dtype = (seed / 4) % 2 == 0 ? DType::kF16 : DType::kBF16;
        c.x_fill = fills[seed % 4];
        c.ldx_pad = seed % 5 == 0 ? 0 : 7;
        check_case(c, seed++);
      }
    }
  }
}

// int4 prefill in integers (no AMX): 6 rows of x per tile (m not a multiple of 6), units of
// 32 output columns (blocks not a multiple of 32, a unit past a block's end, several blocks,
// SiLU-mul pairs), groups of 32 / 64 / 128 pairs of elements, zero points, both scale dtypes,
// and the x that stress the rounding per group (outliers, wide exponents, zeros). On other
// levels the same cases check the dequantizing prefill.
TEST_CASE("gemm int4 prefill: tiles of 6 rows, 32-column units, groups, zeros, x fills",
          "[kernels][gemm_quant]") {
  const XFill fills[] = {XFill::kUniform, XFill::kSpike, XFill::kWide, XFill::kZeros};
  PrecisionRestore restore;
  uint32_t seed = 2700;
  // kBf16: on the integer prefill without AMX, x rounded to x8 (vnni_x8).
  for (GemmPrecision prec : {GemmPrecision::kSplitBf16, GemmPrecision::kBf16}) {
    set_gemm_precision(prec);
    INFO("precision=" << static_cast<int>(prec));
    for (int64_t m : {17, 23, 64}) {
      for (int64_t g : {32, 64, 128}) {
        for (int shape = 0; shape < 3; ++shape) {
          Case c;
          c.m = m;
          c.k = g == 128 ? 1152 : (m == 23 ? 2112 : 96 * g / 32);
          c.group = g;
          c.asym = seed % 2 == 1;
          c.scale_dtype = (seed / 2) % 2 == 0 ? DType::kF16 : DType::kBF16;
          c.x_fill = fills[seed % 4];
          c.ldx_pad = seed % 3 == 0 ? 0 : 5;
          c.ldy_pad = seed % 5 == 0 ? 0 : 3;
          set_prefill_blocks(c, shape, seed);
          check_case(c, seed++);
        }
      }
    }
  }
}

// The same path against x rounded exactly as the kI4 contract says (gemm_quant.h), here in
// scalar code: s_x = absmax_g / 32639 (x8 with kBf16: 127) and 1 / s_x as f32 divisions,
// x16 = round-half-even of the f32 product x * (1 / s_x); a group whose 1 / s_x overflows
// (absmax below ~2^-113) counts as zero. What remains is f32 summation of exact integer group
// sums: 1e-5 * M. Groups of x: uniform, one +-1e4 outlier, 2^-120 times uniform (taken as zero
// at x16), zeros, 2^-60 times uniform, 2^-126 times uniform (taken as zero).
TEST_CASE("gemm int4 prefill in integers and x8 decode: x rounded as the contract says",
          "[kernels][gemm_quant]") {
  uint32_t seed = 2900;
  IsaRestore restore;
  PrecisionRestore prec_restore;
  Runners runners;
  // x16 by default, x8 with kBf16 (vnni_x8): xmax 32639 or 127. Decode sizes (m = 1, 2, 4, 5, 16)
  // with kBf16: the x8 decode kernels (i4_decode_x8) round x the same way.
  struct Run {
    GemmPrecision prec;
    int64_t m;
  };
  // m = 4 and 5: one pass of the VNNI x8 kernel over 4 rows of x and two passes (3 + 2 rows);
  // on AVX2, m = 1, 2 the one-row x8 kernel, 4, 5 and 16 (two register groups of 8) the batched.
  const Run runs[] = {{GemmPrecision::kSplitBf16, 19}, {GemmPrecision::kBf16, 19},
                      {GemmPrecision::kBf16, 1},       {GemmPrecision::kBf16, 2},
                      {GemmPrecision::kBf16, 4},       {GemmPrecision::kBf16, 5},
                      {GemmPrecision::kBf16, 16}};
  for (const auto& [prec, m] : runs)
  for (int64_t g : {32, 64, 128}) {
    set_gemm_precision(prec);
    const float xmax = prec == GemmPrecision::kBf16 ? 127.0f : 32639.0f;
    const int64_t k = 10 * g, n = 37;
    Case c;
    c.m = m;
    c.k = k;
    c.group = g;
    // Zero points at every group size over the runs (the x8 kernel adds 8 - z per group).
    c.asym = (g == 64) != (m == 5 || m == 2);
    c.scale_dtype = g == 128 ? DType::kBF16 : DType::kF16;
    std::mt19937 rng(seed++);
    Block blk = make_block(c, n, false, rng);
    GemmWeights w;
    w.dtype = DType::kI4;
    w.k = k;
    w.n_blocks = 1;
    w.rows[0] = n;
    w.data[0] = blk.data.data() + 1;
    w.scales[0] = blk.scales.data() + 2;
    w.zeros[0] = c.asym ? blk.zeros.data() : nullptr;
    w.group_size = g;
    w.scale_dtype = c.scale_dtype;
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> x(m * k);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < k; ++j) {
        const int64_t kind = (j / g + i) % 6;
        float v = kind == 3 ? 0.0f : dist(rng);
        if (kind == 2) v = std::ldexp(v, -120);
        if (kind == 4) v = std::ldexp(v, -60);
        if (kind == 5) v = std::ldexp(v, -126);
        x[i * k + j] = v;
      }
      for (int64_t g0 = 0; g0 < k; g0 += g) {
        if ((g0 / g + i) % 6 == 1) x[i * k + g0 + rng() % g] = rng() % 2 ? 1e4f : -1e4f;
      }
    }
    // Reference: sum_g s_x sum_c x16_c w_c in double, and M.
    std::vector<double> ref(m * n), mag(m * n);
    for (int64_t i = 0; i < m; ++i) {
      std::vector<double> xr(k);
      for (int64_t g0 = 0; g0 < k; g0 += g) {
        float amax = 0.0f;
        for (int64_t j = g0; j < g0 + g; ++j) amax = std::max(amax, std::fabs(x[i * k + j]));
        const float sx = amax / xmax, inv = amax > 0.0f ? xmax / amax : 0.0f;
        for (int64_t j = g0; j < g0 + g; ++j) {
          xr[j] = std::isinf(inv) ? 0.0 : std::nearbyint(x[i * k + j] * inv) * double{sx};
        }
      }
      for (int64_t r = 0; r < n; ++r) {
        double s = 0.0, a = 0.0;
        for (int64_t j = 0; j < k; ++j) {
          s += xr[j] * blk.value[r * k + j];
          a += std::fabs(x[i * k + j]) * blk.mag[r * k + j];
        }
        ref[i * n + r] = s;
        mag[i * n + r] = a;
      }
    }
    for (Isa isa : supported_isas()) {
      REQUIRE(set_isa(isa));
      if (!gemm_detail::i4_on_int_prefill(m) && !gemm_detail::i4_decode_x8(m, g)) continue;
      for (auto [name, runner] : runners.all()) {
        std::vector<float> y(m * n);
        gemm(m, x.data(), k, w, GemmEpilogue::kStore, y.data(), n, *runner);
        for (int64_t idx = 0; idx < m * n; ++idx) {
          INFO("group=" << g << " xmax=" << xmax << " isa=" << isa_name(isa) << " runner=" << name
                        << " row "
                        << idx / n << " col " << idx % n);
          CHECK(std::fabs(y[idx] - ref[idx]) <= 1e-5 * mag[idx] + 1e-30);
        }
      }
    }
  }
}

TEST_CASE("gemm int4 decode: SiLU-mul and blocks of mixed zero points", "[kernels][gemm_quant]") {
  uint32_t seed = 2500;
  for (int64_t m : {1, 2, 3, 4, 6}) {
    for (int64_t g : {32, 64, 128}) {
      Case c;
      c.m = m;
      c.k = g == 32 ? 160 : 384;
      c.group = g;
      c.asym = true;
      c.scale_dtype = m % 2 ? DType::kBF16 : DType::kF16;
      c.x_fill = m % 2 ? XFill::kSpike : XFill::kUniform;
      c.rows = {10, 10};
      c.bias = {true, false};
      c.ep = GemmEpilogue::kSiluMul;
      check_case(c, seed++);
    }
  }
}

// The AMX batched-decode path reads the precision per call: kBf16 rounds x to bf16 there,
// kF32 keeps these m on the exact decode kernels (checked at their tighter bounds).
TEST_CASE("gemm int4 and fp8 batched decode under every GemmPrecision", "[kernels][gemm_quant]") {
  PrecisionRestore restore;
  uint32_t seed = 7000;
  for (GemmPrecision p : {GemmPrecision::kSplitBf16, GemmPrecision::kBf16, GemmPrecision::kF32}) {
    set_gemm_precision(p);
    for (DType dt : {DType::kI4, DType::kF8E4M3}) {
      for (int64_t m : {2, 4, 5, 9, 16, 40}) {
        Case c;
        c.dtype = dt;
        c.m = m;
        c.k = dt == DType::kI4 ? 256 : 200;
        c.rows = {37, 21};
        c.bias = {true, false};
        c.group = 64;
        c.asym = m == 9;
        c.x_fill = m == 16 ? XFill::kSpike : XFill::kUniform;
        INFO("precision=" << static_cast<int>(p));
        check_case(c, seed++);
      }
    }
  }
}

// A NaN or an infinity in x makes its row of y NaN (whole-group rounding must not hide it), at
// decode and prefill sizes.
TEST_CASE("gemm int4 and fp8 decode and prefill: a NaN or inf in x gives NaN outputs",
          "[kernels][gemm_quant]") {
  struct Bad {
    DType dt;
    int64_t m;
    float v;
    GemmPrecision prec;
  };
  std::vector<Bad> cases;
  for (DType dt : {DType::kI4, DType::kF8E4M3}) {
    for (int64_t m : {2, 20}) {
      // kBf16 at m = 20: int4 prefill in integers rounds x to x8 (vnni_x8).
      for (GemmPrecision prec : {GemmPrecision::kSplitBf16, GemmPrecision::kBf16}) {
        cases.push_back({dt, m, std::numeric_limits<float>::quiet_NaN(), prec});
        cases.push_back({dt, m, std::numeric_limits<float>::infinity(), prec});
      }
    }
  }
  PrecisionRestore prec_restore;
  for (const auto& [dt, m, bad, prec] : cases) {
    set_gemm_precision(prec);
    const int64_t k = 256, n = 6;
    std::vector<uint8_t> data(dt == DType::kI4 ? n * k / 2 : n * k, 0x11);
    std::vector<uint16_t> scales(n * (k / 64), f32_to_f16(0.01f));
    std::vector<float> fscales(n, 0.01f);
    GemmWeights w;
    w.dtype = dt;
    w.k = k;
    w.n_blocks = 1;
    w.rows[0] = n;
    w.data[0] = data.data();
    w.group_size = dt == DType::kI4 ? 64 : 0;
    w.scales[0] = dt == DType::kI4 ? static_cast<const void*>(scales.data()) : fscales.data();
    std::vector<float> x(m * k, 0.5f), y(m * n);
    x[100] = bad;
    IsaRestore restore;
    Runners runners;
    for (Isa isa : supported_isas()) {
      REQUIRE(set_isa(isa));
      gemm(m, x.data(), k, w, GemmEpilogue::kStore, y.data(), n, runners.serial);
      for (int64_t j = 0; j < n; ++j) {
        INFO("dtype=" << (dt == DType::kI4 ? "int4" : "fp8") << " isa=" << isa_name(isa)
                      << " m=" << m << " x=" << bad << " precision=" << static_cast<int>(prec)
                      << " col " << j);
        // An inf: NaN where x is rounded per group (s_x NaN), inf or NaN where it stays f32.
        if (std::isnan(bad)) {
          CHECK(std::isnan(y[j]));
        } else {
          CHECK(!std::isfinite(y[j]));
        }
        for (int64_t i = 1; i < m; ++i) CHECK(std::isfinite(y[i * n + j]));
      }
    }
  }
}

TEST_CASE("gemm fp8: awkward m, rows, k (any k >= 1)", "[kernels][gemm_quant]") {
  const Shape shapes[] = {{1, 1, 1},    {2, 7, 7},     {3, 17, 31},   {7, 769, 33},
                          {8, 17, 896}, {9, 7, 2049},  {1, 769, 2048}, {4, 5, 17},
                          {15, 17, 65}, {16, 7, 100},  {33, 17, 128}, {128, 769, 2048},
                          {5, 1, 1000}, {2, 3, 16}};
  uint32_t seed = 200;
  for (const Shape& s : shapes) {
    Case c;
    c.dtype = DType::kF8E4M3;
    c.m = s.m;
    c.k = s.k;
    c.rows = {s.n};
    c.bias = {seed % 2 == 0};
    c.ldx_pad = seed % 3 == 0 ? 0 : 3;
    c.ldy_pad = seed % 4 == 0 ? 0 : 5;
    check_case(c, seed++);
  }
}

// Every E4M3 code (but the NaN pair 0x7f / 0xff, whose reading the reference and the kernels do
// not share) at every column position of a pair of 32-element steps and a short last step
// (k = 100), read through x rows that each pick one column (every column, m rows per call): y
// is the code's value times the row
// scale, one f32 rounding off at most. On AMX CPUs m = 8 and m = 40 run the tile panels (packed
// by byte table lookups where the CPU has AVX512-VBMI): a table entry, the code order inside the
// 64-code load or the sign copy, wrong, fails here.
TEST_CASE("gemm fp8: every code at every column is its E4M3 value times the row scale",
          "[kernels][gemm_quant]") {
  const int64_t k = 100, n = 256;
  std::vector<uint8_t> data(n * k);
  std::vector<float> scales(n);
  for (int64_t j = 0; j < n; ++j) {
    scales[j] = 0.75f + 0.01f * static_cast<float>(j % 7);
    for (int64_t c = 0; c < k; ++c) {
      const auto code = static_cast<uint8_t>((j + 3 * c) % 256);
      data[j * k + c] = (code & 0x7f) == 0x7f ? uint8_t{0x01} : code;
    }
  }
  GemmWeights w;
  w.dtype = DType::kF8E4M3;
  w.k = k;
  w.n_blocks = 1;
  w.rows[0] = n;
  w.data[0] = data.data();
  w.scales[0] = scales.data();
  IsaRestore restore;
  Runners runners;
  int64_t checked = 0;
  for (Isa isa : supported_isas()) {
    REQUIRE(set_isa(isa));
    for (int64_t m : {1, 8, 40}) {
      for (int64_t c0 = 0; c0 < k; c0 += m) {  // every column, m at a time
        std::vector<float> x(m * k, 0.0f), y(m * n, -1.0f);
        std::vector<int64_t> col(m);
        for (int64_t i = 0; i < m; ++i) {
          col[i] = (c0 + i) % k;
          x[i * k + col[i]] = 1.0f;
        }
        gemm(m, x.data(), k, w, GemmEpilogue::kStore, y.data(), n, runners.serial);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            const uint8_t code = data[j * k + col[i]];
            const double want =
                static_cast<double>(quant::fp8_e4m3_to_f32(code)) * static_cast<double>(scales[j]);
            INFO("isa " << isa_name(isa) << " m " << m << " row " << i << " column " << col[i]
                        << " code " << static_cast<int>(code));
            REQUIRE(std::fabs(y[i * n + j] - want) <= std::fabs(want) * 0x1p-22);
            ++checked;
          }
        }
      }
    }
  }
  CHECK(checked > 0);
}

// E4M3 subnormals (exponent 0) decode to f32 denormals in the AVX2 kernel, which clears DAZ/FTZ
// for its duration: a caller with both set must get the same results. Wide x checks the 2^64
// scaling of prepared x (no overflow for |x| up to 2^40, no underflow of the products).
// The AVX2 kernel multiplies subnormal codes apart where the CPU pays for denormals (Intel) and
// as they come elsewhere (AMD): both forms run here on any CPU.
TEST_CASE("gemm fp8 decode: subnormal codes, DAZ/FTZ set by the caller, wide x",
          "[kernels][gemm_quant]") {
  using gemm_detail::F8SubnormalSplit;
  for (F8SubnormalSplit split : {F8SubnormalSplit::kOn, F8SubnormalSplit::kOff}) {
    gemm_detail::set_f8_subnormal_split(split);
    uint32_t seed = 3000;
    for (int64_t m : {1, 2, 3, 4, 7}) {
      for (int64_t k : {1, 31, 64, 100, 2049}) {
        for (bool sub : {false, true}) {
          Case c;
          c.dtype = DType::kF8E4M3;
          c.m = m;
          c.k = k;
          c.rows = {6};
          c.bias = {seed % 2 == 0};
          c.fp8_subnormal = sub;
          c.daz_ftz = true;
          c.x_fill = seed % 3 == 0 ? XFill::kWide : XFill::kUniform;
          check_case(c, seed++);
        }
      }
    }
  }
  gemm_detail::set_f8_subnormal_split(gemm_detail::F8SubnormalSplit::kAuto);
  CHECK(gemm_detail::f8_split_subnormals() == cpu_features().denormal_assist);
}

// The VNNI-level fp8 decode kernel takes 1..8 rows of x per call (m up to 15 in two calls), two
// weight rows at a time, and 64 weights per step with a masked last step.
TEST_CASE("gemm fp8 decode: m = 1..15, k around the 64-weight step, short calls",
          "[kernels][gemm_quant]") {
  uint32_t seed = 3500;
  for (int64_t m = 1; m <= 15; ++m) {
    for (int64_t k : {1, 63, 64, 65, 200, 1031}) {
      Case c;
      c.dtype = DType::kF8E4M3;
      c.m = m;
      c.k = k;
      c.rows = {seed % 3 == 0 ? 9 : 5};
      c.bias = {seed % 2 == 0};
      c.x_fill = seed % 4 == 0 ? XFill::kWide : seed % 4 == 1 ? XFill::kSpike : XFill::kUniform;
      c.ldx_pad = seed % 5 == 0 ? 0 : 7;
      check_case(c, seed++);
    }
  }
}

// The vdpbf16ps fp8 decode kernel (gemm_quant_f8_avx512_bf16.cc; forced on at AVX512-BF16
// levels by kBf16PanelsForced) in both of its x preparations: hi + lo (kSplitBf16) and hi alone
// (kBf16), with subnormal codes, zero codes, wide x and every row count of x it takes in a call.
TEST_CASE("gemm fp8 decode on vdpbf16ps: hi + lo and bf16 x, subnormal codes, m = 1..9",
          "[kernels][gemm_quant]") {
  PrecisionRestore prec_restore;
  uint32_t seed = 3900;
  for (GemmPrecision prec : {GemmPrecision::kSplitBf16, GemmPrecision::kBf16}) {
    set_gemm_precision(prec);
    for (int64_t m = 1; m <= 9; ++m) {
      for (int64_t k : {7, 64, 130, 2049}) {
        Case c;
        c.dtype = DType::kF8E4M3;
        c.m = m;
        c.k = k;
        c.rows = {seed % 3 == 0 ? 9 : 6};
        c.bias = {seed % 2 == 0};
        c.fp8_subnormal = seed % 3 == 1;
        c.x_fill = seed % 4 == 0 ? XFill::kWide : seed % 4 == 1 ? XFill::kSpike : XFill::kUniform;
        c.ldx_pad = seed % 5 == 0 ? 0 : 3;
        check_case(c, seed++);
      }
    }
    // check_case ran every level; at one with AVX512-BF16 the kernel took these cases (without
    // AMX, where tiles take m >= kF8AmxMinM).
    IsaRestore restore;
    if (isa_includes(best_supported_isa(), Isa::kAvx512Bf16)) {
      REQUIRE(set_isa(Isa::kAvx512Bf16));
      CHECK(gemm_detail::f8_decode_on_dpbf16(1));
      CHECK(gemm_detail::f8_decode_on_dpbf16(9));
    }
  }
}

TEST_CASE("gemm fp8: two and three blocks, SiLU-mul", "[kernels][gemm_quant]") {
  uint32_t seed = 300;
  for (int64_t m : {1, 4, 7, 17, 64}) {
    Case c;
    c.dtype = DType::kF8E4M3;
    c.m = m;
    c.k = m == 7 ? 257 : 130;
    c.rows = {40, 17, 23};
    c.bias = {true, false, true};
    c.ldx_pad = 2;
    c.ldy_pad = 1;
    check_case(c, seed++);
    c.rows = {33, 33};
    c.bias = {true, m % 2 == 0};
    c.ep = GemmEpilogue::kSiluMul;
    check_case(c, seed++);
    c.rows = {7, 7};
    check_case(c, seed++);
  }
}

// The AVX2 batched-decode kernels (gemm_quant_batch_avx2.cc, m = 3..16 without AVX512-VNNI) take
// 16 weight rows per call in k-chunks sized by m (int4: 256..2048 weights, fp8: 128..1024), rows
// of x in register groups of up to 8 (int4) or 6 (fp8): calls that are full and short, that cross
// weight blocks, k of many chunks with a half step (group 32) or a tail of k % 8 codes (fp8).
TEST_CASE("gemm int4 and fp8 batched decode: 16-row calls, long k, m = 3..16",
          "[kernels][gemm_quant]") {
  uint32_t seed = 8000;
  for (int64_t m : {3, 5, 7, 8, 9, 13, 16}) {
    for (int64_t k : {int64_t{64}, int64_t{2080}, int64_t{5632}}) {
      for (int64_t g : {32, 64, 128}) {
        if (k % g != 0) continue;
        Case c;
        c.m = m;
        c.k = k;
        c.group = g;
        c.rows = {37, 16, 35};
        c.bias = {true, false, seed % 2 == 0};
        c.asym = seed % 2 == 1;
        c.scale_dtype = (seed / 2) % 2 == 0 ? DType::kF16 : DType::kBF16;
        c.x_fill = seed % 3 == 0 ? XFill::kSpike : XFill::kUniform;
        c.ldx_pad = seed % 4 == 0 ? 0 : 5;
        check_case(c, seed++);
      }
    }
    for (int64_t k : {int64_t{7}, int64_t{1001}, int64_t{5632}}) {
      Case c;
      c.dtype = DType::kF8E4M3;
      c.m = m;
      c.k = k;
      c.rows = {37, 16, 35};
      c.bias = {false, true, true};
      c.x_fill = seed % 3 == 0 ? XFill::kWide : XFill::kUniform;
      c.fp8_subnormal = seed % 5 == 0;
      c.daz_ftz = seed % 2 == 0;
      c.ldx_pad = seed % 4 == 0 ? 0 : 3;
      check_case(c, seed++);
    }
    Case c;  // SiLU-mul: 8 gate and 8 up rows per call
    c.m = m;
    c.k = 2080;
    c.group = 32;
    c.asym = m % 2 == 1;
    c.rows = {40, 40};
    c.bias = {true, false};
    c.ep = GemmEpilogue::kSiluMul;
    check_case(c, seed++);
    c.dtype = DType::kF8E4M3;
    c.k = 1001;
    check_case(c, seed++);
  }
}

// Batch invariance of int4 decode where batched rows take the AVX2 kernels (levels without
// AVX512-VNNI): m = 2 runs the one-row kernels, m = 3..16 the batched ones, which form the same
// x16 (x8 under kBf16: one prepared x for both), the same integer group sums and the same f32
// steps (gemm_quant_batch_avx2.cc), so every row of a batch equals, bit for bit, the same row
// multiplied alone. (Its accuracy against the reference is what the cases above check.)
TEST_CASE("gemm int4 batched decode on AVX2: each row equals its one-row result bit for bit",
          "[kernels][gemm_quant]") {
  IsaRestore restore;
  PrecisionRestore prec_restore;
  int levels = 0;
  for (Isa isa : supported_isas())
  for (GemmPrecision prec : {GemmPrecision::kSplitBf16, GemmPrecision::kBf16}) {
    REQUIRE(set_isa(isa));
    set_gemm_precision(prec);
    ++levels;
    if (has_avx512_vnni()) {
      // Batched decode runs the VNNI or AMX kernels there, never the AVX2 batch kernels (a
      // run selecting only such levels, SAMPAN_TEST_ISA=amx, checks that much).
      for (int64_t m = 1; m <= 16; ++m) CHECK_FALSE(gemm_detail::quant_on_avx2_batch(DType::kI4, m));
      continue;
    }
    uint32_t seed = 9000;
    for (int64_t g : {32, 64, 128}) {
      for (bool asym : {false, true}) {
        for (DType sd : {DType::kF16, DType::kBF16}) {
          const int64_t k = g == 32 ? 2080 : 2 * g + 4096;
          const int64_t n = 37;
          std::mt19937 rng(seed++);
          std::vector<uint8_t> data(n * k / 2);
          for (auto& v : data) v = static_cast<uint8_t>(rng());
          std::vector<uint16_t> scales(n * k / g);
          std::uniform_real_distribution<float> sdist(0.005f, 0.05f);
          for (auto& v : scales) {
            v = sd == DType::kBF16 ? f32_to_bf16(sdist(rng)) : f32_to_f16(sdist(rng));
          }
          std::vector<int8_t> zeros(n * k / g);
          for (auto& v : zeros) v = static_cast<int8_t>(static_cast<int>(rng() % 16) - 8);
          GemmWeights w;
          w.dtype = DType::kI4;
          w.k = k;
          w.n_blocks = 1;
          w.rows[0] = n;
          w.data[0] = data.data();
          w.scales[0] = scales.data();
          w.zeros[0] = asym ? zeros.data() : nullptr;
          w.scale_dtype = sd;
          w.group_size = g;
          std::normal_distribution<float> xd;
          for (int64_t m = 2; m <= 16; ++m) {
            INFO("isa=" << isa_name(isa) << " precision=" << static_cast<int>(prec)
                        << " group=" << g << (asym ? " asym" : " sym") << " m=" << m);
            std::vector<float> x(m * k), y(m * n), y1(n);
            for (auto& v : x) v = xd(rng) * (rng() % 64 == 0 ? 300.0f : 1.0f);
            SerialRunner serial;
            gemm(m, x.data(), k, w, GemmEpilogue::kStore, y.data(), n, serial);
            int64_t differ = 0;
            for (int64_t i = 0; i < m; ++i) {
              gemm(1, x.data() + i * k, k, w, GemmEpilogue::kStore, y1.data(), n, serial);
              differ += std::memcmp(y1.data(), y.data() + i * n, n * sizeof(float)) != 0;
            }
            CHECK(differ == 0);
          }
        }
      }
    }
  }
  // Every x86 CPU the project runs on has at least the AVX2 level.
  CHECK(levels > 0);
}

}  // namespace
}  // namespace sampan::cpu
