// cpu::gemm with GGUF block-type weights (dtype kU8, every supported ggml_type) against
// dequantize_ggml_row (itself held bit for bit to gguf's reference by test_ggml_dequant.cc) and
// a double-precision dot product. Every instruction set this CPU has, serial / two-thread /
// wide-serial runners, both epilogues, 1..3 blocks, biases, padded strides, k of one, two,
// three and many blocks, decode (m < 32: in-register dequantization) and prefill (m >= 32:
// dequantized f32 chunks through the plain GEMM).
//
// Tolerances, from gemm_ggml.h: the kernels form exactly the reference's f32 weights and keep x
// in f32, so |y - y_exact| <= (k / 8 + 16) * 2^-24 * M at decode and (k + 16) * 2^-24 * M at
// f32 prefill (the plain f32 GEMM's panel kernels sum each output's k products in one lane),
// with M = |bias| + sum |x| |w|. Prefill in bf16 (AMX levels, or AVX512-BF16 with kBf16:
// weights and x rounded to bf16) is allowed 2^-7 M; the f32 prefill bound is also checked at
// every level with GemmPrecision::kF32. Decode kernels that round x to 16 bits per 256 elements
// (the table's x16 flag) are allowed
// kGgmlDecodeXError * sum_b absmax_b(x) sum_b |w| + (k / 8 + 16) 2^-24 M',
// M' = |bias| + sum |x| (|w1| + |w2|) for w = w1 - w2 split into scale and min parts (w2 = 0
// for types without a min, e.g. Q4_0 / Q8_0), the 256-element blocks of x counted from element
// 0 (a last partial block, k % 256 elements, has its own absmax: k = 32, 96, 2080 cover it),
// plus absmax_b sum_b |w| for each block taken as zero (absmax below 2^-100). The x16 cases add
// x with an outlier, all zero, tiny (1e-30) or holding a NaN or an infinity (its row's outputs
// must be NaN; +-inf allowed for an infinity where the kernel keeps x in f32). Decode also runs
// at GemmPrecision::kBf16 where the level has an x8 kernel for the type (Q4_K, Q5_K, Q6_K on
// AVX512-VNNI; Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS below AVX-512), held to the same bound with
// kX8Error.
// kSiluMul: as test_gemm_quant.cc, |dy| <= 1.1 |u| eg + |silu(g)| eu + 1e-6 |y| with eg and eu
// the allowed errors of the two dot products.
// Weight blocks are allocated to their exact size at an address 2 mod 16 (the alignment an
// mmapped GGUF guarantees), so ASan (Sanitize build) reports any read past a block, and y's
// padding holds a sentinel.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <vector>

#include "kernels/common/ggml_type.h"
#include "kernels/common/half.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/gemm_ggml.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/ggml_dequant.h"
#include "kernels/cpu/isa.h"
#include "tests/kernels/kernel_test_util.h"

namespace sampan::cpu {
namespace {

constexpr float kSentinel = -12345.0f;

struct TypeInfo {
  GgmlType type;
  std::vector<int> scale_offsets;  // byte offsets of the f16 scale fields in a block
};

const std::vector<TypeInfo>& all_types() {
  static const std::vector<TypeInfo> types = {
      {GgmlType::kQ8_0, {0}},    {GgmlType::kQ4_0, {0}},      {GgmlType::kQ4_K, {0, 2}},
      {GgmlType::kQ6_K, {208}},  {GgmlType::kQ4_1, {0, 2}},   {GgmlType::kQ5_0, {0}},
      {GgmlType::kQ5_1, {0, 2}}, {GgmlType::kQ2_K, {80, 82}}, {GgmlType::kQ3_K, {108}},
      {GgmlType::kQ5_K, {0, 2}}, {GgmlType::kIQ4_NL, {0}},    {GgmlType::kIQ4_XS, {0}},
      {GgmlType::kMXFP4, {}},    {GgmlType::kTQ2_0, {64}},    {GgmlType::kTQ1_0, {52}},
  };
  return types;
}

// How x is filled: uniform in [-1, 1]; the same with one element per row times 1000 (its
// 256-element group's other elements keep few bits at x16); zero; uniform times 1e-30 (above the
// x16 kernels' 2^-100 floor); uniform with one NaN, or one infinity, in row m / 2.
enum class XFill { kUniform, kOutlier, kZero, kTiny, kNaN, kInf };

struct Case {
  const TypeInfo* type = nullptr;
  int64_t m = 1, k = 256;
  std::vector<int64_t> rows;  // per block
  std::vector<bool> bias;     // per block
  GemmEpilogue ep = GemmEpilogue::kStore;
  int64_t ldx_pad = 0, ldy_pad = 0;
  XFill x_fill = XFill::kUniform;
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << ggml_type_name(c.type->type) << " m=" << c.m << " k=" << c.k << " rows=";
  for (size_t b = 0; b < c.rows.size(); ++b) {
    s << (b ? "," : "") << c.rows[b] << (c.bias[b] ? "+b" : "");
  }
  s << " ep=" << (c.ep == GemmEpilogue::kStore ? "store" : "silu_mul") << " ldx_pad=" << c.ldx_pad
    << " ldy_pad=" << c.ldy_pad << " x_fill=" << static_cast<int>(c.x_fill);
  return s.str();
}

struct Block {
  std::vector<uint8_t> data;  // 2 bytes of lead (address 2 mod 16), then exactly the rows
  std::vector<float> value;   // [rows, k] dequantize_ggml_row
  // [rows, k] |w1| + |w2| for w = w1 - w2 split into its scale and min parts (the rows decoded
  // with the min field, then the scale field, zeroed); |w| for types without a min.
  std::vector<float> split_mag;
  std::vector<float> bias;
};

Block make_block(const Case& c, int64_t rows, bool bias, std::mt19937& rng) {
  const GgmlType t = c.type->type;
  const int64_t row_bytes = ggml_row_bytes(t, c.k), bs = ggml_block_size(t);
  const int64_t type_bytes = ggml_type_size(t);
  Block b;
  b.data.resize(2 + rows * row_bytes);
  for (size_t i = 2; i < b.data.size(); ++i) b.data[i] = static_cast<uint8_t>(rng());
  // Scale fields: finite, either sign, 2^-10 .. 2^-4, so outputs are moderate.
  std::uniform_real_distribution<float> e(-10.0f, -4.0f);
  for (int64_t blk = 0; blk < rows * (c.k / bs); ++blk) {
    for (int off : c.type->scale_offsets) {
      const float v = (rng() & 1 ? -1.0f : 1.0f) * std::exp2(e(rng));
      const uint16_t h = f32_to_f16(v);
      std::memcpy(b.data.data() + 2 + blk * type_bytes + off, &h, 2);
    }
  }
  if (t == GgmlType::kMXFP4) {  // its E8M0 scale byte: 2^(e - 128) in 2^-10 .. 2^-3
    for (int64_t blk = 0; blk < rows * (c.k / bs); ++blk) {
      b.data[static_cast<size_t>(2 + blk * type_bytes)] = static_cast<uint8_t>(118 + rng() % 8);
    }
  }
  b.value.resize(rows * c.k);
  b.split_mag.resize(rows * c.k);
  const std::vector<int>& fields = c.type->scale_offsets;
  std::vector<std::vector<uint8_t>> parts;  // the rows with one scale field zeroed
  if (fields.size() == 2) {
    for (int zeroed : {fields[1], fields[0]}) {
      parts.push_back(b.data);
      for (int64_t blk = 0; blk < rows * (c.k / bs); ++blk) {
        std::memset(parts.back().data() + 2 + blk * type_bytes + zeroed, 0, 2);
      }
    }
  }
  std::vector<float> part(c.k);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_ggml_row(t, b.data.data() + 2 + r * row_bytes, b.value.data() + r * c.k, c.k);
    for (int64_t j = 0; j < c.k; ++j) b.split_mag[r * c.k + j] = std::fabs(b.value[r * c.k + j]);
    if (!parts.empty()) {
      for (int64_t j = 0; j < c.k; ++j) b.split_mag[r * c.k + j] = 0.0f;
      for (const auto& pd : parts) {
        dequantize_ggml_row(t, pd.data() + 2 + r * row_bytes, part.data(), c.k);
        for (int64_t j = 0; j < c.k; ++j) b.split_mag[r * c.k + j] += std::fabs(part[j]);
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

void check_case(const Case& c, uint32_t seed) {
  INFO(describe(c));
  std::mt19937 rng(seed);
  const int n_blocks = static_cast<int>(c.rows.size());
  std::vector<Block> blocks;
  for (int b = 0; b < n_blocks; ++b) blocks.push_back(make_block(c, c.rows[b], c.bias[b], rng));
  GemmWeights w;
  w.dtype = DType::kU8;
  w.ggml_type = c.type->type;
  w.k = c.k;
  w.n_blocks = n_blocks;
  for (int b = 0; b < n_blocks; ++b) {
    w.data[b] = blocks[b].data.data() + 2;
    w.rows[b] = c.rows[b];
    w.bias[b] = c.bias[b] ? blocks[b].bias.data() : nullptr;
  }
  const int64_t ldx = c.k + c.ldx_pad;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  // Exactly up to the end of the last row; padding between rows is NaN, so reading it shows.
  std::vector<float> x((c.m - 1) * ldx + c.k, std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.k; ++j) {
      const float v = dist(rng);
      x[i * ldx + j] = c.x_fill == XFill::kZero ? 0.0f : c.x_fill == XFill::kTiny ? v * 1e-30f : v;
    }
    if (c.x_fill == XFill::kOutlier) x[i * ldx + rng() % c.k] *= 1000.0f;
  }
  const bool bad_x = c.x_fill == XFill::kNaN || c.x_fill == XFill::kInf;
  const int64_t nan_row = bad_x ? c.m / 2 : -1;
  if (nan_row >= 0) {
    x[nan_row * ldx + rng() % c.k] = c.x_fill == XFill::kNaN
                                         ? std::numeric_limits<float>::quiet_NaN()
                                         : std::numeric_limits<float>::infinity();
  }

  // Per output: the dot product, M = |bias| + sum |x||w|, M' (the same with |w1| + |w2|), the
  // sum over 256-blocks of absmax_b(x) sum_b |w| (the x16 kernels' rounding of x) and the same
  // over the blocks they take as zero (absmax below 2^-100). The NaN row's are left zero.
  const int64_t n_total = w.n();
  std::vector<double> dot(c.m * n_total), mag(c.m * n_total), mag2(c.m * n_total),
      xmag(c.m * n_total), dropped(c.m * n_total);
  int64_t col = 0;
  for (int b = 0; b < n_blocks; ++b) {
    for (int64_t r = 0; r < c.rows[b]; ++r, ++col) {
      const float* wr = blocks[b].value.data() + r * c.k;
      const float* sr = blocks[b].split_mag.data() + r * c.k;
      for (int64_t i = 0; i < c.m; ++i) {
        if (i == nan_row) continue;
        double s = c.bias[b] ? blocks[b].bias[r] : 0.0, a = std::fabs(s), a2 = a, xa = 0.0,
               xd = 0.0;
        for (int64_t g0 = 0; g0 < c.k; g0 += 256) {
          double amax = 0.0, wsum = 0.0;
          for (int64_t j = g0; j < std::min(c.k, g0 + 256); ++j) {
            const double xv = x[i * ldx + j];
            s += xv * wr[j];
            a += std::fabs(xv * wr[j]);
            a2 += std::fabs(xv) * sr[j];
            amax = std::max(amax, std::fabs(xv));
            wsum += std::fabs(wr[j]);
          }
          xa += amax * wsum;
          if (amax < 0x1p-100) xd += amax * wsum;
        }
        dot[i * n_total + col] = s;
        mag[i * n_total + col] = a;
        mag2[i * n_total + col] = a2;
        xmag[i * n_total + col] = xa;
        dropped[i * n_total + col] = xd;
      }
    }
  }
  const bool silu = c.ep == GemmEpilogue::kSiluMul;
  const int64_t n_out = silu ? c.rows[0] : n_total;
  const int64_t ldy = n_out + c.ldy_pad;
  const bool prefill = c.m >= gemm_detail::kGgmlPrefillMinM;
  const double tol_f32 = (prefill ? c.k + 16.0 : c.k / 8.0 + 16.0) * std::ldexp(1.0, -24);

  IsaRestore restore;
  Runners runners;
  for (Isa isa : supported_isas()) {
    REQUIRE(set_isa(isa));
    // The kernel table gemm_ggml picks at this level, and whether its decode kernel rounds x.
    const gemm_detail::GgmlKernels& kt = isa_includes(isa, Isa::kAvx512)
                                             ? gemm_detail::ggml_kernels_avx512()
                                             : gemm_detail::ggml_kernels_avx2();
    // Prefill at this level's default precision, then (prefill only) kBf16 and exact f32.
    // Decode at the default precision and, where this level has an x8 decode kernel for the
    // type (gemm_ggml_q4k_avx512_vnni.cc, gemm_ggml_kq_avx512_vnni.cc), at kBf16.
    for (const GemmPrecision prec : {gemm_precision(), GemmPrecision::kBf16, GemmPrecision::kF32}) {
      ScopedGemmPrecision scope(prec);
      const gemm_detail::GgmlDotTable& dt = gemm_detail::ggml_decode_table(kt, c.type->type, c.m);
      if (!prefill && prec != gemm_precision() && !(prec == GemmPrecision::kBf16 && dt.x8)) {
        continue;
      }
      // Decode kernels that round x, and the prefill in integers without AMX (AVX512-VNNI and
      // the levels below AVX-512), which rounds it within the same bound (gemm_ggml.h), or to
      // x8 with kBf16 (ggml_prefill_x8, gemm_quant.h's vnni_x8; its groups of 32 or 16 lie in
      // these blocks of 256; the x8 decode kernels round per block of 256).
      const bool x16 = prefill ? gemm_detail::ggml_on_int_prefill(c.type->type, c.m) : dt.x16;
      const double x_err = (prefill && gemm_detail::ggml_prefill_x8(c.type->type)) ||
                                   (!prefill && dt.x8)
                               ? gemm_detail::kX8Error
                               : gemm_detail::kGgmlDecodeXError;
      const bool bf16 = prefill && gemm_detail::prefill_in_bf16();
      const double tol = bf16 ? std::ldexp(1.0, -7) : tol_f32;
      auto allowed_at = [&](int64_t idx) {
        return x16 ? x_err * xmag[idx] + tol * mag2[idx] + dropped[idx] : tol * mag[idx];
      };
      for (auto [name, runner] : runners.all()) {
        INFO("isa=" << isa_name(isa) << " runner=" << name << (x16 ? " x16" : "")
                    << (!prefill && dt.x8 ? " x8" : "")
                    << (bf16 ? " bf16-prefill" : "") << " precision=" << static_cast<int>(prec));
        std::vector<float> y(c.m * ldy, kSentinel);
        gemm(c.m, x.data(), ldx, w, c.ep, y.data(), ldy, *runner);
        if (nan_row >= 0) {
          // Every output of that row NaN (an x16 group with a NaN or infinity has s = NaN; f32
          // kernels give NaN or, for an infinity, +-inf); then checked as zeros, its reference.
          int64_t finite = 0;
          for (int64_t j = 0; j < n_out; ++j) {
            const float v = y[nan_row * ldy + j];
            finite += x16 || c.x_fill == XFill::kNaN ? !std::isnan(v) : std::isfinite(v);
            y[nan_row * ldy + j] = 0.0f;
          }
          CHECK(finite == 0);
        }
        check_gemm_output(y, c.m, ldy, n_out, n_total, silu, dot, allowed_at, kSentinel);
      }
    }
  }
}

TEST_CASE("gemm ggml: every type, k of 1..3 blocks and long, m = 1..17, 31, 32, 40",
          "[kernels][gemm_ggml]") {
  uint32_t seed = 1;
  for (const TypeInfo& t : all_types()) {
    const int64_t bs = ggml_block_size(t.type);
    for (int64_t k : {bs, 2 * bs, 3 * bs, bs == 32 ? int64_t{2080} : int64_t{2304}}) {
      for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 40}) {
        // Long rows only at a few m: the double reference dominates the run time.
        if (k > 3 * bs && m != 1 && m != 5 && m != 17 && m != 40) continue;
        Case c;
        c.type = &t;
        c.m = m;
        c.k = k;
        c.rows = {seed % 3 == 0 ? 13 : 7};  // odd: short last kernel call
        c.bias = {seed % 2 == 0};
        c.ldx_pad = seed % 3 == 0 ? 0 : 3;
        c.ldy_pad = seed % 4 == 0 ? 0 : 5;
        check_case(c, seed++);
      }
    }
  }
}

TEST_CASE("gemm ggml: two and three blocks, biases, SiLU-mul", "[kernels][gemm_ggml]") {
  uint32_t seed = 500;
  for (const TypeInfo& t : all_types()) {
    const int64_t bs = ggml_block_size(t.type);
    for (int64_t m : {1, 3, 6, 17, 33}) {
      Case c;
      c.type = &t;
      c.m = m;
      c.k = 2 * bs;
      c.ldx_pad = 1;
      c.ldy_pad = 2;
      c.rows = {9, 5, 3};
      c.bias = {true, false, true};
      check_case(c, seed++);
      c.rows = {4, 33};
      c.bias = {false, true};
      check_case(c, seed++);
      c.rows = {11, 11};
      c.bias = {m % 2 == 0, true};
      c.ep = GemmEpilogue::kSiluMul;
      check_case(c, seed++);
      c.rows = {1, 1};
      c.bias = {false, false};
      c.k = bs;
      check_case(c, seed++);
    }
  }
}

// The kernels' weights are the reference's bit for bit (gemm_ggml.h): the prefill dequantizer
// of each ISA table equals dequantize_ggml_row, and a dot kernel against a unit vector x = e_c
// returns w[r][c] exactly (every other product is an exact zero).
TEST_CASE("gemm ggml: kernel tables decode exactly the reference weights", "[kernels][gemm_ggml]") {
  using gemm_detail::GgmlKernels;
  std::vector<std::pair<Isa, const GgmlKernels*>> tables;
  // The table each selected level runs (gemm_ggml_cpu.cc: AVX-512's at every level that
  // includes it, amx among them; AVX2's below).
  for (Isa isa : supported_isas()) {
    tables.push_back({isa, isa_includes(isa, Isa::kAvx512) ? &gemm_detail::ggml_kernels_avx512()
                                                           : &gemm_detail::ggml_kernels_avx2()});
  }
  uint32_t seed = 700;
  for (const TypeInfo& t : all_types()) {
    Case c;
    c.type = &t;
    c.k = 2 * ggml_block_size(t.type) == 64 ? 96 : 512;
    c.rows = {4};
    c.bias = {false};
    std::mt19937 rng(seed++);
    const Block b = make_block(c, 4, false, rng);
    const int64_t row_bytes = ggml_row_bytes(t.type, c.k);
    for (auto [isa, kt] : tables) {
      INFO(ggml_type_name(t.type) << " isa=" << isa_name(isa));
      const int slot = static_cast<int>(t.type);
      REQUIRE(kt->dot[slot].dot != nullptr);
      REQUIRE(kt->dequant[slot] != nullptr);
      REQUIRE(kt->dot[slot].rows == 4);
      std::vector<float> row(c.k);
      int64_t bad = 0;
      const uint8_t* rows[4];
      for (int r = 0; r < 4; ++r) {
        rows[r] = b.data.data() + 2 + r * row_bytes;
        kt->dequant[slot](rows[r], c.k, row.data());
        bad += std::memcmp(row.data(), b.value.data() + r * c.k, c.k * 4) != 0;
      }
      CHECK(bad == 0);
      if (kt->dot[slot].x16) continue;  // rounds x: covered by the GEMM cases' bound
      const int mb = kt->dot[slot].max_m;
      std::vector<float> x(mb * c.k, 0.0f), out(mb * 4);
      bad = 0;
      for (int64_t col = 0; col < c.k; col += mb) {
        std::fill(x.begin(), x.end(), 0.0f);
        const int n = static_cast<int>(std::min<int64_t>(mb, c.k - col));
        for (int i = 0; i < n; ++i) x[i * c.k + col + i] = 1.0f;
        kt->dot[slot].dot(rows, c.k, x.data(), c.k, n, out.data());
        for (int i = 0; i < n; ++i)
          for (int r = 0; r < 4; ++r)
            bad += to_bits(out[i * 4 + r]) != to_bits(b.value[r * c.k + col + i] + 0.0f);
      }
      CHECK(bad == 0);
    }
  }
}

// The types with x16 decode kernels (gemm_ggml.h).
bool has_x16_kernel(GgmlType t) {
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ8_0 || t == GgmlType::kQ6_K ||
         t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ4_1 ||
         t == GgmlType::kQ5_0 || t == GgmlType::kQ5_1 || t == GgmlType::kIQ4_NL ||
         t == GgmlType::kIQ4_XS || t == GgmlType::kQ3_K || t == GgmlType::kQ2_K;
}

// Many columns: the work splits over workers, stripes of 64 columns and the prefill chunking.
TEST_CASE("gemm ggml: wide outputs", "[kernels][gemm_ggml]") {
  uint32_t seed = 900;
  for (const TypeInfo& t : all_types()) {
    if (!has_x16_kernel(t.type)) continue;
    for (int64_t m : {1, 4, 16, 32}) {
      Case c;
      c.type = &t;
      c.m = m;
      c.k = 512;
      c.rows = {131};
      c.bias = {true};
      check_case(c, seed++);
      c.rows = {67, 67};
      c.bias = {true, false};
      c.ep = GemmEpilogue::kSiluMul;
      check_case(c, seed++);
    }
  }
}

// Prefill with enough rows of x that the AMX tiles split k into chunks (gemm_amx.cc: 7 m-block
// pairs over 104 steps of 32 -> two chunks of 52 steps, whose boundary falls inside a 256-element
// block of the K-quants, which the panel packer of gemm_ggml_amx.cc then dequantizes in part
// twice), with the 4-step decode slices of m = 32 covered above. Elsewhere the same cases check
// the other prefill paths.
TEST_CASE("gemm ggml: prefill with k split inside a block", "[kernels][gemm_ggml]") {
  uint32_t seed = 2100;
  for (const TypeInfo& t : all_types()) {
    if (!has_x16_kernel(t.type)) continue;
    Case c;
    c.type = &t;
    c.m = 200;
    c.k = 3328;
    c.rows = {40, 24};
    c.bias = {true, false};
    check_case(c, seed++);
  }
}

// The x16 decode kernels (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K) and their preparation of x:
// k of every kind the preparation treats differently (a last group of k % 256 = 32, 64, 96, 224
// elements, 256 + 32; whole groups: 256, 512, 2048, 5632), m = 1..17 (up to 4 rows of x per
// pass), rows not a multiple of R = 4, biases, SiLU-mul, and x with an outlier, all zero, tiny or
// with a NaN or an infinity.
TEST_CASE("gemm ggml: x16 decode, awkward k, m = 1..17 and x", "[kernels][gemm_ggml]") {
  uint32_t seed = 1100;
  for (const TypeInfo& t : all_types()) {
    if (!has_x16_kernel(t.type)) continue;
    const std::vector<int64_t> ks = ggml_block_size(t.type) == 32
                                        ? std::vector<int64_t>{32, 64, 96, 224, 288, 2048, 5632}
                                        : std::vector<int64_t>{256, 512, 2048, 5632};
    for (int64_t k : ks) {
      for (int64_t m = 1; m <= 17; ++m) {
        for (XFill fill : {XFill::kUniform, XFill::kOutlier, XFill::kZero, XFill::kTiny,
                           XFill::kNaN, XFill::kInf}) {
          // Special x and long rows at fewer m: the double reference dominates the run time.
          const bool few_m = m <= 5 || m == 9 || m == 17;
          if ((fill != XFill::kUniform || k >= 2048) && !few_m) continue;
          Case c;
          c.type = &t;
          c.m = m;
          c.k = k;
          c.x_fill = fill;
          c.rows = {seed % 3 == 0 ? 13 : seed % 3 == 1 ? 7 : 5};
          c.bias = {seed % 2 == 0};
          if (seed % 4 == 1) {
            c.rows = {6, 6};
            c.bias = {seed % 8 == 1, true};
            c.ep = GemmEpilogue::kSiluMul;
          }
          c.ldx_pad = seed % 3 == 0 ? 0 : 5;
          c.ldy_pad = seed % 5 == 0 ? 0 : 3;
          check_case(c, seed++);
        }
      }
    }
  }
}

// Prefill in integers without AMX of the types ggml_i16_prefill_type names
// (gemm_prefill_int_avx512_vnni.cc, _avx2.cc; elsewhere these cases check the dequantizing
// prefill): tiles of 6 rows of x (m not a multiple of 6), units of 32 columns (blocks not a
// multiple of 32, several blocks, SiLU-mul pairs), groups of 32 (Q6_K, Q2_K, Q3_K: 16) elements
// with their own x scale (types with a min: and its min), and the same special x as the decode
// case.
TEST_CASE("gemm ggml: integer prefill types, tiles, units and x", "[kernels][gemm_ggml]") {
  uint32_t seed = 1500;
  for (const TypeInfo& t : all_types()) {
    if (!gemm_detail::ggml_i16_prefill_type(t.type)) continue;
    const bool k_type = ggml_block_size(t.type) == 256;
    for (int64_t m : {32, 45}) {
      for (XFill fill : {XFill::kUniform, XFill::kOutlier, XFill::kZero, XFill::kTiny,
                         XFill::kNaN, XFill::kInf}) {
        for (int shape = 0; shape < 3; ++shape) {
          Case c;
          c.type = &t;
          c.m = m;
          c.k = fill == XFill::kUniform ? (k_type ? 1280 : 1088) : (k_type ? 512 : 160);
          c.x_fill = fill;
          set_prefill_blocks(c, shape, seed);
          c.ldx_pad = seed % 3 == 0 ? 0 : 5;
          c.ldy_pad = seed % 5 == 0 ? 0 : 3;
          check_case(c, seed++);
        }
      }
    }
  }
}

// The integer prefill at the codes and x where int16 sums come closest to saturating: every
// quant byte 0xff (Q4_0 / Q4_1 / Q4_K nibble 15, Q5_0 / Q5_1 / Q5_K 31, Q6_K 63, Q3_K 7, Q2_K
// 3, the IQ4 types' kv[15] + 128 = 241: the largest unsigned code each panel holds) against
// rows of x all +1 or all -1, which x8 (x16) rounds to exactly +-127 (+-32767), so the only
// error left is f32 summation. Without VNNI the x8 tile adds up to 8
// vpmaddubsw results in int16 lanes before widening them (gemm_prefill_int_avx2.cc,
// x8_steps_in_int16): one step too many saturates and misses by far more than the bound.
TEST_CASE("gemm ggml: integer prefill at the largest codes and x = +-1 does not saturate",
          "[kernels][gemm_ggml]") {
  const int64_t m = 38, k = 512, n = 21;
  IsaRestore restore;
  Runners runners;
  int checked = 0;
  for (const TypeInfo& t : all_types()) {
    if (!gemm_detail::ggml_i16_prefill_type(t.type) || t.type == GgmlType::kQ8_0) continue;
    Case c;
    c.type = &t;
    c.k = k;
    std::mt19937 rng(91);
    Block b = make_block(c, n, false, rng);
    // Scale and min fields stay as make_block drew them; every code byte becomes 0xff.
    const int64_t tb = ggml_type_size(t.type), row_bytes = ggml_row_bytes(t.type, k);
    for (int64_t blk = 0; blk < n * (k / ggml_block_size(t.type)); ++blk) {
      uint8_t* p = b.data.data() + 2 + blk * tb;
      switch (t.type) {
        case GgmlType::kQ4_0: std::memset(p + 2, 0xff, 16); break;
        case GgmlType::kQ4_K: std::memset(p + 16, 0xff, 128); break;
        case GgmlType::kQ5_K: std::memset(p + 16, 0xff, 160); break;
        case GgmlType::kQ4_1: std::memset(p + 4, 0xff, 16); break;
        case GgmlType::kQ5_0: std::memset(p + 2, 0xff, 20); break;  // qh, qs
        case GgmlType::kQ5_1: std::memset(p + 4, 0xff, 20); break;
        case GgmlType::kIQ4_NL: std::memset(p + 2, 0xff, 16); break;
        case GgmlType::kIQ4_XS: std::memset(p + 8, 0xff, 128); break;
        case GgmlType::kQ2_K: std::memset(p + 16, 0xff, 64); break;
        case GgmlType::kQ3_K: std::memset(p, 0xff, 96); break;  // hmask, qs
        case GgmlType::kQ6_K: std::memset(p, 0xff, 192); break;  // ql, qh
        default: FAIL("no code bytes known for " << ggml_type_name(t.type));
      }
    }
    std::vector<double> wv(n * k);
    std::vector<float> row(k);
    for (int64_t r = 0; r < n; ++r) {
      dequantize_ggml_row(t.type, b.data.data() + 2 + r * row_bytes, row.data(), k);
      for (int64_t j = 0; j < k; ++j) wv[r * k + j] = row[j];
    }
    std::vector<float> x(m * k);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < k; ++j) x[i * k + j] = i % 2 ? -1.0f : 1.0f;
    }
    GemmWeights w;
    w.dtype = DType::kU8;
    w.ggml_type = t.type;
    w.k = k;
    w.n_blocks = 1;
    w.rows[0] = n;
    w.data[0] = b.data.data() + 2;
    for (GemmPrecision prec : {GemmPrecision::kSplitBf16, GemmPrecision::kBf16}) {
      ScopedGemmPrecision scope(prec);
      for (Isa isa : supported_isas()) {
        REQUIRE(set_isa(isa));
        if (!gemm_detail::ggml_on_int_prefill(t.type, m)) continue;
        ++checked;
        for (auto [name, runner] : runners.all()) {
          std::vector<float> y(m * n);
          gemm(m, x.data(), k, w, GemmEpilogue::kStore, y.data(), n, *runner);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t r = 0; r < n; ++r) {
              double ref = 0.0, mag = 0.0;
              for (int64_t j = 0; j < k; ++j) {
                ref += double{x[i * k + j]} * wv[r * k + j];
                mag += std::fabs(wv[r * k + j]);
              }
              INFO(ggml_type_name(t.type) << " isa=" << isa_name(isa) << " runner=" << name
                                          << " precision=" << static_cast<int>(prec) << " row "
                                          << i << " col " << r);
              CHECK(std::fabs(y[i * n + r] - ref) <= 1e-5 * mag);
            }
          }
        }
      }
    }
  }
  // Per level run (SAMPAN_TEST_ISA picks them per CTest entry): the 11 types x 2 precisions at
  // avx2, avx2_vnni, avx512_vnni and avx512_bf16; none at avx512 (no VNNI) or with AMX (its
  // tiles).
  int expected = 0;
  for (Isa isa : supported_isas()) {
    if (isa == Isa::kAvx2 || isa == Isa::kAvx2Vnni || isa == Isa::kAvx512Vnni ||
        isa == Isa::kAvx512Bf16) {
      expected += 22;
    }
  }
  CHECK(checked == expected);
}

// The same path against x rounded exactly as gemm_ggml.h says for it, computed here in scalar
// code: per 32 elements s = absmax / 32767 (x8 with kBf16: 127) and 1 / s as f32 divisions,
// x16 = round-half-even of the f32 product x * (1 / s) (a group whose 1 / s overflows counts as
// zero). Q8_0 blocks written here: d an f16, 32 int8 codes. What remains is f32 summation: 1e-5
// of sum |x||w|.
TEST_CASE("gemm ggml: Q8_0 prefill in integers rounds x as stated", "[kernels][gemm_ggml]") {
  const int64_t m = 37, k = 320, n = 35, nb = k / 32;
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint8_t> data(n * nb * 34);
  std::vector<double> wv(n * k);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = data.data() + (r * nb + b) * 34;
      const uint16_t h = f32_to_f16(0.001f + 0.01f * std::fabs(dist(rng)));
      std::memcpy(blk, &h, 2);
      for (int j = 0; j < 32; ++j) {
        const auto q = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
        blk[2 + j] = static_cast<uint8_t>(q);
        wv[r * k + b * 32 + j] = static_cast<double>(q) * f16_to_f32(h);
      }
    }
  }
  std::vector<float> x(m * k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t kind = (j / 32 + i) % 5;  // uniform, outlier, tiny, zero, small
      float v = kind == 3 ? 0.0f : dist(rng);
      if (kind == 2) v = std::ldexp(v, -120);
      if (kind == 4) v = std::ldexp(v, -60);
      x[i * k + j] = v;
    }
    for (int64_t b = 0; b < nb; ++b) {
      if ((b + i) % 5 == 1) x[i * k + b * 32 + rng() % 32] = rng() % 2 ? 1e4f : -1e4f;
    }
  }
  GemmWeights w;
  w.dtype = DType::kU8;
  w.ggml_type = GgmlType::kQ8_0;
  w.k = k;
  w.n_blocks = 1;
  w.rows[0] = n;
  w.data[0] = data.data();
  IsaRestore restore;
  Runners runners;
  // x16 by default, x8 with kBf16 (ggml_prefill_x8): xmax 32767 or 127.
  int levels = 0;  // (level, precision) pairs checked
  int on_tiles = 0;  // (level, precision) pairs that AMX's tiles take instead (checked to be so)
  for (GemmPrecision prec : {GemmPrecision::kSplitBf16, GemmPrecision::kBf16}) {
    ScopedGemmPrecision scope(prec);
    const float xmax = prec == GemmPrecision::kBf16 ? 127.0f : 32767.0f;
    std::vector<double> ref(m * n), mag(m * n);
    for (int64_t i = 0; i < m; ++i) {
      std::vector<double> xr(k);
      for (int64_t g0 = 0; g0 < k; g0 += 32) {
        float amax = 0.0f;
        for (int64_t j = g0; j < g0 + 32; ++j) amax = std::max(amax, std::fabs(x[i * k + j]));
        const float sx = amax / xmax, inv = amax > 0.0f ? xmax / amax : 0.0f;
        for (int64_t j = g0; j < g0 + 32; ++j) {
          xr[j] = std::isinf(inv) ? 0.0 : std::nearbyint(x[i * k + j] * inv) * double{sx};
        }
      }
      for (int64_t r = 0; r < n; ++r) {
        double acc = 0.0, a = 0.0;
        for (int64_t j = 0; j < k; ++j) {
          acc += xr[j] * wv[r * k + j];
          a += std::fabs(x[i * k + j] * wv[r * k + j]);
        }
        ref[i * n + r] = acc;
        mag[i * n + r] = a;
      }
    }
    for (Isa isa : supported_isas()) {
      REQUIRE(set_isa(isa));
      if (isa == Isa::kAmx) {
        // The AMX level prefills every GGUF type on its bf16 tiles (gemm_ggml_amx.cc, checked
        // by the AMX cases above), never in integers: that is what its own CTest entry
        // (SAMPAN_TEST_ISA=amx, this level alone) can check here.
        CHECK_FALSE(gemm_detail::ggml_on_int_prefill(GgmlType::kQ8_0, m));
        ++on_tiles;
        continue;
      }
      // At a level without VNNI, Q8_0 keeps x16 under kBf16 (ggml_prefill_x8): the kSplitBf16
      // round checks that rounding.
      if (!gemm_detail::ggml_on_int_prefill(GgmlType::kQ8_0, m) ||
          gemm_detail::ggml_prefill_x8(GgmlType::kQ8_0) != (xmax == 127.0f)) {
        continue;
      }
      ++levels;
      for (auto [name, runner] : runners.all()) {
        std::vector<float> y(m * n);
        gemm(m, x.data(), k, w, GemmEpilogue::kStore, y.data(), n, *runner);
        for (int64_t idx = 0; idx < m * n; ++idx) {
          INFO("isa=" << isa_name(isa) << " runner=" << name << " xmax=" << xmax << " row "
                      << idx / n << " col " << idx % n);
          CHECK(std::fabs(y[idx] - ref[idx]) <= 1e-5 * mag[idx] + 1e-30);
        }
      }
    }
  }
  // Every CPU has the avx2 level, which prefills Q8_0 in integers; only an entry that selects
  // the amx level alone sees none of them.
  const std::optional<std::vector<Isa>> only = isas_selected_by_env();
  CHECK(levels + on_tiles > 0);
  if (!only || *only != std::vector<Isa>{Isa::kAmx}) CHECK(levels > 0);
}

}  // namespace
}  // namespace sampan::cpu
