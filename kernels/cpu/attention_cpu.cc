#include "kernels/cpu/attention_cpu.h"

#include <immintrin.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/attention_lanes_avx2.h"
#include "kernels/cpu/denormal_mode.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_avx2.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/kv_quant_impl.h"
#include "kernels/cpu/attention_prefill_impl.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {

namespace detail {

void attention_range_avx2(const AttentionRange& a) {
  if (attention_lanes_takes(a)) return attention_range_lanes_avx2(a);
  attention_range_any<Avx2>(a);
}
void attention_prefill_avx2(const PrefillBlock& a) { prefill_block_any<Avx2>(a); }

}  // namespace detail

namespace {

// A decode step of few sequences has few ranges, often fewer than the workers want; then long
// ranges are split (split-K, merged afterwards). Below this many keys per piece the merge and
// the hand-off cost more than the parallelism brings: measured on 2 threads with TinyLlama's 4
// KV heads (pieces take every KV head), 64 made a 512-key decode 1.2x slower than 128, and 256
// left a 256-key decode on one worker (1.3x slower than 128).
constexpr int64_t kMinSplitKeys = 128;
// Pieces of work per worker that the split aims for: enough that the dynamic hand-out evens out
// ranges of different lengths (sequences of a batch differ), few enough to keep merges rare.
constexpr int64_t kPiecesPerWorker = 4;

// Per-thread scratch, grown once: attention runs every layer of every step and must not allocate.
// Slot 0 for the per-token loop, slot 1 for the prefill kernel.
float* thread_scratch(int64_t n, int slot) {
  thread_local std::vector<float> buf[2];
  std::vector<float>& b = buf[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

// Query rows per prefill block (tokens times the group's heads): 8 vectors' worth. More rows
// share each dequantized key block among more products; fewer waste less on the causal diagonal
// (a block's last key block is half masked on average) and keep the scratch in L1 / L2.
// Measured (bench_attention prefill 512, TinyLlama shape, Zen 5, 1 thread, AVX-512): 64 rows
// 6.6-6.8 ms, 128 rows 6.1-6.3, 256 rows 9.0; on AVX2 32 and 64 rows within noise.
int64_t prefill_block_tokens(int64_t group, int64_t width) {
  return std::max<int64_t>(1, 8 * width / group);
}

// One task. kv_head < 0: key positions [first, last] of token t's sequence against every KV head;
// part < 0: the token's whole range, normalised straight into out; else the slot of a partial
// result. kv_head >= 0: the prefill block of n_tok tokens from batch row t (consecutive
// positions) against KV head kv_head, keys [first, last].
struct Piece {
  int64_t t = 0;
  int64_t first = 0;
  int64_t last = 0;
  int64_t part = -1;
  int64_t n_tok = 1;
  int64_t kv_head = -1;
};

// A token whose range was split into n pieces, in slots part .. part + n - 1.
struct Merge {
  int64_t t = 0;
  int64_t part = 0;
  int64_t n = 0;
};

// Folds the n_split partial results of one token into out: [group, head_dim], group the
// piece's query heads (all of the token's). part holds, per split, [group * head_dim]
// unnormalised sums, then [group] maxima and [group] sums.
void merge_splits(const float* part, int64_t n_split, int64_t group, int64_t hd, float* out) {
  const int64_t stride = group * hd + 2 * group;
  for (int64_t g = 0; g < group; ++g) {
    float m = -INFINITY;
    for (int64_t s = 0; s < n_split; ++s) {
      const float ms = part[s * stride + group * hd + g];
      m = ms > m ? ms : m;
    }
    float* o = out + g * hd;
    for (int64_t d = 0; d < hd; ++d) o[d] = 0.0f;
    float l = 0.0f;
    if (m == -INFINITY) continue;
    for (int64_t s = 0; s < n_split; ++s) {
      const float* ps = part + s * stride;
      const float ms = ps[group * hd + g];
      if (ms == -INFINITY) continue;  // a piece whose scores were all -inf
      const float f = std::exp(ms - m);
      l += f * ps[group * hd + group + g];
      const float* a = ps + g * hd;
      for (int64_t d = 0; d < hd; ++d) o[d] += f * a[d];
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
  }
}

}  // namespace

void kv_cache_write(int64_t n_tokens, const AttentionShape& shape, const float* k, int64_t ldk,
                    const float* v, int64_t ldv, const int32_t* pos, const int32_t* seq_ids,
                    const PagedKvCache& cache) {
  const int64_t width = shape.n_kv_heads * shape.head_dim;
  const int64_t bs = cache.block_size;
  const int64_t row_bytes = kv_row_bytes(cache.dtype, shape.n_kv_heads, shape.head_dim);
  auto* kb = static_cast<uint8_t*>(cache.k);
  auto* vb = static_cast<uint8_t*>(cache.v);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t p = pos[t];
    const int64_t block = cache.block_tables[seq_ids[t] * cache.max_blocks + p / bs];
    const int64_t row = block * bs + p % bs;
    if (cache.dtype == KvDtype::kF32) {
      std::memcpy(kb + row * row_bytes, k + t * ldk, static_cast<size_t>(width) * sizeof(float));
      std::memcpy(vb + row * row_bytes, v + t * ldv, static_cast<size_t>(width) * sizeof(float));
    } else {
      kv_quantize_row(cache.dtype, k + t * ldk, shape.n_kv_heads, shape.head_dim,
                      kb + row * row_bytes);
      kv_quantize_row(cache.dtype, v + t * ldv, shape.n_kv_heads, shape.head_dim,
                      vb + row * row_bytes);
    }
  }
}

int64_t attention_prefill_min_tokens(const AttentionShape& shape) {
  if (shape.n_kv_heads <= 0 || shape.n_heads < shape.n_kv_heads) {
    return INT64_MAX;
  }
  // Two vectors of query rows: with fewer, the kernel's broadcasts outnumber its products and the
  // per-token loop (which reads a key once for the token's heads anyway) is as fast.
  const int64_t width = has_avx512() ? 16 : 8;
  const int64_t group = shape.n_heads / shape.n_kv_heads;
  return std::max<int64_t>(2, util::ceil_div(2 * width, group));
}

void attention(int64_t n_tokens, const AttentionShape& shape, const float* q, int64_t ldq,
               const PagedKvCache& cache, const int32_t* pos, const int32_t* seq_ids, float* out,
               int64_t ldo, TaskRunner& runner) {
  if (n_tokens <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0) return;
  const int64_t n_kv = shape.n_kv_heads, hd = shape.head_dim;
  const int64_t group = shape.n_heads / n_kv;
  const int64_t window = shape.sliding_window;
  // int4 / int8 caches multiply in integers at the default precisions, on AVX512-VNNI
  // (attention_int_avx512_vnni.cc) and on CPUs without AVX-512 (attention_int_avx2.cc); kF32
  // keeps every product in f32, as does the plain avx512 level.
  const bool int_loop =
      gemm_precision() != GemmPrecision::kF32 && detail::attention_int_takes(cache.dtype, hd);
  const auto kernel = has_avx512_vnni() && int_loop ? detail::attention_range_int_avx512_vnni
                      : has_avx512()                ? detail::attention_range_avx512
                      : int_loop                    ? detail::attention_range_int_avx2
                                                    : detail::attention_range_avx2;
  // GemmPrecision::kBf16 rounds activations to bf16; the prefill kernel follows it where
  // vdpbf16ps runs at the FMA rate (attention_prefill_avx512_bf16.cc states its bound).
  const auto prefill_kernel =
      gemm_precision() == GemmPrecision::kBf16 && bf16_panels_preferred()
          ? detail::attention_prefill_avx512_bf16
      : has_avx512() ? detail::attention_prefill_avx512
                     : detail::attention_prefill_avx2;
  const int64_t width = has_avx512() ? 16 : 8;
  const int64_t min_run = attention_prefill_min_tokens(shape);
  const int64_t block_tokens = prefill_block_tokens(group, width);
  // Every KV head per piece: each cache row is read whole (kv_quant_impl.h).
  const int64_t scratch_floats = detail::attention_scratch_floats(group, hd, n_kv);
  // A partial result: [n_heads, hd] sums, [n_heads] maxima, [n_heads] sums of weights (merged
  // as one group of n_heads query heads).
  const int64_t n_heads = shape.n_heads;
  const int64_t part_stride = n_heads * (hd + 2);

  // Cut the work so that every worker gets about kPiecesPerWorker pieces of similar size, but
  // only ever by splitting long ranges: a batch with many ranges (prefill, a large decode batch)
  // is not split at all, a decode of one long sequence is split into pieces of at least
  // kMinSplitKeys keys. Each range is split on its own length, so a batch mixing long and short
  // sequences splits only the long ones.
  const int64_t workers = runner.concurrency();
  int64_t piece_len = INT64_MAX;  // keys
  if (workers > 1) {
    int64_t total = 0;
    for (int64_t t = 0; t < n_tokens; ++t) {
      total += pos[t] - attention_first_key(pos[t], window) + 1;
    }
    piece_len = std::max(util::ceil_div(total, kPiecesPerWorker * workers), kMinSplitKeys);
  }
  thread_local std::vector<Piece> pieces;
  thread_local std::vector<Merge> merges;
  pieces.clear();
  merges.clear();
  int64_t n_parts = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    // A run of consecutive positions of one sequence in consecutive rows (a prefill chunk) goes
    // to the prefill kernel in blocks of block_tokens tokens, one task per block and KV head.
    int64_t run = 1;
    while (t + run < n_tokens && seq_ids[t + run] == seq_ids[t] &&
           pos[t + run] == pos[t] + run) {
      ++run;
    }
    if (run >= min_run) {
      for (int64_t b = 0; b < run; b += block_tokens) {
        const int64_t nt = std::min(block_tokens, run - b);
        for (int64_t h = 0; h < n_kv; ++h) {
          pieces.push_back({t + b, attention_first_key(pos[t + b], window), pos[t + b] + nt - 1,
                            -1, nt, h});
        }
      }
      t += run - 1;
      continue;
    }
    const int64_t first = attention_first_key(pos[t], window), last = pos[t];
    const int64_t len = last - first + 1;
    const int64_t n_split = len > piece_len ? util::ceil_div(len, piece_len) : 1;
    if (n_split <= 1) {
      pieces.push_back({t, first, last, -1});
      continue;
    }
    // Equal chunks; none is empty since piece_len >= chunk.
    const int64_t chunk = util::ceil_div(len, n_split);
    merges.push_back({t, n_parts, n_split});
    for (int64_t i = 0; i < n_split; ++i) {
      const int64_t f = first + i * chunk;
      const int64_t l = f + chunk - 1 < last ? f + chunk - 1 : last;
      pieces.push_back({t, f, l, n_parts + i});
    }
    n_parts += n_split;
  }
  // Longest first, so that the parallel section ends evenly (later prefill tokens and longer
  // sequences see more keys).
  // Cost: query rows times keys.
  auto cost = [&](const Piece& p) {
    return (p.last - p.first + 1) * (p.kv_head < 0 ? n_heads : p.n_tok * group);
  };
  std::sort(pieces.begin(), pieces.end(),
            [&](const Piece& a, const Piece& b) { return cost(a) > cost(b); });
  thread_local std::vector<float> parts;
  if (static_cast<int64_t>(parts.size()) < n_parts * part_stride) {
    parts.resize(static_cast<size_t>(n_parts * part_stride));
  }
  float* part_base = parts.data();
  const Piece* piece_list = pieces.data();

  const int64_t prefill_floats = detail::prefill_scratch_floats(block_tokens, group, hd, width);
  const int64_t row_bytes = kv_row_bytes(cache.dtype, n_kv, hd);
  runner.run(static_cast<int64_t>(pieces.size()), [&](int64_t task) {
    // Weights e^(s - max) below e^-87 (the vector exp underflows gradually to e^-103.9: masked
    // keys, peaked heads), their rescales and products with V would be denormals, an assist
    // each; flushed they count as 0, out of reach of the f32 sums.
    const DenormalsFlushed flushed;
    const Piece& pc = piece_list[task];
    if (pc.kv_head >= 0) {
      detail::PrefillBlock b;
      b.q = q + pc.t * ldq;
      b.ldq = ldq;
      b.out = out + pc.t * ldo;
      b.ldo = ldo;
      b.n_tok = pc.n_tok;
      b.p0 = pos[pc.t];
      b.kv_head = pc.kv_head;
      b.window = window;
      b.dtype = cache.dtype;
      b.k_rows = static_cast<const uint8_t*>(cache.k);
      b.v_rows = static_cast<const uint8_t*>(cache.v);
      b.ld_bytes = row_bytes;
      b.blocks = cache.block_tables + seq_ids[pc.t] * cache.max_blocks;
      b.block_size = cache.block_size;
      b.group = group;
      b.head_dim = hd;
      b.scale = shape.scale;
      b.scratch = thread_scratch(prefill_floats, 1);
      prefill_kernel(b);
      return;
    }
    detail::AttentionRange a;
    a.n_kv = n_kv;
    a.q = q + pc.t * ldq;
    a.dtype = cache.dtype;
    a.k_rows = static_cast<const uint8_t*>(cache.k);
    a.v_rows = static_cast<const uint8_t*>(cache.v);
    a.ld_bytes = row_bytes;
    a.blocks = cache.block_tables + seq_ids[pc.t] * cache.max_blocks;
    a.block_size = cache.block_size;
    a.group = group;
    a.head_dim = hd;
    a.scale = shape.scale;
    a.first = pc.first;
    a.last = pc.last;
    a.scratch = thread_scratch(scratch_floats, 0);
    if (pc.part < 0) {
      a.out = out + pc.t * ldo;
    } else {
      float* part = part_base + pc.part * part_stride;
      a.out = part;
      a.m = part + n_heads * hd;
      a.l = part + n_heads * (hd + 1);
    }
    kernel(a);
  });
  if (merges.empty()) return;
  const Merge* merge_list = merges.data();
  runner.run(static_cast<int64_t>(merges.size()), [&](int64_t i) {
    const DenormalsFlushed flushed;
    const Merge& mg = merge_list[i];
    merge_splits(part_base + mg.part * part_stride, mg.n, n_heads, hd, out + mg.t * ldo);
  });
}

}  // namespace sampan::cpu
