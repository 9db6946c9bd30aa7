// INT4 decode on AVX2 with x rounded to int8 per weight group: GemmPrecision::kBf16 (vnni_x8 in
// gemm_quant.h, bound kX8Error), for m = 1..2 rows of x (the batched x8 kernel of
// gemm_quant_batch_avx2.cc takes m = 3..16), at every level whose int4 decode runs the AVX2
// kernels (below AVX512-VNNI, and m = 1 on Zen 4). The table is the AVX2 one
// (gemm_quant_avx2.cc) with this kI4 kernel and its preparation of x.
//
// Why: the x16 kernel multiplies each weight byte twice per row of x (x16's hi and lo bytes:
// 4 vpmaddubsw per 64 weights), and at m = 1 a Zen 3 core ran out of arithmetic at ~16 GB/s,
// below its read bandwidth. Rounded to int8, x takes one vpmaddubsw per 32 weights: per 64
// weights 4 nibble operations (shared by the rows of x), 2 vpmaddubsw and 2 int16 adds per row
// of x, and per step one widening, one correction, a conversion, a multiply and an FMA.
//
// Exactness, per step and int32 lane L (8 C weights of the step's C = S / 64 <= 2 chunks), with
// u = q + 8 in [0, 15] and |x8| <= 127: a vpmaddubsw pair is at most 2 * 15 * 127 = 3810, the
// int16 sum of 2 C pairs at most 15240 < 2^15; vpmaddwd by 1 gives the lane's sum of u x8, and
// adding the prepared -8 X_L (or subtracting (8 + z) X_L) gives t = sum (q - z) x8, |t| <= 16 *
// 15 * 127: exact in int32 and f32. The f32 part is the x16 kernel's: acc = fma(float(t),
// s_w * s_x, acc) per step, then the 8 lanes summed. The batched x8 kernel forms the same t and
// the same f32 operations in the same order from the same prepared x (gemm_quant_avx2_common.h),
// so a row of x gives bit for bit the same result however many rows share the call.
//
// On AVX-VNNI CPUs (the avx2_vnni level) VEX vpdpbusd sums the byte products straight into the
// int32 lanes (the same integers; not yet run on such a CPU).
//
// Measured on a 2-core Zen 3 VM (avx2), GemmPrecision::kBf16, the x16 kernels' library and this
// one alternating: bench_gemm_quant gemv --cached --format int4 (g128, weights in L2/L3, medians
// of 15 runs, 1 thread) m = 1: 16.4 -> 19.5 GB/s; m = 4 / 8 / 16 (the batched kernels): 1.16 /
// 1.11 / 1.07x. sampan bench --quantization int4 (TinyLlama shape), decode: 1 thread 27.5-28.1 ->
// 33.4-34.0 tok/s, 2 threads 49.1-50.4 -> 56.3-60.6; a batched decode step at B = 4 / 16, 2
// threads: 1.12-1.17x / 1.07-1.13x.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/gemm_quant_avx2_common.h"
#include "kernels/cpu/isa.h"

namespace sampan::cpu::gemm_detail {

namespace avx2q {

// Plus 64 bytes: rows of x 2^n floats apart would share L1 sets in the batched kernel, which
// holds a chunk of many of them in L1 (gemm_quant_batch_avx2.cc).
int64_t i4x8_x_floats(int64_t k, int64_t group) {
  const int64_t s = i4_step(group);
  return (k + s - 1) / s * i4x8_step_bytes(s) / 4 + 16;
}

void prep_i4_x8(const float* x, int64_t k, int64_t group, float* out) {
  const int64_t s = i4_step(group), chunks = s / 64;
  uint8_t* dst = reinterpret_cast<uint8_t*>(out);
  // Per 128-bit lane: the even bytes, then the odd ones.
  const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                         0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int64_t s0 = 0; s0 < k; s0 += s, dst += i4x8_step_bytes(s)) {
    XScale a = group_scale(x, s0, group, kX8Max);
    zero_if_inverse_overflows(&a.sx, &a.inv);  // absmax below ~2^-121
    XScale b = a;
    if (group == 32) {
      b = s0 + 32 < k ? group_scale(x, s0 + 32, 32, kX8Max) : XScale{};
      zero_if_inverse_overflows(&b.sx, &b.inv);
    }
    __m256i sum = _mm256_setzero_si256();  // int16 lane i: elements 4i..4i+3 of every chunk
    for (int64_t c = 0; c < chunks; ++c) {
      __m256i h[2];  // x8 of the chunk's elements 0..31 and 32..63, in order
      for (int t = 0; t < 2; ++t) {
        const int64_t e = s0 + 64 * c + 32 * t;
        const __m256 inv = _mm256_set1_ps(group == 32 && t == 1 ? b.inv : a.inv);
        // |x8| <= 127: the saturating packs are exact (a NaN group's values are don't-cares).
        // The dword order after the two packs is 0, 2, 4, 6 | 1, 3, 5, 7 of the 4-element runs.
        const __m256i w01 =
            _mm256_packs_epi32(quantize8(x, e, k, inv), quantize8(x, e + 8, k, inv));
        const __m256i w23 =
            _mm256_packs_epi32(quantize8(x, e + 16, k, inv), quantize8(x, e + 24, k, inv));
        h[t] = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), order);
      }
      // Per 128-bit lane of p_t: 8 even elements, then 8 odd ones; gathering the halves
      // (0, 2, 1, 3) puts each in order.
      const __m256i p0 = _mm256_shuffle_epi8(h[0], split), p1 = _mm256_shuffle_epi8(h[1], split);
      const __m256i ev = _mm256_permute4x64_epi64(_mm256_unpacklo_epi64(p0, p1), 0xd8);
      const __m256i od = _mm256_permute4x64_epi64(_mm256_unpackhi_epi64(p0, p1), 0xd8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64 * c), ev);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64 * c + 32), od);
      sum = _mm256_add_epi16(sum, _mm256_add_epi16(_mm256_maddubs_epi16(ones8, ev),
                                                   _mm256_maddubs_epi16(ones8, od)));
    }
    const __m256i xl = _mm256_madd_epi16(sum, ones16);  // X_L, |X_L| <= 16 * 128
    uint8_t* tail = dst + 64 * chunks;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(tail),
                        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(xl, 3)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(tail + 32),
                        _mm256_and_si256(xl, _mm256_set1_epi32(0xffff)));
    _mm256_storeu_ps(reinterpret_cast<float*>(tail + 64),
                     group == 32 ? _mm256_setr_m128(_mm_set1_ps(a.sx), _mm_set1_ps(b.sx))
                                 : _mm256_set1_ps(a.sx));
  }
}

}  // namespace avx2q

namespace {

using avx2q::i4_step;
using avx2q::i4x8_step_bytes;
using avx2q::load32;
using avx2q::step_lanes;

constexpr int kRows = 4;  // weight rows per call: one of each of 4 streams (gemm_decode_walk.h)
constexpr int kMaxM = 4;

// s_w and 8 + z (as an int16 pair (c, c)) of 8 groups of a row from g0 (0 past its ng groups).
struct X8Block {
  alignas(32) float sw[8];
  alignas(32) int32_t zc[8];
};

template <bool kAsym>
inline void block_scales(const QuantRow& row, bool bf16, int64_t ng, int64_t g0, X8Block& blk) {
  _mm256_store_ps(blk.sw, avx2q::i4_scales8(row, bf16, ng, g0));  // exact, as the batched kernel
  if (kAsym) {
    const __m256i c = avx2q::i4_offsets8(row, ng, g0);
    _mm256_store_si256(reinterpret_cast<__m256i*>(blk.zc),
                       _mm256_or_si256(c, _mm256_slli_epi32(c, 16)));
  }
}

// One step (S weights; w: the row's bytes of it; step j of its block) times MT rows of
// prepared x (xs: the step of row 0, rows ldx_bytes apart) into acc[0..MT).
template <int G, int MT, bool kHalf, bool kAsym, bool kVnni>
inline void step_acc(const uint8_t* w, const uint8_t* xs, int64_t ldx_bytes, const X8Block& blk,
                     int j, __m256* acc) {
  constexpr int64_t S = i4_step(G);
  constexpr int C = static_cast<int>(S / 64);
  __m256i a[MT];
#pragma GCC unroll 2
  for (int c = 0; c < C; ++c) {
    __m256i lo, hi;  // a half step's upper lanes are 0 (x is 0 there too)
    avx2q::i4_unsigned_nibbles<kHalf>(w + 32 * c, lo, hi);
#pragma GCC unroll 4
    for (int i = 0; i < MT; ++i) {
      const uint8_t* xi = xs + i * ldx_bytes + 64 * c;
      if constexpr (kVnni) {  // int32 lanes
        if (c == 0) a[i] = _mm256_setzero_si256();
        dpbusd_vex(a[i], lo, load32(xi));
        dpbusd_vex(a[i], hi, load32(xi + 32));
      } else {  // int16 pair sums
        const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, load32(xi)),
                                           _mm256_maddubs_epi16(hi, load32(xi + 32)));
        a[i] = c == 0 ? p : _mm256_add_epi16(a[i], p);
      }
    }
  }
  const __m256 sw = step_lanes<G>(blk.sw, j);
#pragma GCC unroll 4
  for (int i = 0; i < MT; ++i) {
    const uint8_t* xe = xs + i * ldx_bytes + 64 * C;
    __m256i t = kVnni ? a[i] : _mm256_madd_epi16(a[i], _mm256_set1_epi16(1));
    t = kAsym ? _mm256_sub_epi32(t, _mm256_madd_epi16(load32(xe + 32), step_lanes<G>(blk.zc, j)))
              : _mm256_add_epi32(t, load32(xe));
    const __m256 sws = _mm256_mul_ps(sw, _mm256_loadu_ps(reinterpret_cast<const float*>(xe + 64)));
    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), sws, acc[i]);
  }
}

// The x8 steps for avx2q::i4_rows_loop; x: MT rows of prepared x, ldx_bytes apart.
template <int G, int MT, int NR, bool kAsym, bool kVnni>
struct RowsX8 {
  using Block = X8Block;
  bool bf16;
  int64_t ng;
  int64_t ldx_bytes;

  void scales(const QuantRow& row, int64_t g0, Block& blk) const {
    block_scales<kAsym>(row, bf16, ng, g0, blk);
  }
  template <bool kHalf>
  void step(const uint8_t* w, const uint8_t* xs, const Block& blk, int j, __m256* acc) const {
    step_acc<G, MT, kHalf, kAsym, kVnni>(w, xs, ldx_bytes, blk, j, acc);
  }

  static void run(const QuantRow* rows, const QuantFormat& f, const uint8_t* x, int64_t ldx_bytes,
                  float* out, int ldo) {
    const RowsX8 kern{f.bf16_scales, f.k / G, ldx_bytes};
    avx2q::i4_rows_loop<G, MT, NR, i4x8_step_bytes(i4_step(G))>(kern, rows, f.k, x, out, ldo);
  }
};

QuantKernels make_table() {
  QuantKernels t = quant_kernels_avx2();
  using Dot = avx2q::I4Dot<RowsX8, kRows>;
  t.i4 = {kRows, kMaxM, Dot::dot, Dot::resolve};
  t.i4_x_floats = avx2q::i4x8_x_floats;
  t.prep_i4 = avx2q::prep_i4_x8;
  return t;
}

}  // namespace

const QuantKernels& quant_kernels_avx2_x8() {
  static const QuantKernels table = make_table();
  return table;
}

}  // namespace sampan::cpu::gemm_detail
