// cpu::gemm against a naive double-precision reference, on every instruction set this CPU has
// (AVX2, AVX-512, AVX512-BF16, AMX), for f32/f16/bf16 weights, both epilogues, 1..3 weight
// blocks, biases, padded strides and awkward sizes, with a serial runner and a two-thread pool;
// where a bf16 path runs (AMX, or the vdpbf16ps panels at avx512_bf16) under both precisions.
//
// Tolerances are relative to S = sum_k |x||w| of each output (the natural scale of a dot
// product's rounding error):
//  - FMA path (every f32 weight, and f16/bf16 below the AMX threshold): weights convert to f32
//    exactly, so only f32 accumulation error remains: about (k/16 + 16) * 2^-24 * S for the lane
//    sums plus the final reduction, under 1e-5 * S for every k here.
//  - The bf16 paths (AMX tiles, and at avx512_bf16 without AMX the vdpbf16ps panels for m >=
//    kPanelMinM, see uses_bf16_path) have the same contract; AMX stands for both below.
//  - AMX path, GemmPrecision::kSplitBf16 (the default): hi = bf16(x) is within 2^-8 |x| and
//    lo = bf16(x - hi) within 2^-8 |x - hi|, so |dx| <= 2^-16 |x|; each output is one f32
//    accumulator over the k products (hi and lo passes), at most about k roundings of 2^-24 of a
//    running sum bounded by S: we allow 2^-16 * S + k * 2^-24 * S.
//    f16 weights are still rounded to bf16 there (|dw| <= 2^-9 |w|), so f16 gets 2^-7 * S.
//  - AMX path, kBf16 (SAMPAN_GEMM_PRECISION=bf16): x is rounded to bf16 (8-bit significand,
//    round to nearest: |dx| <= 2^-8 |x|), so the error is up to 2^-8 * S plus f32 accumulation;
//    we allow twice that, 2^-7 * S (k = 1 cases reach ~0.7 of it). f16 weights are also rounded
//    to bf16 there (another 2^-8 relative), so f16 on AMX gets 2^-6 * S.
//  A dedicated case checks that the split path meets a tolerance the one-pass path fails.
//  - kSiluMul: y = silu(g) * u with g, u each within tol*S_g, tol*S_u; |silu'| <= 1.1 gives
//    |dy| <= 1.1 |u| tol S_g + |silu(g)| tol S_u (+ second order), plus 1e-6 |y| for the
//    vectorised exp.
// Padding between x rows is NaN and the output padding holds a sentinel, so reading x past k or
// writing y past n shows up; outside sanitizer builds every weight block is also surrounded by
// NaN, so using any weight past the end of a block poisons the result.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "engine/core/thread_pool.h"
#include "kernels/common/half.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/isa.h"
#include "tests/kernels/kernel_test_util.h"

namespace sampan::cpu {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kGuardWithNan = false;  // exact-size blocks so ASan sees any over-read
#else
constexpr bool kGuardWithNan = true;
#endif

constexpr float kSentinel = -12345.0f;

struct Case {
  DType dtype = DType::kBF16;
  int64_t m = 1, k = 1;
  std::vector<int64_t> rows;  // one entry per block
  std::vector<bool> bias;     // per block
  GemmEpilogue ep = GemmEpilogue::kStore;
  int64_t ldx_pad = 0, ldy_pad = 0;
  bool aligned = false;  // blocks start on a 64-byte boundary (as the engine's own buffers)
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "dtype="
    << (c.dtype == DType::kF32   ? "f32"
        : c.dtype == DType::kF16 ? "f16"
                                 : "bf16")
    << " m=" << c.m << " k=" << c.k << " rows=";
  for (size_t b = 0; b < c.rows.size(); ++b)
    s << (b ? "," : "") << c.rows[b] << (c.bias[b] ? "+b" : "");
  s << " ep=" << (c.ep == GemmEpilogue::kStore ? "store" : "silu_mul") << " ldx_pad=" << c.ldx_pad
    << " ldy_pad=" << c.ldy_pad << (c.aligned ? " aligned" : "");
  return s.str();
}

// One weight block in its storage type plus its exact f32 value.
struct Block {
  std::vector<uint8_t> storage;  // guard + rows*k elements + guard
  const void* data = nullptr;
  std::vector<float> value;  // [rows, k]
  std::vector<float> bias;   // [rows] or empty
};

Block make_block(DType dt, int64_t rows, int64_t k, bool bias, std::mt19937& rng,
                 bool aligned = false) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t es = dt == DType::kF32 ? 4 : 2;
  const int64_t guard = kGuardWithNan ? 64 : 0;
  // One element of offset: 16-bit weights are then only 2-byte aligned, as in a safetensors file.
  // `aligned`: 64 more bytes of lead, and the block moved back to the 64-byte boundary in them.
  const int64_t lead = (kGuardWithNan ? guard : 1) + (aligned ? 64 / es : 0);
  Block b;
  b.storage.resize((lead + rows * k + guard) * es);
  const uint16_t nan16 = dt == DType::kF16 ? 0x7e00 : 0x7fc0;
  const float nan32 = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < lead + rows * k + guard; ++i) {
    if (es == 2)
      std::memcpy(b.storage.data() + i * 2, &nan16, 2);
    else
      std::memcpy(b.storage.data() + i * 4, &nan32, 4);
  }
  uint8_t* base = b.storage.data() + lead * es;
  if (aligned) base -= reinterpret_cast<uintptr_t>(base) % 64;
  b.data = base;
  b.value.resize(rows * k);
  for (int64_t i = 0; i < rows * k; ++i) {
    const float v = dist(rng);
    if (dt == DType::kF32) {
      std::memcpy(base + i * 4, &v, 4);
      b.value[i] = v;
    } else {
      const uint16_t h = dt == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
      std::memcpy(base + i * 2, &h, 2);
      b.value[i] = dt == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  if (bias) {
    b.bias.resize(rows);
    for (auto& v : b.bias) v = dist(rng);
  }
  return b;
}

std::vector<Isa> isas_to_test() { return supported_isas(); }

double split_tolerance(int64_t k) { return std::ldexp(1.0, -16) + std::ldexp(double(k), -24); }

// The split path's typical error bound: the k rounding errors of the accumulator are unbiased
// (round to nearest even) and independent on random data, so they grow like sqrt(k), not k;
// 4 * sqrt(k) * 2^-24 leaves ~4 standard deviations. The worst case k * 2^-24 grows past the
// one-pass path's own (also sqrt(k)-like) error at large k, so it could not tell the two apart.
double split_typical_tolerance(int64_t k) {
  return std::ldexp(1.0, -16) + 4.0 * std::sqrt(double(k)) * std::ldexp(1.0, -24);
}

// Whether cpu::gemm multiplies in bf16 at `isa` under precision p (the contract in gemm_cpu.h):
// AMX for 16-bit weights from kAmxMinM rows; without AMX, at avx512_bf16, the vdpbf16ps panels
// from kPanelMinM rows for 16-bit weights with kBf16 (kSplitBf16 keeps the f32 panels there:
// no faster, less exact). f32 weights stay f32 everywhere.
bool uses_bf16_path(Isa isa, GemmPrecision p, DType dt, int64_t m) {
  if (dt == DType::kF32) return false;
  if (isa_includes(isa, Isa::kAmx)) return m >= gemm_detail::kAmxMinM;
  return isa_includes(isa, Isa::kAvx512Bf16) && m >= gemm_detail::kPanelMinM &&
         p == GemmPrecision::kBf16;
}

double relative_tolerance(Isa isa, GemmPrecision p, DType dt, int64_t m, int64_t k) {
  if (!uses_bf16_path(isa, p, dt, m)) return 1e-5;
  if (p == GemmPrecision::kSplitBf16) {
    return dt == DType::kF16 ? std::ldexp(1.0, -7) : split_tolerance(k);
  }
  return dt == DType::kF16 ? std::ldexp(1.0, -6) : std::ldexp(1.0, -7);
}

// Restores the process-wide GEMM precision however the test exits.
struct PrecisionRestore {
  GemmPrecision saved = gemm_precision();
  ~PrecisionRestore() { set_gemm_precision(saved); }
};

// The cases of this file run the vdpbf16ps panels wherever a level has AVX512-BF16, so that they
// cover them on every CPU; the automatic choice (Intel cores keep the f32 panels:
// bf16_panels_preferred, gemm_cpu.h) has its own case at the end.
const bool kBf16PanelsForced = (set_bf16_panels_policy(Bf16PanelsPolicy::kOn), true);

void check_case(const Case& c, uint32_t seed) {
  INFO(describe(c));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int n_blocks = static_cast<int>(c.rows.size());
  std::vector<Block> blocks;
  GemmWeights w;
  w.dtype = c.dtype;
  w.k = c.k;
  w.n_blocks = n_blocks;
  for (int b = 0; b < n_blocks; ++b) {
    blocks.push_back(make_block(c.dtype, c.rows[b], c.k, c.bias[b], rng, c.aligned));
  }
  for (int b = 0; b < n_blocks; ++b) {
    w.data[b] = blocks[b].data;
    w.rows[b] = c.rows[b];
    w.bias[b] = c.bias[b] ? blocks[b].bias.data() : nullptr;
  }
  const int64_t ldx = c.k + c.ldx_pad;
  // Exactly up to the end of the last row, so a read past it is out of bounds for ASan.
  std::vector<float> x((c.m - 1) * ldx + c.k, std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.k; ++j) x[i * ldx + j] = dist(rng);
  }

  // Reference: every row of the concatenated weight, in double, with S = sum |x||w|.
  const int64_t n_total = w.n();
  std::vector<double> dot(c.m * n_total), mag(c.m * n_total);
  int64_t col = 0;
  for (int b = 0; b < n_blocks; ++b) {
    for (int64_t r = 0; r < c.rows[b]; ++r, ++col) {
      const float* wr = blocks[b].value.data() + r * c.k;
      for (int64_t i = 0; i < c.m; ++i) {
        double s = c.bias[b] ? blocks[b].bias[r] : 0.0, a = std::fabs(s);
        for (int64_t j = 0; j < c.k; ++j) {
          s += static_cast<double>(x[i * ldx + j]) * wr[j];
          a += std::fabs(static_cast<double>(x[i * ldx + j]) * wr[j]);
        }
        dot[i * n_total + col] = s;
        mag[i * n_total + col] = a;
      }
    }
  }
  const bool silu = c.ep == GemmEpilogue::kSiluMul;
  const int64_t n_out = silu ? c.rows[0] : n_total;
  const int64_t ldy = n_out + c.ldy_pad;

  IsaRestore restore;
  PrecisionRestore precision_restore;
  ThreadPool pool(2);
  SerialRunner serial;
  // (level, precision) runs: only the bf16 paths read the precision, elsewhere one run does.
  std::vector<std::pair<Isa, GemmPrecision>> runs;
  for (Isa isa : isas_to_test()) {
    runs.push_back({isa, GemmPrecision::kSplitBf16});
    if (uses_bf16_path(isa, GemmPrecision::kSplitBf16, c.dtype, c.m) ||
        uses_bf16_path(isa, GemmPrecision::kBf16, c.dtype, c.m)) {
      runs.push_back({isa, GemmPrecision::kBf16});
    }
  }
  for (const auto& [isa, p] : runs) {
    REQUIRE(set_isa(isa));
    set_gemm_precision(p);
    const double tol = relative_tolerance(isa, p, c.dtype, c.m, c.k);
    for (TaskRunner* runner :
         {static_cast<TaskRunner*>(&serial), static_cast<TaskRunner*>(&pool)}) {
      INFO("isa=" << isa_name(isa)
                  << " precision=" << (p == GemmPrecision::kBf16 ? "bf16" : "split_bf16")
                  << " threads=" << runner->concurrency());
      std::vector<float> y(c.m * ldy, kSentinel);
      gemm(c.m, x.data(), ldx, w, c.ep, y.data(), ldy, *runner);
      check_gemm_output(y, c.m, ldy, n_out, n_total, silu, dot,
                        [&](int64_t idx) { return tol * mag[idx]; }, kSentinel);
    }
  }
}

const DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

TEST_CASE("gemm: one block over awkward m, n, k", "[kernels][gemm]") {
  // Every m in {1,2,3,5,8,17,33,64,130}, n in {1,15,17,64,100,769} and k in
  // {1,7,31,32,33,100,257,1030} appears at least once, on both sides of the AMX threshold and
  // of the k-chunk and stripe sizes, plus the m where the FMA path changes kernels.
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 1, 1},
                          {2, 15, 7},
                          {3, 17, 31},
                          {5, 64, 32},
                          {8, 100, 33},
                          {17, 769, 100},
                          {33, 17, 257},
                          {64, 100, 1030},
                          {130, 64, 257},
                          {1, 769, 1030},
                          {8, 769, 257},
                          {17, 15, 1030},
                          {130, 17, 33},
                          {64, 1, 100},
                          {130, 1, 7},
                          {33, 64, 1},
                          // m between the single-call dot kernels and the panel kernels
                          // (several m-groups over k-chunks), and the narrow/wide boundary.
                          {10, 64, 1030},
                          {11, 15, 33},
                          {4, 17, 257},
                          {6, 100, 31}};
  uint32_t seed = 1;
  for (DType dt : kDtypes) {
    for (const Shape& s : shapes) {
      Case c;
      c.dtype = dt;
      c.m = s.m;
      c.k = s.k;
      c.rows = {s.n};
      c.bias = {seed % 2 == 0};
      c.ldx_pad = seed % 3 == 0 ? 0 : 3;
      c.ldy_pad = seed % 4 == 0 ? 0 : 5;
      check_case(c, seed++);
    }
  }
}

TEST_CASE("gemm: batched decode on AMX, x tiles stacked and rows read in place",
          "[kernels][gemm]") {
  // On AMX, from kAmxMinM to 8 rows of x the hi and lo parts of x share one tile (kSplitBf16,
  // kStackedMaxM in gemm_amx.cc), and up to 32 rows (one m-block pair) a unit of 64-byte aligned
  // bf16 rows with k a multiple of 32 and whole 16-row groups loads its A tiles from the rows
  // themselves; a short group, an unaligned block, f16 or k % 32 != 0 packs them. Every case
  // runs on every level (and on both sides of these conditions where the CPU has AMX).
  struct Shape {
    int64_t m;
    std::vector<int64_t> rows;
    int64_t k;
    GemmEpilogue ep;
  };
  const Shape shapes[] = {{6, {48}, 64, GemmEpilogue::kStore},
                          {7, {40, 24}, 96, GemmEpilogue::kStore},
                          {8, {64}, 2048, GemmEpilogue::kStore},
                          {8, {32}, 100, GemmEpilogue::kStore},
                          {8, {32, 32}, 256, GemmEpilogue::kSiluMul},
                          {8, {20, 20}, 64, GemmEpilogue::kSiluMul},
                          {9, {32}, 320, GemmEpilogue::kStore},
                          {16, {16, 48}, 64, GemmEpilogue::kStore},
                          {17, {64}, 128, GemmEpilogue::kStore},
                          {32, {32, 16}, 1056, GemmEpilogue::kStore},
                          {24, {48, 48}, 160, GemmEpilogue::kSiluMul}};
  uint32_t seed = 300;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const Shape& s : shapes) {
      for (bool aligned : {true, false}) {
        Case c;
        c.dtype = dt;
        c.m = s.m;
        c.k = s.k;
        c.rows = s.rows;
        c.bias.assign(s.rows.size(), seed % 2 == 0);
        c.ep = s.ep;
        c.ldx_pad = seed % 3 == 0 ? 0 : 3;
        c.ldy_pad = seed % 4 == 0 ? 0 : 5;
        c.aligned = aligned;
        check_case(c, seed++);
      }
    }
  }
}

TEST_CASE("gemm: two and three blocks with per-block bias", "[kernels][gemm]") {
  uint32_t seed = 100;
  for (DType dt : kDtypes) {
    for (int64_t m : {1, 3, 17, 64}) {
      Case c;
      c.dtype = dt;
      c.m = m;
      c.k = m == 17 ? 257 : 100;
      // q/k/v-like fusion with block sizes that are not multiples of 16 (AMX groups) or 4 (FMA
      // row-blocks), so groups and row-blocks end inside each block.
      c.rows = {40, 17, 23};
      c.bias = {true, false, true};
      c.ldx_pad = 1;
      c.ldy_pad = 2;
      check_case(c, seed++);
      c.rows = {64, 33};
      c.bias = {false, true};
      check_case(c, seed++);
    }
  }
}

TEST_CASE("gemm: SiLU-mul epilogue", "[kernels][gemm]") {
  uint32_t seed = 200;
  struct Shape {
    int64_t m, f, k;
  };
  const Shape shapes[] = {{1, 1, 7},     {3, 17, 100}, {8, 100, 33},  {33, 17, 257},
                          {64, 100, 31}, {5, 769, 32}, {130, 15, 100}};
  for (DType dt : kDtypes) {
    for (const Shape& s : shapes) {
      Case c;
      c.dtype = dt;
      c.m = s.m;
      c.k = s.k;
      c.rows = {s.f, s.f};
      c.bias = {seed % 2 == 0, seed % 3 != 0};
      c.ep = GemmEpilogue::kSiluMul;
      c.ldx_pad = seed % 2 == 0 ? 0 : 9;
      c.ldy_pad = 3;
      check_case(c, seed++);
    }
  }
}

TEST_CASE("gemm: several k-chunks and m-chunks on the blocked paths", "[kernels][gemm]") {
  // k = 2100 spans more than one AMX k-chunk (2048) and the FMA k-chunk (512); m = 520 needs
  // more than one AMX m-chunk at that k.
  uint32_t seed = 300;
  for (DType dt : {DType::kF16, DType::kBF16}) {
    Case c;
    c.dtype = dt;
    c.m = 520;
    c.k = 2100;
    c.rows = {17, 16};
    c.bias = {true, false};
    c.ldy_pad = 1;
    check_case(c, seed++);
    c.m = 40;
    c.rows = {33, 33};
    c.bias = {true, true};
    c.ep = GemmEpilogue::kSiluMul;
    check_case(c, seed++);
  }
}

TEST_CASE("gemm: decode batches whose x outgrows L1 take their calls in groups over k-chunks",
          "[kernels][gemm]") {
  // m = 5..8 on the wide dot kernels with m * k * 4 bytes above 48 KiB (gemm_cpu.cc
  // kXGroupAbove): calls grouped by 8 over equal k-chunks of at most 16 KiB of x, with a short
  // last chunk (k not a multiple of 32), stripes cut short (n not a multiple of 8 or of 64),
  // several blocks with biases and the SiLU-mul epilogue.
  struct Shape {
    int64_t m, k;
    std::vector<int64_t> rows;
    GemmEpilogue ep;
  };
  const Shape shapes[] = {{8, 1601, {133}, GemmEpilogue::kStore},
                          {5, 2500, {70, 9}, GemmEpilogue::kStore},
                          {6, 4100, {3}, GemmEpilogue::kStore},
                          {7, 1810, {41, 41}, GemmEpilogue::kSiluMul},
                          {8, 2048, {300, 17, 5}, GemmEpilogue::kStore}};
  uint32_t seed = 700;
  for (DType dt : kDtypes) {
    for (const Shape& sh : shapes) {
      Case c;
      c.dtype = dt;
      c.m = sh.m;
      c.k = sh.k;
      c.rows = sh.rows;
      c.bias.assign(sh.rows.size(), false);
      for (size_t b = 0; b < sh.rows.size(); ++b) c.bias[b] = (seed + b) % 2 == 0;
      c.ep = sh.ep;
      c.ldx_pad = seed % 2 == 0 ? 0 : 3;
      check_case(c, seed++);
    }
  }
}

// Block w ([n, k] of dtype dt) as the weights of a one-block GEMM.
GemmWeights one_block(const Block& w, DType dt, int64_t n, int64_t k) {
  GemmWeights gw;
  gw.dtype = dt;
  gw.k = k;
  gw.n_blocks = 1;
  gw.data[0] = w.data;
  gw.rows[0] = n;
  return gw;
}

// max over outputs of |y - exact| / sum_k |x||w| for one GEMM (bf16 weights, kStore).
// x: [m, ldx] f32; w: [n, k] bf16 values as f32 (exact); wq: the same as stored bf16.
double worst_relative_error(int64_t m, int64_t n, int64_t k, const std::vector<float>& x,
                                int64_t ldx, const Block& w, TaskRunner& runner,
                                DType dtype = DType::kBF16) {
  const GemmWeights gw = one_block(w, dtype, n, k);
  const int64_t ldy = n + 3;
  std::vector<float> y(m * ldy, kSentinel);
  gemm(m, x.data(), ldx, gw, GemmEpilogue::kStore, y.data(), ldy, runner);
  double worst = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0, a = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p = static_cast<double>(x[i * ldx + kk]) * w.value[j * k + kk];
        s += p;
        a += std::fabs(p);
      }
      const double got = y[i * ldy + j];
      const double e = std::isfinite(got) ? std::fabs(got - s) / (a + 1e-300)
                                          : std::numeric_limits<double>::infinity();
      worst = std::max(worst, e);
    }
  }
  return worst;
}

// The levels with a bf16 prefill path (AMX tiles; the vdpbf16ps panels) that this run covers.
std::vector<Isa> bf16_levels_under_test() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kAmx, Isa::kAvx512Bf16}) {
    if (isa_under_test(isa)) out.push_back(isa);
  }
  return out;
}

TEST_CASE("gemm: split precision keeps f32 activations where one pass cannot",
          "[kernels][gemm]") {
  // kSplitBf16 runs on AMX tiles (hi + lo x) or, at avx512_bf16 without AMX, on the exact f32
  // panels; kBf16 runs on AMX tiles or the vdpbf16ps panels. Either way the one-pass error must
  // be well above the split tolerance and the split error below it.
  IsaRestore isa_restore;
  PrecisionRestore precision_restore;
  struct Shape {
    int64_t m, n, k, ldx_pad;
  };
  // All m >= kAmxMinM (the AMX path); k = 1 and 7 are a single partial k-step, 5125 several
  // k-chunks; m = 769 several m-blocks with a partial last one. m = 12 and 13 with odd k are the
  // first m of the panel path, with a padded last pair.
  const Shape shapes[] = {{6, 17, 1, 0},      {7, 33, 7, 5},     {12, 17, 1, 0},
                          {13, 33, 7, 5},     {17, 769, 33, 1},  {33, 64, 257, 0},
                          {130, 100, 1030, 7}, {40, 17, 5125, 2}, {769, 33, 100, 3}};
  ThreadPool pool(2);
  for (Isa isa : bf16_levels_under_test()) {
    REQUIRE(set_isa(isa));
    uint32_t seed = 500;
    for (const Shape& sh : shapes) {
      if (!uses_bf16_path(isa, GemmPrecision::kBf16, DType::kBF16, sh.m)) continue;
      INFO("isa=" << isa_name(isa) << " m=" << sh.m << " n=" << sh.n << " k=" << sh.k
                  << " ldx_pad=" << sh.ldx_pad);
      std::mt19937 rng(seed++);
      const Block w = make_block(DType::kBF16, sh.n, sh.k, false, rng);
      // Activations over several orders of magnitude (as after a norm with outlier channels),
      // so the lo part matters at every scale.
      std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
      std::uniform_int_distribution<int> expo(-6, 6);
      const int64_t ldx = sh.k + sh.ldx_pad;
      std::vector<float> x((sh.m - 1) * ldx + sh.k, std::numeric_limits<float>::quiet_NaN());
      for (int64_t i = 0; i < sh.m; ++i) {
        for (int64_t j = 0; j < sh.k; ++j) x[i * ldx + j] = std::ldexp(mant(rng), expo(rng));
      }
      set_gemm_precision(GemmPrecision::kSplitBf16);
      const double split = worst_relative_error(sh.m, sh.n, sh.k, x, ldx, w, pool);
      set_gemm_precision(GemmPrecision::kBf16);
      const double one_pass = worst_relative_error(sh.m, sh.n, sh.k, x, ldx, w, pool);
      const double tol = split_typical_tolerance(sh.k);
      INFO("split error " << split << ", one-pass error " << one_pass << ", tolerance " << tol);
      CHECK(split <= tol);
      CHECK(one_pass > tol);  // the tolerance is one the one-pass path cannot meet
      CHECK(one_pass > 8 * split);
      CHECK(one_pass <= std::ldexp(1.0, -7));  // and the one-pass path meets its own
    }
  }
}

TEST_CASE("gemm: kF32, process-wide or scoped to a thread, keeps 16-bit weights and x exact",
          "[kernels][gemm]") {
  // On AMX CPUs the default rounds f16 weights to bf16 and splits x; kF32 takes the FMA panels,
  // whose only error is f32 summation: at most (k + 1) * 2^-24 of sum |x w| (the weights
  // convert to f32 exactly).
  PrecisionRestore precision_restore;
  ThreadPool pool(2);
  struct Shape {
    int64_t m, n, k;
  };
  uint32_t seed = 900;
  for (DType dt : {DType::kF16, DType::kBF16}) {
    for (const Shape& sh : {Shape{6, 17, 33}, Shape{40, 70, 1030}, Shape{130, 33, 257}}) {
      INFO((dt == DType::kF16 ? "f16" : "bf16") << " m=" << sh.m << " n=" << sh.n << " k=" << sh.k);
      std::mt19937 rng(seed++);
      const Block w = make_block(dt, sh.n, sh.k, false, rng);
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      std::vector<float> x(sh.m * sh.k);
      for (float& v : x) v = d(rng);
      const double bound = static_cast<double>(sh.k + 1) * 0x1p-24;
      set_gemm_precision(GemmPrecision::kSplitBf16);
      const double by_default = worst_relative_error(sh.m, sh.n, sh.k, x, sh.k, w, pool, dt);
      double scoped = 0;
      {
        const ScopedGemmPrecision exact(GemmPrecision::kF32);
        CHECK(gemm_precision() == GemmPrecision::kF32);
        scoped = worst_relative_error(sh.m, sh.n, sh.k, x, sh.k, w, pool, dt);
        CHECK(scoped <= bound);
        {
          const ScopedGemmPrecision inner(GemmPrecision::kBf16);  // nests
          CHECK(gemm_precision() == GemmPrecision::kBf16);
        }
        CHECK(gemm_precision() == GemmPrecision::kF32);
        // Another thread keeps the process-wide choice.
        GemmPrecision seen = GemmPrecision::kF32;
        std::thread([&] { seen = gemm_precision(); }).join();
        CHECK(seen == GemmPrecision::kSplitBf16);
      }
      CHECK(gemm_precision() == GemmPrecision::kSplitBf16);
      set_gemm_precision(GemmPrecision::kF32);
      CHECK(worst_relative_error(sh.m, sh.n, sh.k, x, sh.k, w, pool, dt) <= bound);
      // Where the default does round (f16 weights on AMX tiles), the difference is visible.
      INFO("default " << by_default << ", kF32 " << scoped);
      if (has_amx() && dt == DType::kF16) CHECK(by_default > 16 * scoped);
    }
  }
}

TEST_CASE("gemm: a row's result hardly depends on the batch it runs in", "[kernels][gemm]") {
  // The serving symptom: one sequence alone (m = 1, f32 FMA path) against the same row inside a
  // batch of 40 (AMX path, or the f32 panels). Both are within their tolerance of the exact
  // value, so they differ by at most the sum: 1e-5 * S (FMA) + split_tolerance(k) * S.
  IsaRestore isa_restore;
  PrecisionRestore precision_restore;
  set_gemm_precision(GemmPrecision::kSplitBf16);
  const int64_t m = 40, n = 100, k = 1030;
  std::mt19937 rng(600);
  const Block w = make_block(DType::kBF16, n, k, false, rng);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(m * k);
  for (float& v : x) v = dist(rng);
  const GemmWeights gw = one_block(w, DType::kBF16, n, k);
  SerialRunner serial;
  for (Isa isa : isas_to_test()) {
    REQUIRE(set_isa(isa));
    std::vector<float> batch(m * n), alone(n);
    gemm(m, x.data(), k, gw, GemmEpilogue::kStore, batch.data(), n, serial);
    const int64_t row = 23;
    gemm(1, x.data() + row * k, k, gw, GemmEpilogue::kStore, alone.data(), n, serial);
    const double tol = 1e-5 + split_tolerance(k);
    for (int64_t j = 0; j < n; ++j) {
      double a = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        a += std::fabs(double(x[row * k + kk]) * w.value[j * k + kk]);
      }
      INFO("isa=" << isa_name(isa) << " column " << j);
      CHECK(std::fabs(double(batch[row * n + j]) - alone[j]) <= tol * a);
    }
  }
}

TEST_CASE("gemm: bf16 paths keep infinite activations infinite", "[kernels][gemm]") {
  IsaRestore isa_restore;
  PrecisionRestore precision_restore;
  // x rows: one +inf element among ones; w = +1 / -1 rows: y = +inf / -inf, never NaN (inf - hi
  // would be NaN if the residual of an infinite element were not zeroed). m = 16 and odd k:
  // on the panel path too, with a padded last pair.
  const int64_t m = 16, k = 41;
  std::vector<float> x(m * k, 1.0f);
  for (int64_t i = 0; i < m; ++i) x[i * k + (i * 5) % k] = std::numeric_limits<float>::infinity();
  std::vector<uint16_t> wdata(2 * k, 0x3f80);  // bf16 +1.0
  for (int64_t j = k; j < 2 * k; ++j) wdata[j] = 0xbf80;  // bf16 -1.0
  GemmWeights gw;
  gw.dtype = DType::kBF16;
  gw.k = k;
  gw.n_blocks = 1;
  gw.data[0] = wdata.data();
  gw.rows[0] = 2;
  SerialRunner serial;
  for (Isa isa : bf16_levels_under_test()) {
    REQUIRE(set_isa(isa));
    for (GemmPrecision p : {GemmPrecision::kSplitBf16, GemmPrecision::kBf16}) {
      set_gemm_precision(p);
      INFO("isa=" << isa_name(isa)
                  << " precision=" << (p == GemmPrecision::kBf16 ? "bf16" : "split"));
      std::vector<float> y(m * 2);
      gemm(m, x.data(), k, gw, GemmEpilogue::kStore, y.data(), 2, serial);
      for (int64_t i = 0; i < m; ++i) {
        CHECK(y[i * 2] == std::numeric_limits<float>::infinity());
        CHECK(y[i * 2 + 1] == -std::numeric_limits<float>::infinity());
      }
    }
  }
}

TEST_CASE("gemm: kBf16 without AMX takes the vdpbf16ps panels only where they are faster",
          "[kernels][gemm]") {
  REQUIRE(kBf16PanelsForced);
  IsaRestore isa_restore;
  PrecisionRestore precision_restore;
  struct PolicyRestore {
    Bf16PanelsPolicy saved = bf16_panels_policy();
    ~PolicyRestore() { set_bf16_panels_policy(saved); }
  } policy_restore;
  ThreadPool pool(2);
  std::mt19937 rng(900);
  const int64_t m = gemm_detail::kPanelMinM + 7, n = 40, k = 100;
  const Block w = make_block(DType::kBF16, n, k, false, rng);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(m * k);
  for (float& v : x) v = dist(rng);
  const GemmWeights gw = one_block(w, DType::kBF16, n, k);
  auto run = [&](GemmPrecision p) {
    set_gemm_precision(p);
    std::vector<float> y(m * n);
    gemm(m, x.data(), k, gw, GemmEpilogue::kStore, y.data(), n, pool);
    return y;
  };
  for (Isa isa : supported_isas()) {
    REQUIRE(set_isa(isa));
    INFO("isa=" << isa_name(isa));
    if (!isa_includes(isa, Isa::kAvx512Bf16)) {
      set_bf16_panels_policy(Bf16PanelsPolicy::kOn);
      CHECK_FALSE(bf16_panels_preferred());  // no vdpbf16ps below the level
      continue;
    }
    set_bf16_panels_policy(Bf16PanelsPolicy::kAuto);
    CHECK(bf16_panels_preferred() == !cpu_features().dpbf16_half_rate);
    if (isa_includes(isa, Isa::kAmx)) continue;  // AMX tiles whatever the policy
    // Off (the automatic choice on Intel cores): kBf16 keeps the f32 panels, so its result is
    // kF32's, bit for bit; on, the panels round x to bf16 and the result differs.
    const std::vector<float> exact = run(GemmPrecision::kF32);
    set_bf16_panels_policy(Bf16PanelsPolicy::kOff);
    CHECK_FALSE(bf16_panels_preferred());
    CHECK(run(GemmPrecision::kBf16) == exact);
    set_bf16_panels_policy(Bf16PanelsPolicy::kOn);
    CHECK(bf16_panels_preferred());
    CHECK(run(GemmPrecision::kBf16) != exact);
  }
}

TEST_CASE("gemm: m == 0 writes nothing", "[kernels][gemm]") {
  const std::vector<uint16_t> wdata(4 * 8, 0x3f80);  // bf16 1.0
  GemmWeights w;
  w.dtype = DType::kBF16;
  w.k = 8;
  w.n_blocks = 1;
  w.data[0] = wdata.data();
  w.rows[0] = 4;
  std::vector<float> y(4, kSentinel);
  SerialRunner serial;
  gemm(0, nullptr, 8, w, GemmEpilogue::kStore, y.data(), 4, serial);
  for (float v : y) CHECK(v == kSentinel);
}

}  // namespace
}  // namespace sampan::cpu
