// Pieces shared by the AVX-512 GGUF decode kernels (gemm_ggml_avx512.cc,
// gemm_ggml_kq_avx512_vnni.cc, gemm_ggml_q4k_avx512_vnni.cc; include only from such translation
// units): the software prefetch distance, unaligned 16- and 32-byte loads, the f16 scale read,
// and the block loop of the 256-element block kernels.
#pragma once

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace sampan::cpu::gemm_detail {
namespace {

// Software prefetch distance: the same position in the rows 1.5 calls ahead. The R rows of a
// call are one row of each of R streams (gemm_decode_walk.h), and a stream's next row is the next
// call's, so that is 1.5 rows on in the same stream. Measured when the R rows were consecutive
// rows of W (then 1.5 x R rows on; Zen 4, 1 thread, m = 1, 2048 x 2048 streamed from DRAM, loaded
// machine, read probe 12.7 GB/s): Q8_0 6.6 / Q4_0 5.0 / Q4_K 5.5 GB/s at a fixed 1 KB, 8.9 / 6.5
// / 7.3 half a call ahead, 11.6 / 8.9 / 12.0 one call, 11.5 / 9.4 / 12.4 one and a half, 12.2 /
// 8.6 / 11.6 two calls ahead.
inline int64_t prefetch_ahead(int64_t row_bytes) { return 3 * row_bytes / 2; }

inline __m128i load16(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The 8 sub-block factors of a Q4_K / Q5_K block b times its f16 multiplier at b + at (d at 0,
// dmin at 2): v8 holds the 8 unsigned 6-bit factors one per byte (k_scales_min8).
inline __m256 k_block_factors(const uint8_t* b, int at, uint64_t v8) {
  return _mm256_mul_ps(
      _mm256_set1_ps(f16_at(b + at)),
      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(v8)))));
}

// The loop of the kernels over 256-element blocks of kBytes bytes: for each block b and each of
// the R weight rows r, block(b, p, acc[r]) with p the row's block (the same position 1.5 calls
// ahead prefetched) and acc[r][i] the f32 sums of row i of x against weight row r; then
// out[i * R + r] = their horizontal sums.
template <int R, int MB, int kBytes, class F>
inline void over_blocks(const uint8_t* const* rows, int64_t k, float* out, F&& block) {
  __m512 acc[R][MB];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < MB; ++i) acc[r][i] = _mm512_setzero_ps();
  const int64_t ahead = prefetch_ahead(k / 256 * kBytes);
  for (int64_t b = 0; b < k / 256; ++b) {
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = rows[r] + b * kBytes;
      for (int off = 0; off < kBytes; off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p) + ahead + off, _MM_HINT_T0);
      }
      block(b, p, acc[r]);
    }
  }
  for (int i = 0; i < MB; ++i)
    for (int r = 0; r < R; ++r) out[i * R + r] = _mm512_reduce_add_ps(acc[r][i]);
}

}  // namespace
}  // namespace sampan::cpu::gemm_detail
