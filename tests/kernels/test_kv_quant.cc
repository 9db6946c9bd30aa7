// The quantized KV-cache formats (KvDtype, kv_quant.h): rows written by kv_cache_write are read
// back with a decoder written here from the layout in kv_quant.h and compared with a plain
// double quantizer of the header's rules; then attention over each quantized cache (every ISA,
// GQA, sliding windows, mixed prefill/decode, split-K) against a double reference over the same
// decoded values, and against the unquantized values within each format's error bound.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/kv_quant.h"
#include "tests/kernels/kernel_test_util.h"

namespace sampan::cpu {
namespace {

constexpr KvDtype kAllDtypes[] = {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF8E4M3, KvDtype::kI8,
                                  KvDtype::kI4};

// ---- the formats, written plainly in double ------------------------------------------------

// x rounded to nearest even with `bits` significant bits, exponents below min_exp taken as
// min_exp (subnormals). *tie_dist: how far the scaled value was from a rounding midpoint, in
// units of the last place (a value this close may round either way in the kernel's f32).
double round_bits(double x, int bits, int min_exp, double* tie_dist) {
  if (x == 0.0) {
    if (tie_dist) *tie_dist = 1.0;
    return x;
  }
  int e = std::ilogb(x);
  if (e < min_exp) e = min_exp;
  const double scaled = std::ldexp(x, bits - 1 - e);
  if (tie_dist) *tie_dist = std::fabs(std::fabs(scaled - std::trunc(scaled)) - 0.5);
  return std::ldexp(std::nearbyint(scaled), e - (bits - 1));
}

double ref_bf16(double x, double* tie) { return round_bits(x, 8, -126, tie); }
double ref_e4m3(double x, double* tie) {
  const double r = round_bits(x, 4, -6, tie);
  return std::clamp(r, -448.0, 448.0);
}
double ref_f16(double x) { return std::clamp(round_bits(x, 11, -14, nullptr), -65504.0, 65504.0); }

// One head quantized by the header's rules and dequantized, in double; tie[i] is the distance of
// element i from a rounding midpoint (in steps).
void ref_quantize_head(KvDtype dt, const float* x, int64_t hd, double* out, double* tie) {
  switch (dt) {
    case KvDtype::kF32:
      for (int64_t i = 0; i < hd; ++i) {
        out[i] = x[i];
        tie[i] = 1.0;
      }
      return;
    case KvDtype::kBF16:
      for (int64_t i = 0; i < hd; ++i) out[i] = ref_bf16(x[i], &tie[i]);
      return;
    case KvDtype::kI8:
    case KvDtype::kF8E4M3: {
      float amax = 0.0f;
      for (int64_t i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(x[i]));
      const bool fp8 = dt == KvDtype::kF8E4M3;
      const float scale = amax / (fp8 ? 448.0f : 127.0f);  // the stored f32 scale
      for (int64_t i = 0; i < hd; ++i) {
        if (scale == 0.0f) {
          out[i] = 0.0;
          tie[i] = 1.0;
          continue;
        }
        const double v = static_cast<double>(x[i]) / scale;
        if (fp8) {
          out[i] = ref_e4m3(v, &tie[i]) * scale;
        } else {
          tie[i] = std::fabs(std::fabs(v - std::trunc(v)) - 0.5);
          out[i] = std::clamp(std::nearbyint(v), -127.0, 127.0) * scale;
        }
      }
      return;
    }
    case KvDtype::kI4: {
      const int64_t gs = kv_i4_group(hd);
      for (int64_t g0 = 0; g0 < hd; g0 += gs) {
        double lo = x[g0], hi = x[g0];
        for (int64_t i = g0; i < g0 + gs; ++i) {
          lo = std::min<double>(lo, x[i]);
          hi = std::max<double>(hi, x[i]);
        }
        // The header's scale: (max - min) / 15 in f32, then rounded to f16.
        const float range = (static_cast<float>(hi) - static_cast<float>(lo)) / 15.0f;
        const double s = ref_f16(range), m = ref_f16(lo);
        for (int64_t i = g0; i < g0 + gs; ++i) {
          double u = 0.0;
          tie[i] = 1.0;
          if (s > 0.0) {
            const double r = (x[i] - m) / s;
            tie[i] = std::fabs(std::fabs(r - std::trunc(r)) - 0.5);
            u = std::clamp(std::nearbyint(r), 0.0, 15.0);
          }
          out[i] = m + u * s;
        }
      }
      return;
    }
  }
}

// ---- a decoder of the stored bytes (kv_quant.h layout), independent of the library's ---------

double dec_f16(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -mag : mag;
}
double dec_e4m3(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (b & 0x80) ? -mag : mag;
}
double dec_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float get_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

int64_t head_bytes(KvDtype dt, int64_t hd) {
  switch (dt) {
    case KvDtype::kF32: return 4 * hd;
    case KvDtype::kBF16: return 2 * hd;
    case KvDtype::kF8E4M3:
    case KvDtype::kI8: return hd + 4;
    case KvDtype::kI4: return (hd + 1) / 2 + hd / kv_i4_group(hd) * 4;
  }
  return 0;
}

void decode_row(KvDtype dt, const uint8_t* row, int64_t n_kv, int64_t hd, double* out) {
  for (int64_t h = 0; h < n_kv; ++h) {
    const uint8_t* r = row + h * head_bytes(dt, hd);
    double* o = out + h * hd;
    for (int64_t i = 0; i < hd; ++i) {
      switch (dt) {
        case KvDtype::kF32: o[i] = get_f32(r + 4 * i); break;
        case KvDtype::kBF16: o[i] = dec_bf16(get_u16(r + 2 * i)); break;
        case KvDtype::kF8E4M3: o[i] = dec_e4m3(r[i]) * get_f32(r + hd); break;
        case KvDtype::kI8: o[i] = static_cast<int8_t>(r[i]) * static_cast<double>(get_f32(r + hd)); break;
        case KvDtype::kI4: {
          const int64_t gs = kv_i4_group(hd);
          const uint8_t* p = r + (hd + 1) / 2 + i / gs * 4;
          const int u = (r[i / 2] >> (4 * (i % 2))) & 15;
          o[i] = dec_f16(get_u16(p + 2)) + u * dec_f16(get_u16(p));
          break;
        }
      }
    }
  }
}

// ---- a paged cache of one format ------------------------------------------------------------

struct Pool {
  KvDtype dtype;
  int64_t n_kv, hd, bs, n_blocks, row;
  std::vector<uint8_t> k, v;
  PagedKvCache view(const std::vector<int32_t>& tables, int64_t n_seqs, int64_t max_blocks) {
    PagedKvCache c;
    c.k = k.data();
    c.v = v.data();
    c.dtype = dtype;
    c.n_blocks = n_blocks;
    c.block_size = bs;
    c.block_tables = tables.data();
    c.n_seqs = n_seqs;
    c.max_blocks = max_blocks;
    return c;
  }
};

Pool make_pool(KvDtype dt, int64_t n_kv, int64_t hd, int64_t bs, int64_t n_blocks) {
  Pool p{dt, n_kv, hd, bs, n_blocks, kv_row_bytes(dt, n_kv, hd), {}, {}};
  // Filled with a pattern, so a row the kernel forgot to write would show.
  p.k.assign(static_cast<size_t>(n_blocks * bs * p.row), 0xA5);
  p.v.assign(static_cast<size_t>(n_blocks * bs * p.row), 0x5A);
  return p;
}

TEST_CASE("kv formats: row sizes and names", "[kv_quant]") {
  CHECK(kv_row_bytes(KvDtype::kF32, 8, 128) == 8 * 128 * 4);
  CHECK(kv_row_bytes(KvDtype::kBF16, 8, 128) == 8 * 128 * 2);
  CHECK(kv_row_bytes(KvDtype::kI8, 8, 128) == 8 * 132);
  CHECK(kv_row_bytes(KvDtype::kF8E4M3, 8, 128) == 8 * 132);
  CHECK(kv_row_bytes(KvDtype::kI4, 8, 128) == 8 * (64 + 4 * 4));
  CHECK(kv_row_bytes(KvDtype::kI4, 2, 80) == 2 * (40 + 4));  // one group per head
  CHECK(kv_i4_group(96) == 32);
  CHECK(kv_i4_group(80) == 80);
  for (KvDtype d : kAllDtypes) {
    KvDtype back = KvDtype::kF32;
    REQUIRE(parse_kv_dtype(kv_dtype_name(d), &back));
    CHECK(back == d);
  }
  KvDtype x = KvDtype::kF32;
  CHECK_FALSE(parse_kv_dtype("int3", &x));
  CHECK(parse_kv_dtype("i4", &x));
  CHECK(x == KvDtype::kI4);
}

// Writes rows through kv_cache_write into shuffled blocks and checks every stored value against
// the double quantizer: equal to the last bits of f32 arithmetic (a scale times an integer is
// one f32 rounding away from the double product), except that an element within 1e-4 steps of a
// rounding midpoint may land on either neighbour (the kernel divides in f32).
TEST_CASE("kv formats: kv_cache_write round trip against a double quantizer", "[kv_quant]") {
  std::mt19937 rng(7);
  for (KvDtype dt : kAllDtypes) {
    for (int64_t hd : {64, 128, 80, 96, 40, 7}) {
      for (int64_t bs : {1, 7, 16}) {
        const int64_t n_kv = 3, n_tok = 37, kvw = n_kv * hd;
        INFO("dtype " << kv_dtype_name(dt) << " head_dim " << hd << " block " << bs);
        const int64_t n_blocks = (n_tok + bs - 1) / bs + 2;
        Pool pool = make_pool(dt, n_kv, hd, bs, n_blocks);
        std::vector<int32_t> table(static_cast<size_t>(n_blocks));
        std::iota(table.begin(), table.end(), 0);
        std::shuffle(table.begin(), table.end(), rng);
        // Rows of varied magnitude, plus a zero row, a constant row and a row with one outlier.
        std::vector<float> k(static_cast<size_t>(n_tok * kvw)), v(k.size());
        std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
        for (int64_t t = 0; t < n_tok; ++t) {
          const float mag = std::ldexp(1.0f, static_cast<int>(t % 9) - 4);
          for (int64_t i = 0; i < kvw; ++i) {
            float kx = unit(rng) * mag, vx = unit(rng) * mag;
            if (t == 3) kx = vx = 0.0f;
            if (t == 4) kx = vx = 0.3125f;
            if (t == 5 && i == 1) kx = vx = 40.0f;
            k[size_t(t * kvw + i)] = kx;
            v[size_t(t * kvw + i)] = vx;
          }
        }
        std::vector<int32_t> pos(static_cast<size_t>(n_tok)), seq(pos.size(), 0);
        std::iota(pos.begin(), pos.end(), 0);
        AttentionShape s;
        s.n_heads = n_kv;
        s.n_kv_heads = n_kv;
        s.head_dim = hd;
        kv_cache_write(n_tok, s, k.data(), kvw, v.data(), kvw, pos.data(), seq.data(),
                       pool.view(table, 1, n_blocks));
        std::vector<double> got(static_cast<size_t>(kvw)), want(got.size()), tie(got.size());
        std::vector<float> lib(static_cast<size_t>(kvw));
        int64_t bad = 0;
        for (int which = 0; which < 2; ++which) {
          const std::vector<float>& src = which == 0 ? k : v;
          const std::vector<uint8_t>& mem = which == 0 ? pool.k : pool.v;
          for (int64_t t = 0; t < n_tok; ++t) {
            const int64_t row = table[size_t(t / bs)] * bs + t % bs;
            const uint8_t* bytes = mem.data() + row * pool.row;
            decode_row(dt, bytes, n_kv, hd, got.data());
            kv_dequantize_row(dt, bytes, n_kv, hd, lib.data());
            for (int64_t h = 0; h < n_kv; ++h) {
              ref_quantize_head(dt, src.data() + t * kvw + h * hd, hd, want.data() + h * hd,
                                tie.data() + h * hd);
            }
            for (int64_t i = 0; i < kvw; ++i) {
              REQUIRE(std::isfinite(got[size_t(i)]));
              // The library's own reader agrees with this decoder (one f32 rounding).
              REQUIRE(lib[size_t(i)] == Approx(got[size_t(i)]).epsilon(1e-6).margin(1e-30));
              const double w = want[size_t(i)], g = got[size_t(i)];
              if (std::fabs(g - w) <= 1e-6 * std::fabs(w) + 1e-30) continue;
              if (tie[size_t(i)] < 1e-4) continue;
              ++bad;
              UNSCOPED_INFO("token " << t << " element " << i << ": stored " << g
                                     << ", reference " << w << " (input "
                                     << src[size_t(t * kvw + i)] << ")");
            }
          }
        }
        REQUIRE(bad == 0);
        // Constant and zero rows come back exactly (to the f16 minimum for kI4).
        const int64_t row4 = table[size_t(4 / bs)] * bs + 4 % bs;
        decode_row(dt, pool.k.data() + row4 * pool.row, n_kv, hd, got.data());
        for (int64_t i = 0; i < kvw; ++i) CHECK(got[size_t(i)] == Approx(0.3125).epsilon(1e-3));
        const int64_t row3 = table[size_t(3 / bs)] * bs + 3 % bs;
        decode_row(dt, pool.v.data() + row3 * pool.row, n_kv, hd, got.data());
        for (int64_t i = 0; i < kvw; ++i) CHECK(got[size_t(i)] == 0.0);
      }
    }
  }
}

TEST_CASE("kv formats: scalar conversions at their edges", "[kv_quant]") {
  CHECK(kv_f32_to_e4m3(448.0f) == 0x7e);
  CHECK(kv_f32_to_e4m3(1000.0f) == 0x7e);    // saturates, E4M3 "fn" has no infinity
  CHECK(kv_f32_to_e4m3(-1000.0f) == 0xfe);
  CHECK(kv_f32_to_e4m3(0x1p-9f) == 0x01);    // smallest subnormal
  CHECK(kv_f32_to_e4m3(0x1p-10f) == 0x00);   // a tie, to even
  CHECK(kv_f32_to_e4m3(0x1.8p-9f) == 0x02);  // a tie, to even
  CHECK(kv_f32_to_e4m3(0x1.ep-7f) == 0x08);  // rounds up into the smallest normal
  CHECK(kv_f32_to_e4m3(1.0625f) == 0x38);    // a tie between 1 and 1.125, to even
  CHECK(kv_f32_to_e4m3(std::nanf("")) == 0x7f);
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN codes
    const auto u = static_cast<uint8_t>(b);
    CHECK(kv_e4m3_to_f32(u) == dec_e4m3(u));
    CHECK(kv_f32_to_e4m3(static_cast<float>(dec_e4m3(u))) == (b == 0x80 ? 0x80 : b));
  }
  CHECK(kv_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);  // tie to even
  CHECK(kv_f32_to_bf16(1.0f + 0x1.8p-7f) == 0x3f82);
  CHECK(std::isnan(kv_bf16_to_f32(kv_f32_to_bf16(std::nanf("")))));
  CHECK(kv_f32_to_f16_sat(1e6f) == 0x7bff);
  CHECK(kv_f32_to_f16_sat(-1e6f) == 0xfbff);
  CHECK(kv_f32_to_f16_sat(0x1p-24f) == 0x0001);
  CHECK(kv_f32_to_f16_sat(0x1p-25f) == 0x0000);  // tie to even
  for (uint32_t h = 0; h < 0x7c00; h += 7) {
    const auto u = static_cast<uint16_t>(h);
    CHECK(kv_f16_to_f32(u) == dec_f16(u));
    CHECK(kv_f32_to_f16_sat(kv_f16_to_f32(u)) == u);
  }
}

// ---- attention over a quantized cache -------------------------------------------------------

struct SeqSpec {
  int64_t past;   // positions [0, past) cached by an earlier call
  int64_t n_new;  // positions [past, past + n_new) come with this call
};

struct AttnCase {
  int64_t heads, kv, hd, bs, window;
  std::vector<SeqSpec> seqs;
};

// out[t, h] = softmax(scale q_h . k_j) v_j over j in [lo, pos] of token t's sequence, in double,
// with k_j / v_j from kv[s]: [len, kvw] per sequence.
std::vector<double> ref_attention(const AttnCase& c, float scale, const std::vector<float>& q,
                                  int64_t ldq, const std::vector<int32_t>& seq,
                                  const std::vector<int32_t>& pos,
                                  const std::vector<std::vector<double>>& kc,
                                  const std::vector<std::vector<double>>& vc) {
  const int64_t hd = c.hd, kvw = c.kv * hd, group = c.heads / c.kv;
  const size_t n = seq.size();
  std::vector<double> out(n * size_t(c.heads * hd));
  for (size_t t = 0; t < n; ++t) {
    const int64_t p = pos[t];
    const int64_t lo = c.window > 0 ? std::max<int64_t>(0, p - c.window + 1) : 0;
    const std::vector<double>& K = kc[size_t(seq[t])];
    const std::vector<double>& V = vc[size_t(seq[t])];
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t kvh = h / group;
      std::vector<double> w;
      for (int64_t j = lo; j <= p; ++j) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) {
          d += double(q[t * size_t(ldq) + size_t(h * hd + i)]) * K[size_t(j * kvw + kvh * hd + i)];
        }
        w.push_back(d * scale);
      }
      const double mx = *std::max_element(w.begin(), w.end());
      double z = 0;
      for (double& x : w) z += (x = std::exp(x - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double acc = 0;
        for (int64_t j = lo; j <= p; ++j) acc += w[size_t(j - lo)] * V[size_t(j * kvw + kvh * hd + i)];
        out[t * size_t(c.heads * hd) + size_t(h * hd + i)] = acc / z;
      }
    }
  }
  return out;
}

struct AttnErrors {
  double vs_decoded = 0;  // against the double reference over the stored (decoded) values
  double vs_f32 = 0;      // against the double reference over the unquantized values
  // The largest vs_decoded error of an output over what its path allows: kTightTol, or where
  // the integer decode loop runs (int_path) kTightTol plus that loop's stated bound.
  double ratio = 0;
  bool int_path = false;
};

// Against the decoded values the kernel computes the same thing as the reference up to f32
// arithmetic: outputs are convex combinations of |v| <= 1 (a little more for kI4's rounded
// ranges), so the error is the f32 logits, exp and accumulation; measured worst 1.6e-7 over
// every format and ISA (the f32 cache's own test allows 5e-6). 2e-6 still catches a wrong scale,
// group or nibble (>= 1e-3).
constexpr double kTightTol = 2e-6;

// Whether attention runs an integer decode loop for this cache: attention_int_avx512_vnni.cc on
// AVX512-VNNI, attention_int_avx2.cc without AVX-512 (the plain avx512 level has neither).
bool int_decode_path(KvDtype dt, int64_t hd) {
  return (has_avx512_vnni() || !has_avx512()) && gemm_precision() != GemmPrecision::kF32 &&
         (dt == KvDtype::kI4 || dt == KvDtype::kI8) && (hd == 64 || hd == 128);
}

// The integer loop's stated bound (attention_int_avx512_vnni.cc) for query head h of token t,
// from the same decoded values as ref_attention: scores off by at most delta_j = (s_q / 2 +
// 2^-22 absmax(q)) sum_d |k_jd| with s_q = absmax(scale q) / 32639 move the output by at most
// max|v| (e^(2 max delta) - 1); each weight p_j scale_j is off by at most smax / 65534, which
// moves an output by at most sum_j umax smax / 65534 / L, with smax here the largest value scale
// among the attended keys (>= each block's), umax the largest code (int4 15, int8 127) and L =
// sum_j e^(s_j - max s) (>= 1).
double int_bound(KvDtype dt, const AttnCase& c, float scale, const float* qt, int64_t p,
                 int64_t h, const std::vector<double>& K, const std::vector<double>& V,
                 const std::vector<double>& vscale) {
  const int64_t hd = c.hd, kvw = c.kv * hd, kvh = h / (c.heads / c.kv);
  const int64_t lo = c.window > 0 ? std::max<int64_t>(0, p - c.window + 1) : 0;
  float amax = 0.0f;
  for (int64_t i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(qt[h * hd + i] * scale));
  const double sq = amax / 32639.0, step = sq / 2 + std::ldexp(amax, -22);
  double delta = 0, vmax = 0, smax = 0, mx = -INFINITY;
  std::vector<double> s;
  for (int64_t j = lo; j <= p; ++j) {
    double sk = 0, d = 0;
    for (int64_t i = 0; i < hd; ++i) {
      const double k = K[size_t(j * kvw + kvh * hd + i)];
      sk += std::fabs(k);
      d += double(qt[h * hd + i]) * k;
      vmax = std::max(vmax, std::fabs(V[size_t(j * kvw + kvh * hd + i)]));
    }
    delta = std::max(delta, step * sk * (1 + 1e-6));
    smax = std::max(smax, vscale[size_t(j * c.kv + kvh)]);
    s.push_back(d * scale);
    mx = std::max(mx, d * scale);
  }
  double l = 0;
  for (double x : s) l += std::exp(x - mx);
  const double umax = dt == KvDtype::kI4 ? 15 : 127;
  return vmax * std::expm1(2 * delta) + double(s.size()) * umax * smax / 65534 / l * (1 + 1e-5);
}

// How run_case lays out the new tokens of the batch.
enum class Order {
  kShuffled,  // in random order: every token through the per-token loop
  kInOrder,   // each sequence's tokens together, by position (as the engine lays a batch out):
              // new-token runs of attention_prefill_min_tokens or more take the prefill kernel
};

// One batch of c.seqs through kv_cache_write (cached part first, then the new tokens in `order`)
// and attention with strided q and out; `fill` makes each K/V value (sequence, position,
// element) -> value, or random when empty.
AttnErrors run_case(KvDtype dt, const AttnCase& c, TaskRunner& runner, std::mt19937& rng,
                    float (*fill)(int64_t, int64_t, int64_t) = nullptr,
                    Order order = Order::kShuffled) {
  const int64_t hd = c.hd, kvw = c.kv * hd, qw = c.heads * hd;
  const auto n_seqs = static_cast<int64_t>(c.seqs.size());
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<std::vector<float>> k(static_cast<size_t>(n_seqs)), v(static_cast<size_t>(n_seqs));
  int64_t max_blocks = 1, total_blocks = 0;
  for (int64_t si = 0; si < n_seqs; ++si) {
    const int64_t len = c.seqs[size_t(si)].past + c.seqs[size_t(si)].n_new;
    for (int64_t p = 0; p < len; ++p) {
      for (int64_t i = 0; i < kvw; ++i) {
        k[size_t(si)].push_back(fill ? fill(si, p, i) : unit(rng));
        v[size_t(si)].push_back(fill ? fill(si, p, i + 1) : unit(rng));
      }
    }
    const int64_t nb = (len + c.bs - 1) / c.bs;
    max_blocks = std::max(max_blocks, nb);
    total_blocks += nb;
  }
  Pool pool = make_pool(dt, c.kv, hd, c.bs, total_blocks + 2);
  std::vector<int32_t> ids(size_t(pool.n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> tables(size_t(n_seqs * max_blocks), -1);
  size_t next = 0;
  for (int64_t si = 0; si < n_seqs; ++si) {
    const int64_t len = c.seqs[size_t(si)].past + c.seqs[size_t(si)].n_new;
    for (int64_t b = 0; b * c.bs < len; ++b) tables[size_t(si * max_blocks + b)] = ids[next++];
  }
  const PagedKvCache cache = pool.view(tables, n_seqs, max_blocks);
  AttentionShape s;
  s.n_heads = c.heads;
  s.n_kv_heads = c.kv;
  s.head_dim = hd;
  s.scale = static_cast<float>(1.0 / std::sqrt(double(hd)));
  s.sliding_window = c.window;

  // The cached part, as earlier calls would have written it; then the batch.
  std::vector<int32_t> seq, pos;
  std::vector<float> kin, vin;
  auto add_rows = [&](int64_t si, int64_t p) {
    seq.push_back(static_cast<int32_t>(si));
    pos.push_back(static_cast<int32_t>(p));
    kin.insert(kin.end(), k[size_t(si)].begin() + p * kvw, k[size_t(si)].begin() + (p + 1) * kvw);
    vin.insert(vin.end(), v[size_t(si)].begin() + p * kvw, v[size_t(si)].begin() + (p + 1) * kvw);
  };
  for (int64_t si = 0; si < n_seqs; ++si) {
    for (int64_t p = 0; p < c.seqs[size_t(si)].past; ++p) add_rows(si, p);
  }
  if (!seq.empty()) {
    kv_cache_write(static_cast<int64_t>(seq.size()), s, kin.data(), kvw, vin.data(), kvw,
                   pos.data(), seq.data(), cache);
  }
  std::vector<std::pair<int64_t, int64_t>> batch;
  for (int64_t si = 0; si < n_seqs; ++si) {
    const SeqSpec& q = c.seqs[size_t(si)];
    for (int64_t p = q.past; p < q.past + q.n_new; ++p) batch.emplace_back(si, p);
  }
  if (order == Order::kShuffled) std::shuffle(batch.begin(), batch.end(), rng);
  seq.clear();
  pos.clear();
  kin.clear();
  vin.clear();
  for (auto [si, p] : batch) add_rows(si, p);
  const auto n = static_cast<int64_t>(batch.size());
  const int64_t ldq = qw + 5, ldo = qw + 3;
  std::vector<float> q(size_t(n * ldq)), out(size_t(n * ldo), -7.0f);
  for (float& x : q) x = unit(rng);
  kv_cache_write(n, s, kin.data(), kvw, vin.data(), kvw, pos.data(), seq.data(), cache);
  attention(n, s, q.data(), ldq, cache, pos.data(), seq.data(), out.data(), ldo, runner);

  // The stored values, decoded here, and the originals, per sequence.
  std::vector<std::vector<double>> kd(static_cast<size_t>(n_seqs)), vd(kd.size()), kf(kd.size()),
      vf(kd.size());
  std::vector<double> row(static_cast<size_t>(kvw));
  for (int64_t si = 0; si < n_seqs; ++si) {
    const int64_t len = c.seqs[size_t(si)].past + c.seqs[size_t(si)].n_new;
    for (int64_t p = 0; p < len; ++p) {
      const int64_t r = tables[size_t(si * max_blocks + p / c.bs)] * c.bs + p % c.bs;
      decode_row(dt, pool.k.data() + r * pool.row, c.kv, hd, row.data());
      kd[size_t(si)].insert(kd[size_t(si)].end(), row.begin(), row.end());
      decode_row(dt, pool.v.data() + r * pool.row, c.kv, hd, row.data());
      vd[size_t(si)].insert(vd[size_t(si)].end(), row.begin(), row.end());
    }
    kf[size_t(si)].assign(k[size_t(si)].begin(), k[size_t(si)].end());
    vf[size_t(si)].assign(v[size_t(si)].begin(), v[size_t(si)].end());
  }
  const std::vector<double> want = ref_attention(c, s.scale, q, ldq, seq, pos, kd, vd);
  const std::vector<double> orig = ref_attention(c, s.scale, q, ldq, seq, pos, kf, vf);
  AttnErrors e;
  e.int_path = int_decode_path(dt, hd);
  // The value scales of every (sequence, position, KV head) for int_bound: int8's row scale,
  // int4's largest group scale (kv_quant.h layout).
  std::vector<std::vector<double>> vscale(static_cast<size_t>(n_seqs));
  if (e.int_path) {
    const int64_t hb = head_bytes(dt, hd);
    for (int64_t si = 0; si < n_seqs; ++si) {
      const int64_t len = c.seqs[size_t(si)].past + c.seqs[size_t(si)].n_new;
      for (int64_t p = 0; p < len; ++p) {
        const int64_t r = tables[size_t(si * max_blocks + p / c.bs)] * c.bs + p % c.bs;
        for (int64_t h = 0; h < c.kv; ++h) {
          const uint8_t* rec = pool.v.data() + r * pool.row + h * hb;
          double sc = 0;
          if (dt == KvDtype::kI8) {
            sc = get_f32(rec + hd);
          } else {
            for (int64_t g = 0; g < hd / 32; ++g) {
              sc = std::max(sc, dec_f16(get_u16(rec + hd / 2 + 4 * g)));
            }
          }
          vscale[size_t(si)].push_back(sc);
        }
      }
    }
  }
  std::vector<double> head_bound(size_t(n * c.heads), -1.0);  // int_bound per (token, head)
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < ldo; ++i) {
      const float got = out[size_t(t * ldo + i)];
      if (i >= qw) {
        REQUIRE(got == -7.0f);  // past the row: untouched
        continue;
      }
      REQUIRE(std::isfinite(got));
      const size_t w = size_t(t * qw + i);
      const double err = std::fabs(got - want[w]);
      e.vs_decoded = std::max(e.vs_decoded, err);
      double allowed = kTightTol;
      if (e.int_path) {
        double& b = head_bound[size_t(t * c.heads + i / hd)];
        if (b < 0) {
          const size_t si = size_t(seq[size_t(t)]);
          b = int_bound(dt, c, s.scale, q.data() + t * ldq, pos[size_t(t)], i / hd, kd[si],
                        vd[si], vscale[si]);
        }
        allowed += b;
      }
      e.ratio = std::max(e.ratio, err / allowed);
      e.vs_f32 = std::max(e.vs_f32, std::fabs(got - orig[w]));
    }
  }
  return e;
}

// Against the unquantized values: the format's own error, largest for prefill tokens that see
// only a few keys (a token attending to itself alone returns its V row as stored). Measured
// worst over these cases: bf16 2.5e-3, int8 5.2e-3, fp8 4.0e-2, int4 7.7e-2; bounds ~2x that.
double f32_bound(KvDtype dt) {
  switch (dt) {
    case KvDtype::kF32: return 2e-6;
    case KvDtype::kBF16: return 5e-3;
    case KvDtype::kI8: return 1e-2;
    case KvDtype::kF8E4M3: return 8e-2;
    case KvDtype::kI4: return 1.5e-1;
  }
  return 0;
}

TEST_CASE("kv formats: attention over each quantized cache", "[kv_quant][attention]") {
  const std::vector<AttnCase> cases = {
      // GQA, prefill chunks mixed with decodes of long sequences.
      {8, 2, 128, 16, 0, {{0, 17}, {100, 1}, {599, 1}, {33, 5}}},
      // Sliding window, a block size that divides nothing, one int4 group per head.
      {6, 2, 80, 7, 50, {{0, 9}, {300, 1}, {64, 3}}},
      // One long decode: the wide runner splits it (split-K) and merges.
      {8, 1, 64, 32, 0, {{599, 1}}},
      // MHA, one row per block, three int4 groups per head.
      {5, 5, 96, 1, 0, {{40, 2}, {0, 1}}},
      // Five heads per KV head (4 + 1 score tiles), a vector tail (40 = 2 x 16 + 8).
      {10, 2, 40, 16, 0, {{200, 1}, {0, 30}}},
      // An odd head size: a half-used int4 byte, scalar tails everywhere.
      {2, 1, 7, 3, 0, {{20, 2}}},
      // Eight heads per KV head (the whole group in one V pass on AVX-512, 2 x 16 lanes at a
      // time) with a head size of 2 x 32 + 8: the pass's vector tail.
      {16, 2, 72, 16, 0, {{300, 1}, {0, 9}}},
      // The TinyLlama shape (int8: the AMX tiles where the CPU has them) with a sliding window,
      // a block size that is no multiple of 16 and prefill chunks: partial 16-key tiles.
      {32, 4, 64, 7, 50, {{200, 1}, {0, 20}, {45, 3}}},
      // Three heads per KV head at head size 64 (f32 / bf16 on AVX-512: keys in the lanes, a
      // 2-head and a 1-head pass over one transposed tile).
      {12, 4, 64, 16, 0, {{130, 1}, {0, 19}}},
      // Sixteen heads per KV head at head size 128: two 8-head passes over one transposed tile.
      {16, 1, 128, 5, 0, {{90, 1}, {0, 7}}},
      // MHA at head size 64 (the integer loops: one-head score and V passes) and two heads per
      // KV head at 128, odd key counts (a last pair of keys with one key).
      {4, 4, 64, 16, 0, {{70, 1}, {0, 5}}},
      {4, 2, 128, 16, 0, {{33, 1}, {0, 3}}},
      // In order, prompts long enough for the prefill kernel: several blocks of query rows
      // (with a partial one), key blocks across cache blocks, a chunk after a cached part, a
      // sliding window that cuts key blocks, seven heads per KV head (rows no multiple of the
      // vector width), a head size with a scalar tail.
      {32, 4, 64, 16, 0, {{0, 75}, {40, 1}}},
      {28, 4, 64, 5, 37, {{50, 41}, {0, 1}}},
      {14, 2, 80, 16, 0, {{33, 70}}},
      {8, 8, 36, 7, 20, {{0, 40}, {100, 1}}},
      // Rows over 4 KB in every format (64 KV heads of 128: int4 4.6 KB; 16 of 128 with two
      // heads each: f32 8 KB, bf16 4 KB): the AVX2 loop in tile order (kv_attention_tiles), a
      // block size that cuts its 8-key tiles, a partial last tile.
      {64, 64, 128, 16, 0, {{150, 1}, {0, 3}}},
      {32, 16, 128, 7, 0, {{100, 1}, {45, 2}}},
      // The same at a head size known only at run time (96; f32 9 KB, bf16 4.5 KB rows).
      {24, 24, 96, 16, 0, {{90, 1}, {0, 2}}},
      // Six heads per KV head over rows of 4 KB and more (int8 8.4 KB, int4 4.6 KB): the integer
      // loop of attention_int_avx2.cc in tile order, its V passes of 4 + 2 heads.
      {384, 64, 128, 16, 0, {{70, 1}, {0, 3}}},
  };
  std::mt19937 rng(11);
  Runners runners;
  IsaRestore restore;
  int int_runs = 0;  // runs through the integer decode loop, its worst error and error / bound
  double int_worst = 0, int_worst_ratio = 0;
  for (Isa isa : supported_isas()) {
    REQUIRE(set_isa(isa));
    for (KvDtype dt : kAllDtypes) {
      for (size_t ci = 0; ci < cases.size(); ++ci) {
        for (auto [rname, runner] : runners.all()) {
          for (Order order : {Order::kShuffled, Order::kInOrder}) {
            INFO("isa " << isa_name(isa) << " dtype " << kv_dtype_name(dt) << " case " << ci
                        << " runner " << rname << " in order " << (order == Order::kInOrder));
            const AttnErrors e = run_case(dt, cases[ci], *runner, rng, nullptr, order);
            CHECK(e.ratio <= 1.0);
            CHECK(e.vs_f32 <= f32_bound(dt));
            if (e.int_path) {
              ++int_runs;
              int_worst = std::max(int_worst, e.vs_decoded);
              int_worst_ratio = std::max(int_worst_ratio, e.ratio);
            }
            if (std::getenv("KVQ_MEASURE")) {
              WARN("measure " << kv_dtype_name(dt) << " case " << ci << " dec " << e.vs_decoded
                              << " f32 " << e.vs_f32);
            }
          }
        }
      }
    }
  }
  // The int4 / int8 decodes above took an integer loop at every level but plain avx512 (every
  // x86-64 CPU has one such level), whose rounding of q and of the weights shows beyond f32
  // arithmetic.
  {
    CHECK(int_runs > 0);
    CHECK(int_worst > kTightTol);
    WARN("integer decode loop: " << int_runs << " runs, worst error " << int_worst
                                 << ", worst error / bound " << int_worst_ratio);
  }
}

float zero_fill(int64_t, int64_t, int64_t) { return 0.0f; }
float constant_fill(int64_t, int64_t, int64_t) { return -0.7f; }
// Runs of 16 equal values, varying by position.
float flat_rows_fill(int64_t si, int64_t p, int64_t i) {
  return 0.25f * static_cast<float>((si + p + i / 16) % 7) - 0.75f;
}

// All-zero and constant rows give scale 0 (int8, fp8) or a zero range (int4): nothing may divide
// by it; the result is exact (the integer decode loop: within its bound, as it rounds q and the
// weights).
TEST_CASE("kv formats: zero and constant rows give no NaN", "[kv_quant][attention]") {
  const AttnCase c{4, 2, 64, 16, 0, {{40, 1}, {0, 5}}};
  const AttnCase odd{4, 2, 80, 7, 0, {{70, 1}}};
  const AttnCase prompt{8, 2, 64, 16, 0, {{0, 70}}};  // through the prefill kernel
  std::mt19937 rng(3);
  Runners runners;
  IsaRestore restore;
  for (Isa isa : supported_isas()) {
    REQUIRE(set_isa(isa));
    for (KvDtype dt : kAllDtypes) {
      INFO("isa " << isa_name(isa) << " dtype " << kv_dtype_name(dt));
      // A constant row is its format's rounding of one value: exact for a scaled format (the
      // absmax maps to the top code), 2^-9 relative for bf16 and an f16 minimum. Flat runs of
      // 16 within a row are ordinary data for int8 / fp8 and for int4 groups of 32.
      const std::pair<float (*)(int64_t, int64_t, int64_t), double> fills[] = {
          {zero_fill, 0.0}, {constant_fill, 2e-3}, {flat_rows_fill, f32_bound(dt)}};
      for (auto [fill, bound] : fills) {
        for (const AttnCase* ac : {&c, &odd, &prompt}) {
          const AttnErrors e = run_case(dt, *ac, runners.wide, rng, fill, Order::kInOrder);
          CHECK(e.ratio <= 1.0);
          CHECK(e.vs_f32 <= bound);
        }
      }
    }
  }
}

// GemmPrecision::kF32 keeps every product of int4 / int8 attention in f32 (the tight tolerance,
// wherever the CPU has the integer loop); and a range whose q holds a NaN or an infinity runs
// the f32 loop: every output the f32 loop's bits (the affected head's whatever that loop makes of
// a NaN score).
TEST_CASE("kv formats: kF32 and non-finite q keep the f32 decode loop", "[kv_quant][attention]") {
  std::mt19937 rng(5);
  Runners runners;
  for (KvDtype dt : {KvDtype::kI4, KvDtype::kI8}) {
    for (int64_t hd : {64, 128}) {
      INFO("dtype " << kv_dtype_name(dt) << " head size " << hd);
      const AttnCase c{16, 2, hd, 16, 0, {{300, 1}, {70, 1}}};
      // MHA with rows over 4 KB (64 KV heads): the f32 loop in tile order.
      const AttnCase mha{64, 64, hd, 16, 0, {{100, 1}, {37, 1}}};
      for (const AttnCase& cc : {c, mha}) {
        ScopedGemmPrecision f32(GemmPrecision::kF32);
        const AttnErrors e = run_case(dt, cc, runners.pool, rng);
        CHECK(!e.int_path);
        CHECK(e.vs_decoded <= kTightTol);
      }
      // One decode of 200 keys, q of head 3 holding a NaN (then an infinity).
      for (float bad : {NAN, INFINITY}) {
        const int64_t heads = 8, kv = 2, len = 200, bs = 16, qw = heads * hd;
        Pool pool = make_pool(dt, kv, hd, bs, len / bs + 1);
        std::vector<int32_t> table(size_t(len / bs + 1));
        std::iota(table.begin(), table.end(), 0);
        const PagedKvCache cache = pool.view(table, 1, static_cast<int64_t>(table.size()));
        AttentionShape s;
        s.n_heads = heads;
        s.n_kv_heads = kv;
        s.head_dim = hd;
        s.scale = 0.125f;
        std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
        std::vector<float> k(size_t(len * kv * hd)), v(k.size());
        for (float& x : k) x = unit(rng);
        for (float& x : v) x = unit(rng);
        std::vector<int32_t> pos(static_cast<size_t>(len)), seq(static_cast<size_t>(len), 0);
        std::iota(pos.begin(), pos.end(), 0);
        kv_cache_write(len, s, k.data(), kv * hd, v.data(), kv * hd, pos.data(), seq.data(), cache);
        std::vector<float> q(static_cast<size_t>(qw));
        for (float& x : q) x = unit(rng);
        q[size_t(3 * hd + 5)] = bad;
        const int32_t p = len - 1, sq = 0;
        std::vector<float> got(static_cast<size_t>(qw)), ref(static_cast<size_t>(qw));
        attention(1, s, q.data(), qw, cache, &p, &sq, got.data(), qw, runners.serial);
        {
          ScopedGemmPrecision f32(GemmPrecision::kF32);
          attention(1, s, q.data(), qw, cache, &p, &sq, ref.data(), qw, runners.serial);
        }
        CHECK(std::memcmp(got.data(), ref.data(), got.size() * sizeof(float)) == 0);
      }
    }
  }
}

}  // namespace
}  // namespace sampan::cpu
