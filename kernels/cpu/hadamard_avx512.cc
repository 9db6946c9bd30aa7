// AVX-512 Walsh-Hadamard row kernel (compiled with AVX-512 flags; only called when
// cpu::has_avx512(): AVX-512 F/BW/VL/DQ).
//
// A block is transformed in a few passes over memory instead of log2(B): the first pass does the
// four stages inside each 16-float vector (lane permutes) and up to four more across 16 vectors
// held in registers; each later pass does up to four stages across 16 vectors strided h apart.
// So a block of 256 is one pass entirely in registers and 2048 or 4096 take two.

// GCC 12's AVX-512 intrinsics initialise their "don't care" operands from themselves, which
// -Wmaybe-uninitialized then reports (GCC bug 105593); nothing reads them.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cstdint>

namespace sampan::cpu::detail {

void hadamard_rows_avx512(int64_t rows, int64_t n, int64_t block, float* x, int64_t ldx,
                          float scale);

namespace {

using V = __m512;

// Stage h (1, 2, 4 or 8) inside one vector: lane i pairs with lane i ^ h; the lane with bit h
// clear keeps the sum, the other the difference (low - high).
template <int kH>
V lane_stage(V v) {
  V p;
  __mmask16 hi;
  if constexpr (kH == 1) {
    p = _mm512_permute_ps(v, 0xB1);  // [1, 0, 3, 2] in every 128-bit lane
    hi = 0xAAAA;
  } else if constexpr (kH == 2) {
    p = _mm512_permute_ps(v, 0x4E);  // [2, 3, 0, 1]
    hi = 0xCCCC;
  } else if constexpr (kH == 4) {
    p = _mm512_shuffle_f32x4(v, v, 0xB1);  // 128-bit lanes [1, 0, 3, 2]
    hi = 0xF0F0;
  } else {
    p = _mm512_shuffle_f32x4(v, v, 0x4E);  // 256-bit halves swapped
    hi = 0xFF00;
  }
  return _mm512_mask_sub_ps(_mm512_add_ps(v, p), hi, p, v);
}

// The stages h = 1 .. block/2 for block <= 16 (block 16: all four).
inline V lane_stages(V v, int64_t block) {
  if (block >= 2) v = lane_stage<1>(v);
  if (block >= 4) v = lane_stage<2>(v);
  if (block >= 8) v = lane_stage<4>(v);
  if (block >= 16) v = lane_stage<8>(v);
  return v;
}

// Radix-2 stages across kR registers (kR a power of two <= 16).
template <int kR>
inline void butterflies(V* r) {
#pragma GCC unroll 4
  for (int h = 1; h < kR; h *= 2) {
#pragma GCC unroll 16
    for (int i = 0; i < kR; i += 2 * h) {
#pragma GCC unroll 16
      for (int j = i; j < i + h; ++j) {
        const V a = r[j], b = r[j + h];
        r[j] = _mm512_add_ps(a, b);
        r[j + h] = _mm512_sub_ps(a, b);
      }
    }
  }
}

// First pass over one block: every vector through its in-lane stages, then kR consecutive
// vectors through log2(kR) stages across them. Scales on the way out when nothing follows.
template <int kR>
void first_pass(float* b, int64_t block, bool last, V scale) {  // b: [block]
  for (int64_t g = 0; g < block; g += 16 * kR) {
    V r[kR];
#pragma GCC unroll 16
    for (int m = 0; m < kR; ++m) r[m] = lane_stages(_mm512_loadu_ps(b + g + 16 * m), 16);
    butterflies<kR>(r);
    if (last) {
      for (int m = 0; m < kR; ++m) r[m] = _mm512_mul_ps(r[m], scale);
    }
    for (int m = 0; m < kR; ++m) _mm512_storeu_ps(b + g + 16 * m, r[m]);
  }
}

// A later pass: log2(kR) stages across vectors h apart (h >= 16 floats, the span of the stages
// already done).
template <int kR>
void cross_pass(float* b, int64_t block, int64_t h, bool last, V scale) {  // b: [block]
  for (int64_t base = 0; base < block; base += h * kR) {
    for (int64_t j = 0; j < h; j += 16) {
      float* p = b + base + j;
      V r[kR];
#pragma GCC unroll 16
      for (int m = 0; m < kR; ++m) r[m] = _mm512_loadu_ps(p + m * h);
      butterflies<kR>(r);
      if (last) {
        for (int m = 0; m < kR; ++m) r[m] = _mm512_mul_ps(r[m], scale);
      }
      for (int m = 0; m < kR; ++m) _mm512_storeu_ps(p + m * h, r[m]);
    }
  }
}

// Radix of the next pass: up to four stages, fewer when fewer remain (span: vectors left to mix).
inline int radix_for(int64_t span) { return span >= 16 ? 16 : static_cast<int>(span); }

void block_16_plus(float* b, int64_t block, V scale) {  // b: [block], block >= 16
  const int64_t vectors = block / 16;
  int r = radix_for(vectors);
  bool last = r == vectors;
  switch (r) {
    case 1: first_pass<1>(b, block, last, scale); break;
    case 2: first_pass<2>(b, block, last, scale); break;
    case 4: first_pass<4>(b, block, last, scale); break;
    case 8: first_pass<8>(b, block, last, scale); break;
    default: first_pass<16>(b, block, last, scale); break;
  }
  int64_t done = r;  // vectors mixed so far
  while (done < vectors) {
    r = radix_for(vectors / done);
    last = done * r == vectors;
    const int64_t h = 16 * done;
    switch (r) {
      case 2: cross_pass<2>(b, block, h, last, scale); break;
      case 4: cross_pass<4>(b, block, h, last, scale); break;
      case 8: cross_pass<8>(b, block, h, last, scale); break;
      default: cross_pass<16>(b, block, h, last, scale); break;
    }
    done *= r;
  }
}

// Blocks of 2, 4 or 8: several whole blocks per vector; the tail (n % 16 floats, whole blocks
// since block divides n) goes through a masked load so no byte past the row is touched.
void row_small_blocks(float* row, int64_t n, int64_t block, V scale) {  // row: [n]
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(row + i, _mm512_mul_ps(lane_stages(_mm512_loadu_ps(row + i), block), scale));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const V v = _mm512_maskz_loadu_ps(m, row + i);
    _mm512_mask_storeu_ps(row + i, m, _mm512_mul_ps(lane_stages(v, block), scale));
  }
}

}  // namespace

void hadamard_rows_avx512(int64_t rows, int64_t n, int64_t block, float* x, int64_t ldx,
                          float scale) {
  const V s = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * ldx;
    if (block < 16) {
      row_small_blocks(row, n, block, s);
    } else {
      for (int64_t b = 0; b < n; b += block) block_16_plus(row + b, block, s);
    }
  }
}

}  // namespace sampan::cpu::detail
