// The inner loop of CPU attention: one query token, the query heads of n_kv consecutive KV
// heads (every KV head of the token), and a range of key positions of its sequence, read through
// the sequence's block table. This file holds the range's contract, the online-softmax steps and
// the prefetch of the next key block; the loop, written once over a SIMD traits type
// (vec_avx2.h / vec_avx512.h) for every format, is kv_quant_impl.h, instantiated in
// attention_cpu.cc (AVX2) and attention_avx512.cc. attention_cpu.cc owns the work split, the
// threads and the merge of split ranges, and hands prefill chunks to the prefill kernel instead
// (PrefillBlock below, attention_prefill_impl.h), which shares each key block among a block of
// query tokens.
//
// Keys are taken in blocks of kKeyBlock positions. Per block and KV head:
//  - the scores of every query head (kv_quant_impl.h says how, per format and ISA);
//  - the online-softmax update in f32: block maximum, vector exp, and a rescale of the running
//    sums only when the maximum grew;
//  - the V rows weighted into the accumulators, a V vector read (and dequantized) once for
//    several heads (the whole group of 8 on AVX-512).
// Meanwhile the next block's rows are asked for into L2 (SpreadPrefetch).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/attention_cpu.h"

namespace sampan::cpu::detail {

struct AttentionRange {
  int64_t n_kv = 1;          // KV heads of the range, consecutive
  const float* q = nullptr;  // [n_kv, group, head_dim]: their query heads, contiguous
  // The cache pools (kv_quant.h layout of `dtype`) offset to the first KV head's record: row r
  // of physical block b is at k_rows + (b * block_size + r) * ld_bytes, KV head i's record
  // i * kv_head_bytes(dtype, head_dim) further; position j of the sequence is in block
  // blocks[j / block_size], row j % block_size.
  KvDtype dtype = KvDtype::kF32;
  const uint8_t* k_rows = nullptr;
  const uint8_t* v_rows = nullptr;  // same for V
  int64_t ld_bytes = 0;
  const int32_t* blocks = nullptr;  // the sequence's block table row
  int64_t block_size = 0;
  int64_t group = 0;  // query heads per KV head
  int64_t head_dim = 0;
  float scale = 1.0f;
  int64_t first = 0;  // positions [first, last] are attended; first <= last
  int64_t last = -1;
  float* scratch = nullptr;  // attention_scratch_floats(group, head_dim, n_kv) floats
  // out: [n_kv, group, head_dim]. With m == nullptr it receives the normalised result.
  // Otherwise it receives the unnormalised sum of e^(s - m) v, with m: [n_kv, group] the running
  // maxima and l: [n_kv, group] the sums of e^(s - m), so that split ranges can be merged.
  float* out = nullptr;
  float* m = nullptr;
  float* l = nullptr;
};

// Keys per block: the score tiles and row pointers of one block; 32 rows of K and V of a
// head_dim 128 f32 head (2 x 16 KB) stay inside a 48 KB L1 while the group's heads use them.
constexpr int64_t kKeyBlock = 32;

// Scaled q, running maxima and sums of every head, one KV head's score tile, and (int4) the sums
// of every head's scaled q per group of 32 elements; at least what attention_lanes_avx2.h's loop
// takes, whose q and score tile have 8 lanes-heads per KV head (groups of 5..7 padded), and a
// compressed cache's K records of one key block converted to f32.
inline int64_t attention_scratch_floats(int64_t group, int64_t head_dim, int64_t n_kv) {
  const int64_t lanes = n_kv * (8 * head_dim + 2 * group) + (8 + head_dim) * kKeyBlock;
  const int64_t any =
      n_kv * group * (head_dim + 2 + (head_dim + 31) / 32 + kKeyBlock) + group * kKeyBlock;
  return any > lanes ? any : lanes;
}

void attention_range_avx2(const AttentionRange& a);
void attention_range_avx512(const AttentionRange& a);
// int4 / int8 caches in integers on AVX512-VNNI (attention_int_avx512_vnni.cc, which states its
// error bound): where attention_int_takes(dtype, head_dim) and GemmPrecision is not kF32. Other
// ranges it hands to attention_range_avx512.
bool attention_int_takes(KvDtype dtype, int64_t head_dim);
void attention_range_int_avx512_vnni(const AttentionRange& a);
// The same on 8-lane vectors for CPUs without AVX-512 (attention_int_avx2.cc; VEX vpdpwssd
// where the CPU has AVX-VNNI, vpmaddwd elsewhere), under the same conditions and bound; other
// ranges it hands to attention_range_avx2.
void attention_range_int_avx2(const AttentionRange& a);

// A block of a prefill chunk for attention_prefill_impl.h: tokens at the consecutive positions
// p0 .. p0 + n_tok - 1 of one sequence (batch rows q, q + ldq, ...), the query heads of one KV
// head, against keys attention_first_key(p0, window) .. p0 + n_tok - 1 (each token masked to its
// own range). The kernel trusts the block table entries those keys need.
struct PrefillBlock {
  const float* q = nullptr;  // [n_tok, ldq]: every head's q of the block's tokens
  int64_t ldq = 0;
  float* out = nullptr;  // [n_tok, ldo]: receives this KV head's query heads only; may be q
  int64_t ldo = 0;
  int64_t n_tok = 0;
  int64_t p0 = 0;
  int64_t kv_head = 0;
  int64_t window = 0;  // AttentionShape::sliding_window
  KvDtype dtype = KvDtype::kF32;
  const uint8_t* k_rows = nullptr;  // the K pool: row r of the pool at k_rows + r * ld_bytes
  const uint8_t* v_rows = nullptr;
  int64_t ld_bytes = 0;
  const int32_t* blocks = nullptr;  // the sequence's block table row
  int64_t block_size = 0;
  int64_t group = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
  float* scratch = nullptr;  // prefill_scratch_floats(n_tok, group, head_dim, width)
};

// Keys per block of the prefill kernel; blocks start at multiples of it.
constexpr int64_t kPrefillKeys = 32;

// The block's query rows rounded up to whole vectors of `width` lanes.
inline int64_t prefill_rows_padded(int64_t n_tok, int64_t group, int64_t width) {
  return (n_tok * group + width - 1) / width * width;
}

inline int64_t prefill_scratch_floats(int64_t n_tok, int64_t group, int64_t head_dim,
                                      int64_t width) {
  const int64_t rp = prefill_rows_padded(n_tok, group, width);
  // Qt, Ot, the scores, three row vectors; K and V blocks; two rows of the bf16 kernel's staging.
  return rp * (2 * head_dim + kPrefillKeys + 3) + 2 * kPrefillKeys * head_dim +
         2 * (head_dim + 32);
}

void attention_prefill_avx2(const PrefillBlock& a);
void attention_prefill_avx512(const PrefillBlock& a);
// The same on vdpbf16ps (attention_prefill_avx512_bf16.cc, which states its error bound):
// GemmPrecision::kBf16 where bf16_panels_preferred().
void attention_prefill_avx512_bf16(const PrefillBlock& a);

}  // namespace sampan::cpu::detail

namespace sampan::cpu {
namespace {

// s[0, nb) = e^(s - m) in place; returns their sum.
template <class S>
inline float exp_shift_sum(float* s, int64_t nb, float m) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  const V mv = S::set1(m);
  V sum = S::zero();
  int64_t j = 0;
  for (; j + kW <= nb; j += kW) {
    const V p = S::exp(S::sub(S::load(s + j), mv));
    S::store(s + j, p);
    sum = S::add(sum, p);
  }
  if (j < nb) {
    const int n = static_cast<int>(nb - j);
    // Lanes past n load 0 and give e^-m; they are masked out of the store but would enter the
    // sum, so the sum takes only the stored part (reloaded).
    const V p = S::exp(S::sub(S::load_n(s + j, n), mv));
    S::store_n(s + j, p, n);
    sum = S::add(sum, S::load_n(s + j, n));
  }
  return S::reduce_add(sum);
}

template <class S>
inline float max_of(const float* s, int64_t nb) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  float m = -INFINITY;
  int64_t j = 0;
  if (nb >= kW) {
    V mv = S::load(s);
    for (j = kW; j + kW <= nb; j += kW) mv = S::max(mv, S::load(s + j));
    m = S::reduce_max(mv);
  }
  for (; j < nb; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

template <class S>
inline void scale_in_place(float* x, int64_t n, float f) {
  using V = typename S::V;
  constexpr int kW = S::kWidth;
  const V fv = S::set1(f);
  int64_t d = 0;
  for (; d + kW <= n; d += kW) S::store(x + d, S::mul(S::load(x + d), fv));
  if (d < n) {
    S::store_n(x + d, S::mul(S::load_n(x + d, static_cast<int>(n - d)), fv),
               static_cast<int>(n - d));
  }
}

// The online-softmax step of one key block: sc [group, kKeyBlock] scores (nb valid) become
// e^(s - m) with m the updated running maxima mx [group]; the running sums sum [group] and the
// accumulators acc [group, hd] are rescaled when a maximum grew.
template <class S>
inline void softmax_block(float* sc, int64_t group, int64_t nb, int64_t hd, float* mx, float* sum,
                          float* acc) {
  constexpr int64_t kB = detail::kKeyBlock;
  for (int64_t g = 0; g < group; ++g) {
    float* sg = sc + g * kB;
    const float bm = max_of<S>(sg, nb);
    const float m_new = bm > mx[g] ? bm : mx[g];
    // All scores -inf (only with infinite inputs): nothing to add, and e^(-inf - -inf) would
    // be NaN.
    if (m_new == -INFINITY) {
      for (int64_t j = 0; j < nb; ++j) sg[j] = 0.0f;
      continue;
    }
    if (m_new != mx[g]) {
      const float corr = std::exp(mx[g] - m_new);  // 0 on the first block
      sum[g] *= corr;
      scale_in_place<S>(acc + g * hd, hd, corr);
      mx[g] = m_new;
    }
    sum[g] += exp_shift_sum<S>(sg, nb, m_new);
  }
}

// Normalises a.out, or hands the running maxima and sums over for a merge.
// Calls f(row, run, i) for positions j0 .. j0 + n - 1 of the range's sequence, one call per run
// of them inside one physical cache block: positions j0 + i .. j0 + i + run - 1 are the pool's
// rows row .. row + run - 1.
template <class F>
inline void for_each_block_run(const detail::AttentionRange& a, int64_t j0, int64_t n, F&& f) {
  const int64_t bs = a.block_size;
  for (int64_t i = 0, j = j0; i < n;) {
    const int64_t r = j % bs;
    const int64_t run = bs - r < n - i ? bs - r : n - i;
    f(static_cast<int64_t>(a.blocks[j / bs]) * bs + r, run, i);
    i += run;
    j += run;
  }
}

// kb[i], vb[i] = the K and V rows of position j0 + i for i < nb (the range's first KV head's
// record).
inline void key_block_rows(const detail::AttentionRange& a, int64_t j0, int64_t nb,
                           const uint8_t** kb, const uint8_t** vb) {
  for_each_block_run(a, j0, nb, [&](int64_t row, int64_t run, int64_t i) {
    for (int64_t e = 0; e < run; ++e) {
      kb[i + e] = a.k_rows + (row + e) * a.ld_bytes;
      vb[i + e] = a.v_rows + (row + e) * a.ld_bytes;
    }
  });
}

// The start of a range: out [heads, hd] zeroed, the running maxima mx [heads] at -inf and the
// sums sum [heads] at 0.
inline void start_range(const detail::AttentionRange& a, int64_t hd, float* mx, float* sum) {
  const int64_t heads = a.n_kv * a.group;
  for (int64_t i = 0; i < heads * hd; ++i) a.out[i] = 0.0f;
  for (int64_t g = 0; g < heads; ++g) {
    mx[g] = -INFINITY;
    sum[g] = 0.0f;
  }
}

// The K rows, then the V rows (rows, rows + n) of the key block after the one at j0: n of each,
// 0 when j0's block is the range's last.
inline int64_t next_block_rows(const detail::AttentionRange& a, int64_t j0,
                               const uint8_t** rows) {
  constexpr int64_t kB = detail::kKeyBlock;
  const int64_t n = j0 + kB > a.last ? 0 : std::min(a.last - j0 - kB + 1, kB);
  key_block_rows(a, j0 + kB, n, rows, rows + n);
  return n;
}

// Asks for the next key block's rows while the current block is computed, spread over the
// block's loops (step()), into L2. Spread, the requests overlap the arithmetic; in one burst
// before the block (a loop over the block's rows, which the AMX-INT8 loop removed in stop 55 used)
// they fill the core's miss buffers and stall it. Into L2, because the records are read from
// there once each (in place, kv_quant_impl.h) and a block of f32 rows (64 KB at TinyLlama's
// shape) does not fit L1 beside the current one. Rows in block-table order, each whole (every KV
// head of the range): a physical cache block is read as the contiguous run it is, while the loops
// read one KV head's records of every row in turn (a stride of the row), which the hardware
// prefetchers follow poorly: read in that order with nothing asked for ahead, a 4096-key cache
// of Llama-2-7B's heads streamed at 0.5-0.7 of the row-order read speed (Zen 3).
// Measured with the cache in memory (bench_attention --cold, one 4096-key sequence, one core),
// the f32 loop streamed 8.2 GB/s with one KV head per range and its rows gathered, 10.3 in place
// with this (9.0-9.5 with the same requests into L1); an explicit loop that only reads the rows
// through it, 15.4 (95 % of bandwidth_probe).
// A row longer than 4 KB goes out 1 KB at a time: a row of Llama-2-7B's 32 KV heads is 16 KB of
// f32 (256 lines), and asked for whole it was a burst of its own. Stop 71, Zen 3 VM,
// bench_attention --formats-only --shape llama2-7b, 4096 keys, paired rounds of the old and the
// new library (medians of 6 ratios of ms per call, 1 / 2 threads; a case no change touched
// ranged 0.82-1.0 in such rounds): bf16 0.83 / 0.75, f32 0.87 / 0.91 (4 KB pieces: 0.90 / 0.79,
// 0.90 / 0.92). Rows up to 4 KB stay whole: 1 KB pieces of Llama-3-8B's 4 KB rows measured
// 1.06-1.29x slower (f32, bf16).
// Tried and not kept (stop 77, Emerald Rapids VM, bench_attention --cold --formats-only, 4096-key
// decode, 3-4 paired rounds, medians of new / old time at 1 and 2 threads; Llama-2-7B's shape
// unless others are named):
//  - Head-major cache blocks ([n_blocks, n_kv_heads, block_size, record]: one KV head's records
//    of a block one contiguous run, so the per-head walk reads each block as a few sequential
//    streams), with these requests running a fixed 32 KB of records ahead of the loops instead
//    of a whole key block: 0.92-1.04 at avx512_vnni, 0.89-1.08 at avx2_vnni, in every format.
//    Stop 76's synthetic read had the per-head stride capping the compressed formats (3-8 GB/s
//    against 9.4-11.7 in row order); in these loops it does not. Their cold speed (int4 / fp8 at
//    ~50 % of the probe on this shape) is their arithmetic: the same loops with the cache hot in
//    L3 read int4 at 9.6 GB/s and fp8 at 9.3 on one core.
//  - No L2 requests for f32 (the L1 stream kept): 0.76-0.87 the time on the Llama-2-7B and
//    Llama-3-8B shapes in one hour, 1.01-1.08 an hour later with the same binaries (the
//    compressed formats 1.2-1.5x slower without them): the host's state, not a tuning.
//  - bf16 with f32's L1 stream (kNearPrefetch, kv_quant_impl.h) on the Llama-2-7B, Llama-3-8B
//    and TinyLlama shapes: 0.90-1.10.
// rows: n_rows row starts (the next block's K rows, then its V rows), each `bytes` long.
// kNear: also the L1 stream of start_near (kv_quant_impl.h's kNearPrefetch); without it, step()
// is the L2 stream alone (a second stream's check measured 3-7 % on the bf16 loop).
template <bool kNear = false>
struct SpreadPrefetch {
  // Rows up to kWholeRowBytes are asked for whole, longer ones kPieceBytes at a time (above).
  static constexpr int64_t kWholeRowBytes = 4096;
  static constexpr int64_t kPieceBytes = 1024;
  // Spreads the rows over `steps` calls of step(), into L2.
  void start(const uint8_t* const* rs, int64_t n, int64_t b, int64_t steps) {
    far_.start(rs, n, b, steps);
  }
  // Spreads one KV head's records over the next `steps` calls of step(), into L1: the V records
  // of the head whose scores are being computed, then the next head's K records while its V is
  // accumulated. Out of L2 (where start() put them), the first read of each line otherwise
  // waits on L2 in the V loop, whose loads the out-of-order window cannot run far enough ahead
  // of (32 FMAs per record on 8 chained accumulators).
  void start_near(const uint8_t* const* rs, int64_t n, int64_t b, int64_t steps) {
    if constexpr (kNear) near_.start(rs, n, b, steps);
  }
  [[gnu::always_inline]] void step() {
    far_.template step<_MM_HINT_T1>();
    if constexpr (kNear) near_.template step<_MM_HINT_T0>();
  }
  // What step() has not asked for yet.
  void drain() { far_.template drain<_MM_HINT_T1>(); }
  void drain_near() {
    if constexpr (kNear) near_.template drain<_MM_HINT_T0>();
  }

 private:
  struct Stream {
    const uint8_t* const* rows = nullptr;
    int64_t n_rows = 0;
    int64_t bytes = 0;
    int64_t pieces = 1;  // requests per row
    int64_t every = 1;   // step() calls per request
    int64_t tick = 0;
    int64_t r = 0;  // the next request: piece r % pieces of row r / pieces

    void start(const uint8_t* const* rs, int64_t n, int64_t b, int64_t steps) {
      rows = rs;
      pieces = b > kWholeRowBytes ? (b + kPieceBytes - 1) / kPieceBytes : 1;
      n_rows = n * pieces;
      bytes = b;
      every = n_rows > 0 && steps > n_rows ? steps / n_rows : 1;
      tick = 0;
      r = 0;
    }
    // Inlined (GCC otherwise calls it, from the loops that step it per 4 words).
    template <int kHint>
    [[gnu::always_inline]] void step() {
      if (++tick < every) return;
      tick = 0;
      if (r < n_rows) ask<kHint>();
    }
    template <int kHint>
    void drain() {
      while (r < n_rows) ask<kHint>();
    }
    template <int kHint>
    void ask() {
      uintptr_t p0, last;
      if (pieces == 1) {
        p0 = reinterpret_cast<uintptr_t>(rows[r++]);
        last = p0 + static_cast<uintptr_t>(bytes) - 1;
      } else {
        const int64_t at = r % pieces * kPieceBytes;
        p0 = reinterpret_cast<uintptr_t>(rows[r / pieces]) + static_cast<uintptr_t>(at);
        last = p0 + static_cast<uintptr_t>(std::min(bytes - at, kPieceBytes)) - 1;
        ++r;
      }
      for (uintptr_t p = p0 & ~uintptr_t{63}; p <= last; p += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p), static_cast<_mm_hint>(kHint));
      }
    }
  };
  struct NoStream {};
  Stream far_;
  [[no_unique_address]] std::conditional_t<kNear, Stream, NoStream> near_;
};

// mx, sum: [n_kv, group].
template <class S>
inline void finish_range(const detail::AttentionRange& a, const float* mx, const float* sum) {
  const int64_t hd = a.head_dim, heads = a.n_kv * a.group;
  if (a.m == nullptr) {
    for (int64_t g = 0; g < heads; ++g) {
      scale_in_place<S>(a.out + g * hd, hd, sum[g] > 0.0f ? 1.0f / sum[g] : 0.0f);
    }
  } else {
    for (int64_t g = 0; g < heads; ++g) {
      a.m[g] = mx[g];
      a.l[g] = sum[g];
    }
  }
}

}  // namespace
}  // namespace sampan::cpu
