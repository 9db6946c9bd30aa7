// The column walk shared by the decode drivers of quantized weights (gemm_quant_cpu.cc) and GGUF
// blocks (gemm_ggml_cpu.cc): one worker's output columns [c0, c1), R weight rows per kernel call.
//
// Why interleaved streams: one core streaming one sequential run of weights reached 0.65-0.75
// of the read bandwidth although its kernels compute 1.3-1.7x faster than the memory delivers
// (fp8 and int4 m = 1, Emerald Rapids VM). Its L1 misses are bounded by the fill buffers
// (~16 lines in flight: 16 x 64 B / ~100 ns ~ 10 GB/s) and the L2 streamer runs a few lines ahead
// of one stream only; a plain read loop gets ~15 GB/s because its misses hit what the streamer
// already fetched. Reading S runs far apart, in turn, gives the streamer S streams to run
// ahead on. Measured (one core, fp8 kernel, 1 GiB of weights, prefetch 2 KB ahead, GB/s against
// a plain read loop's 14.0-15.2 in the same run): one stream 10.4-11.2, 2 / 4 streams one
// row at a time 13.4 / 13.6, 4 streams 64 bytes at a time 14.0-14.2; adjacent rows interleaved
// 64 bytes at a time 6-9 (they share pages and confuse the streamer).
//
// So a worker's range is cut into per_call sub-ranges ("streams") of equal length, and kernel
// call t takes column t of each (kSiluMul: the gate and the up row of each: 2 x per_call
// streams). Kernels that decode their R rows together (64 bytes of each in turn) read the
// streams interleaved; the others read one row of each stream in turn. The last stream may be
// shorter: its missing rows are stood in for by stream 0's row of the same call (already in L1).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/common/gemm_weights.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/gemm_internal.h"

namespace sampan::cpu::gemm_detail {

// Output columns per epilogue pass and stream.
constexpr int64_t kDecodeStripe = 64;

struct DecodeWalk {
  const GemmWeights* w = nullptr;
  GemmEpilogue ep = GemmEpilogue::kStore;
  EpilogueFn epilogue = nullptr;  // kSiluMul only
  int rows = 0;                   // R per kernel call (kSiluMul: R / 2 gate + R / 2 up rows)
  int max_m = 0;                  // rows of x per kernel call
  int64_t m = 0;
  float* y = nullptr;  // [m, ldy]
  int64_t ldy = 0;
};

// Kernel-call scratch of the calling worker: kSiluMul results of one stripe of every stream.
struct DecodeWalkScratch {
  std::vector<float> gate;  // [m, streams, kDecodeStripe]
  std::vector<float> up;    // [m, streams, kDecodeStripe]
};

inline DecodeWalkScratch& decode_walk_scratch() {
  thread_local DecodeWalkScratch s;
  return s;
}

// Walks columns [c0, c1). row_of(b, r) -> Row locates row r of block b; dot(rows, i0, mb, out)
// runs the kernel on rows [R] and rows i0..i0 + mb of x, out[i * R + j] (i < mb). Writes y
// (bias added, or the kSiluMul epilogue applied).
// kGroup > 1: up to kGroup consecutive calls of a stripe are handed over together, as
// dot(rows, n, i0, mb, out) with rows [n][kMaxRows] and out [n][kMaxM * kMaxRows], so that the
// kernel side can walk k in chunks outermost and keep a chunk of x in L1 for all n calls.
template <typename Row, int kMaxRows, int kMaxM, int kGroup = 1, typename RowOf, typename Dot>
void walk_decode_columns(const DecodeWalk& d, int64_t c0, int64_t c1, RowOf&& row_of, Dot&& dot) {
  const GemmWeights& w = *d.w;
  const bool silu = d.ep == GemmEpilogue::kSiluMul;
  const int R = d.rows;
  const int streams = silu ? R / 2 : R;
  const int64_t len = (c1 - c0 + streams - 1) / streams;  // columns per stream (stream 0's)
  int64_t start[kMaxRows], end[kMaxRows];
  for (int j = 0; j < streams; ++j) {
    start[j] = std::min(c1, c0 + j * len);
    end[j] = std::min(c1, start[j] + len);
  }
  DecodeWalkScratch& s = decode_walk_scratch();
  const int64_t per_row = streams * kDecodeStripe;
  if (silu && static_cast<int64_t>(s.gate.size()) < d.m * per_row) {
    s.gate.resize(d.m * per_row);
    s.up.resize(d.m * per_row);
  }
  int64_t block_start[kMaxGemmBlocks + 1] = {};
  for (int b = 0; b < w.n_blocks; ++b) block_start[b + 1] = block_start[b] + w.rows[b];
  float out[kGroup][kMaxM * kMaxRows];
  // Per call: the rows and where they are. Declared once per walk: constructed (Row's member
  // initializers) and zeroed inside the loop, they cost a fifth of an int4 m = 1 call's time
  // (perf, 256 x 2048 int4 weights in L2); every entry a call reads is written before it.
  Row rows[kGroup][kMaxRows];
  bool valid[kGroup][kMaxRows];
  int blk[kGroup][kMaxRows];
  int64_t row_in_blk[kGroup][kMaxRows];
  for (int64_t t0 = 0; t0 < len; t0 += kDecodeStripe) {
    const int64_t width = std::min(kDecodeStripe, len - t0);
    for (int64_t tg = t0; tg < t0 + width; tg += kGroup) {
      const int n_calls = static_cast<int>(std::min<int64_t>(kGroup, t0 + width - tg));
      for (int q = 0; q < n_calls; ++q) {
        const int64_t t = tg + q;
        for (int j = 0; j < streams; ++j) {
          valid[q][j] = start[j] + t < end[j];
          const int64_t col = valid[q][j] ? start[j] + t : start[0] + t;
          if (silu) {
            rows[q][j] = row_of(0, col);
            rows[q][streams + j] = row_of(1, col);
          } else {
            int bb = 0;
            while (col >= block_start[bb + 1]) ++bb;
            blk[q][j] = bb;
            row_in_blk[q][j] = col - block_start[bb];
            rows[q][j] = row_of(bb, row_in_blk[q][j]);
          }
        }
      }
      for (int64_t i0 = 0; i0 < d.m; i0 += d.max_m) {
        const int mb = static_cast<int>(std::min<int64_t>(d.max_m, d.m - i0));
        if constexpr (kGroup == 1) {
          dot(rows[0], i0, mb, out[0]);
        } else {
          dot(rows, n_calls, i0, mb, &out[0][0]);
        }
        for (int q = 0; q < n_calls; ++q) {
          const int64_t t = tg + q;
          for (int i = 0; i < mb; ++i) {
            const float* o = out[q] + i * R;
            if (silu) {
              float* g = s.gate.data() + (i0 + i) * per_row + (t - t0);
              float* u = s.up.data() + (i0 + i) * per_row + (t - t0);
              for (int j = 0; j < streams; ++j) {
                g[j * kDecodeStripe] = o[j];
                u[j * kDecodeStripe] = o[streams + j];
              }
            } else {
              float* yrow = d.y + (i0 + i) * d.ldy;
              for (int j = 0; j < streams; ++j) {
                if (!valid[q][j]) continue;
                const float* bias = w.bias[blk[q][j]];
                yrow[start[j] + t] = o[j] + (bias ? bias[row_in_blk[q][j]] : 0.0f);
              }
            }
          }
        }
      }
    }
    if (silu) {
      for (int64_t i = 0; i < d.m; ++i) {
        for (int j = 0; j < streams; ++j) {
          const int64_t col = start[j] + t0;
          const int64_t n = std::min(width, end[j] - col);
          if (n <= 0) continue;
          const int64_t at = i * per_row + j * kDecodeStripe;
          const float* bg = w.bias[0] ? w.bias[0] + col : nullptr;
          const float* bu = w.bias[1] ? w.bias[1] + col : nullptr;
          d.epilogue(GemmEpilogue::kSiluMul, s.gate.data() + at, bg, s.up.data() + at, bu,
                     d.y + i * d.ldy + col, n);
        }
      }
    }
  }
}

}  // namespace sampan::cpu::gemm_detail
