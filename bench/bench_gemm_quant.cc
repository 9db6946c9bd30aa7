// Quantized-weight GEMM speed (kF8E4M3, kI4 group 128 or --group) next to bf16, on TinyLlama-1.1B
// shapes.
//
//   bench_gemm_quant [gemv] [gemm] [--cached] [--reps N] [--isa LEVEL (avx2 ... amx: isa.h)]
//                    [--m 1,4,8] [--format bf16|fp8|int4|int4gN] [--group 32|64|128] [--small-pages]
//                    [--fp8-random]
//                    (default: gemv and gemm, best ISA, streaming, GEMV m = 1, 4, 8, all formats)
//
// GEMV (decode, m = 1, 4 and 8; --m picks others, e.g. 16 for the prefill path): bytes streamed per call (packed weights + scales) / time, in GB/s
// and as a fraction of the read bandwidth measured just before the table with the same threads
// (summing a 2 GiB buffer). Each call takes its weights and scales from the next unread stretch
// of a 1.5 GiB pool, so they come from DRAM, not the (480 MB here) last-level cache.
// With --cached every call reads the same weights instead (from L2 or L3 by their size): the
// kernels' compute speed, which must exceed the read bandwidth for streaming to reach it.
// GEMM (prefill, m = 128 and 512): GFLOP/s (2*m*n*k per call), weights reused from cache.
// Figures are medians over the repeats after two warm-up calls; threads are a ThreadPool of 1, 2.
// fp8 weights are the E4M3 codes of Gaussian weights quantized per row (absmax -> 448, as
// `sampan quantize` does): about 1 code in 10^4 is subnormal. --fp8-random fills them with
// uniformly random bytes instead (1 code in 16 subnormal), the worst case for kernels whose
// speed depends on the codes (f32 denormals).
// GCC 12 warns about its own intrinsics' undefined pass-through operands (fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <optional>
#include <vector>

#include "bench/bench_buffers.h"
#include "engine/core/thread_pool.h"
#include "quant/fp8.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/isa.h"

namespace {

using sampan::DType;
using sampan::ThreadPool;
using sampan::cpu::GemmEpilogue;
using sampan::cpu::GemmWeights;
using sampan::cpu::Isa;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Shape {
  const char* name;
  int64_t n, k;  // per block
  int blocks;
  GemmEpilogue ep;
};

const Shape kShapes[] = {
    {"q/o_proj 2048x2048", 2048, 2048, 1, GemmEpilogue::kStore},
    {"k/v_proj 256x2048", 256, 2048, 1, GemmEpilogue::kStore},
    {"gate+up 2x5632x2048 silu", 5632, 2048, 2, GemmEpilogue::kSiluMul},
    {"down 2048x5632", 2048, 5632, 1, GemmEpilogue::kStore},
    {"lm_head 32000x2048", 32000, 2048, 1, GemmEpilogue::kStore},
};

enum class Format { kBf16, kFp8, kInt4 };
const Format kFormats[] = {Format::kBf16, Format::kFp8, Format::kInt4};
// INT4 group size (--group; GGUF Q4_0 files run as group 32).
int64_t g_group = 128;

std::string format_name(Format f) {
  switch (f) {
    case Format::kBf16: return "bf16";
    case Format::kFp8: return "fp8";
    case Format::kInt4: return "int4g" + std::to_string(g_group);
  }
  return "?";
}

// --format: empty (every format), a format's name, or "int4" for the INT4 one of any group.
bool format_matches(const std::string& only, Format f) {
  return only.empty() || only == format_name(f) || (f == Format::kInt4 && only == "int4");
}

// Bytes of one block's packed weights and of its scales.
int64_t data_bytes(Format f, int64_t n, int64_t k) {
  switch (f) {
    case Format::kBf16: return 2 * n * k;
    case Format::kFp8: return n * k;
    case Format::kInt4: return n * k / 2;
  }
  return 0;
}
int64_t scale_bytes(Format f, int64_t n, int64_t k) {
  switch (f) {
    case Format::kBf16: return 0;
    case Format::kFp8: return 4 * n;
    case Format::kInt4: return 2 * n * (k / g_group);
  }
  return 0;
}

__attribute__((target("avx512f"))) float sum_avx512(const float* p,  // [n]
                                                    int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

__attribute__((target("avx2"))) float sum_avx2(const float* p,  // [n]
                                               int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(a0, a1));
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

// Read bandwidth (GB/s) with the pool's threads each summing a contiguous part. buf: [n] f32.
double read_bandwidth(ThreadPool& pool, const float* buf, int64_t n, int reps) {
  const bool avx512 = sampan::cpu::isa_supported(Isa::kAvx512);
  const int threads = pool.concurrency();
  std::vector<float> sink(threads);
  std::vector<double> times;
  for (int r = 0; r < reps + 1; ++r) {
    const double t0 = now_s();
    pool.run(threads, [&](int64_t t) {
      const int64_t b = n / threads * t, e = n / threads * (t + 1);
      sink[t] += avx512 ? sum_avx512(buf + b, e - b) : sum_avx2(buf + b, e - b);
    });
    if (r > 0) times.push_back(now_s() - t0);
  }
  volatile float keep = sink[0];
  (void)keep;
  return n * 4.0 / median(times) / 1e9;
}

struct Bench {
  int reps = 15;
  bool huge_pages = true;
  // 16-bit values 0x3c00..0x3fff and their negatives: normal as bf16 and as f16, and their
  // bytes are normal E4M3 or random low bytes; as f32 (fp8 scales) pairs of them are normal.
  PageBuffer<uint16_t> pool;
  PageBuffer<uint16_t> pool_fp8;  // the same size: E4M3 codes (fill_pool_fp8) or random bytes
  bool fp8_random = false;
  int64_t cursor = 0;  // bytes: where the next cycled call's weights start
};

void fill_pool(PageBuffer<uint16_t>& p, uint32_t seed) {
  std::mt19937 rng(seed);
  for (auto& v : p) {
    const uint32_t r = rng();
    v = static_cast<uint16_t>(0x3c00 | (r & 0x3ff) | ((r >> 16) & 0x8000));
  }
}

// E4M3 codes of rows of 2048 Gaussian weights, each row scaled so that its absmax is 448, laid
// over the whole pool (1 MiB of codes repeated at shifting offsets: the memory system does not
// see the repetition, and filling 1.5 GiB code by code would take minutes). The f32 row scales
// the bench reads from the pool then hold such bytes too: 4 codes read as an f32 are a normal
// number unless the top one is a zero code (1 in ~10^5), and a scale's value does not change
// the kernels' speed.
void fill_pool_fp8(PageBuffer<uint16_t>& p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss;
  constexpr int64_t kRow = 2048, kTile = int64_t(1) << 20;
  std::vector<uint8_t> tile(kTile);
  std::vector<float> row(kRow);
  for (int64_t r0 = 0; r0 < kTile; r0 += kRow) {
    float absmax = 0.0f;
    for (float& v : row) absmax = std::max(absmax, std::fabs(v = gauss(rng)));
    for (int64_t c = 0; c < kRow; ++c) {
      tile[r0 + c] = sampan::quant::f32_to_fp8_e4m3(row[c] / absmax * 448.0f);
    }
  }
  uint8_t* dst = reinterpret_cast<uint8_t*>(p.data());
  const int64_t bytes = p.size() * 2;
  for (int64_t at = 0, shift = 0; at < bytes; at += kTile, shift = (shift + 4099) % kTile) {
    const int64_t n = std::min(kTile, bytes - at), first = std::min(n, kTile - shift);
    std::memcpy(dst + at, tile.data() + shift, static_cast<size_t>(first));
    std::memcpy(dst + at + first, tile.data(), static_cast<size_t>(n - first));
  }
}

// Seconds per call (median). With `cycle`, each call reads the pool right after the previous one.
double time_call(Bench& b, const Shape& s, Format f, int64_t m, ThreadPool& threads, bool cycle,
                 int reps) {
  std::vector<float> x(m * s.k);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : x) v = dist(rng);
  const int64_t n_out = s.ep == GemmEpilogue::kSiluMul ? s.n : s.n * s.blocks;
  std::vector<float> y(m * n_out);
  const int64_t db = data_bytes(f, s.n, s.k), sb = (scale_bytes(f, s.n, s.k) + 63) / 64 * 64;
  const int64_t call_bytes = (db + sb) * s.blocks;
  const PageBuffer<uint16_t>& pool = f == Format::kFp8 ? b.pool_fp8 : b.pool;
  const int64_t pool_bytes = static_cast<int64_t>(pool.size()) * 2;
  auto call = [&] {
    GemmWeights w;
    w.dtype = f == Format::kBf16 ? DType::kBF16 : f == Format::kFp8 ? DType::kF8E4M3 : DType::kI4;
    w.k = s.k;
    w.n_blocks = s.blocks;
    w.group_size = g_group;
    w.scale_dtype = DType::kF16;
    if (!cycle || b.cursor + call_bytes > pool_bytes) b.cursor = 0;
    const uint8_t* base = reinterpret_cast<const uint8_t*>(pool.data()) + b.cursor;
    if (cycle) b.cursor += call_bytes;
    for (int i = 0; i < s.blocks; ++i) {
      w.data[i] = base + i * (db + sb);
      w.scales[i] = base + i * (db + sb) + db;
      w.rows[i] = s.n;
    }
    sampan::cpu::gemm(m, x.data(), s.k, w, s.ep, y.data(), n_out, threads);
  };
  call();
  call();
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_s();
    call();
    times.push_back(now_s() - t0);
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  bool want_gemv = false, want_gemm = false, cached = false;
  std::string only_isa, only_format;
  std::vector<int64_t> gemv_ms = {1, 4, 8};
  Bench b;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "gemv") {
      want_gemv = true;
    } else if (a == "gemm") {
      want_gemm = true;
    } else if (a == "--fp8-random") {
      b.fp8_random = true;
    } else if (a == "--small-pages") {
      b.huge_pages = false;
    } else if (a == "--cached") {
      cached = true;
    } else if (a == "--reps" && i + 1 < argc) {
      b.reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--isa" && i + 1 < argc) {
      only_isa = argv[++i];
    } else if (a == "--m" && i + 1 < argc) {
      gemv_ms.clear();
      for (const char* p = argv[++i]; *p;) {
        char* end = nullptr;
        const long v = std::strtol(p, &end, 10);
        if (end == p || v < 1) break;
        gemv_ms.push_back(v);
        p = *end == ',' ? end + 1 : end;
      }
    } else if (a == "--format" && i + 1 < argc) {
      only_format = argv[++i];
    } else if (a == "--group" && i + 1 < argc) {
      g_group = std::atoi(argv[++i]);
      if (g_group != 32 && g_group != 64 && g_group != 128) {
        std::fprintf(stderr, "error: --group must be 32, 64 or 128\n");
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [gemv] [gemm] [--cached] [--reps N] [--isa LEVEL] "
                   "[--m 1,4,8] [--format bf16|fp8|int4|int4gN] [--group 32|64|128] [--small-pages] "
                   "[--fp8-random]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!want_gemv && !want_gemm) want_gemv = want_gemm = true;
  if (!only_isa.empty()) {
    const std::optional<Isa> isa = sampan::cpu::isa_from_name(only_isa);
    if (!isa || !sampan::cpu::set_isa(*isa)) {
      std::fprintf(stderr, "error: --isa %s not supported here\n", only_isa.c_str());
      return 2;
    }
  }
  std::printf("isa: %s\n", std::string(sampan::cpu::isa_name(sampan::cpu::active_isa())).c_str());
  ThreadPool pool1(1), pool2(2);
  ThreadPool* pools[] = {&pool1, &pool2};

  if (want_gemv) {
    b.pool.assign((int64_t(3) << 30) / 4, b.huge_pages);  // 1.5 GiB
    fill_pool(b.pool, 1);
    b.pool_fp8.assign(b.pool.size(), b.huge_pages);
    if (b.fp8_random) {
      fill_pool(b.pool_fp8, 3);
    } else {
      fill_pool_fp8(b.pool_fp8, 3);
    }
    const int64_t probe_n = (int64_t(2) << 30) / 4;
    PageBuffer<float> probe;
    probe.assign(probe_n, b.huge_pages);
    std::fill(probe.begin(), probe.end(), 1.0f);
    for (int64_t m : gemv_ms) {
      double bw[2];
      for (int t = 0; t < 2; ++t) bw[t] = read_bandwidth(*pools[t], probe.data(), probe_n, 5);
      std::printf("\nread bandwidth (sum of 2 GiB): 1 thread %.1f GB/s, 2 threads %.1f GB/s\n", bw[0],
                  bw[1]);
      std::printf("GEMV m=%ld: GB/s %s (weights + scales), fraction of read bandwidth\n",
                  static_cast<long>(m), cached ? "from cache" : "streamed");
      std::printf("%-26s %-9s %15s %15s\n", "shape", "format", "1 thread", "2 threads");
      for (const Shape& s : kShapes) {
        for (Format f : kFormats) {
          if (!format_matches(only_format, f)) continue;
          std::printf("%-26s %-9s", s.name, format_name(f).c_str());
          for (int t = 0; t < 2; ++t) {
            const double sec = time_call(b, s, f, m, *pools[t], !cached, b.reps);
            const double bytes =
                static_cast<double>(data_bytes(f, s.n, s.k) + scale_bytes(f, s.n, s.k)) * s.blocks;
            const double gbs = bytes / sec / 1e9;
            std::printf("   %6.1f (%4.2f)", gbs, gbs / bw[t]);
          }
          std::printf("\n");
          std::fflush(stdout);
        }
      }
    }
  }

  if (want_gemm) {
    int64_t most = 0;
    for (const Shape& s : kShapes) most = std::max(most, 2 * s.n * s.k * s.blocks + 4 * s.n * s.blocks);
    b.pool.assign(most / 2 + 64, b.huge_pages);
    fill_pool(b.pool, 2);
    b.pool_fp8.assign(b.pool.size(), b.huge_pages);
    if (b.fp8_random) {
      fill_pool(b.pool_fp8, 4);
    } else {
      fill_pool_fp8(b.pool_fp8, 4);
    }
    for (int64_t m : {128, 512}) {
      std::printf("\nGEMM m=%ld: GFLOP/s\n", static_cast<long>(m));
      std::printf("%-26s %-9s %10s %10s\n", "shape", "format", "1 thread", "2 threads");
      for (const Shape& s : kShapes) {
        for (Format f : kFormats) {
          if (!format_matches(only_format, f)) continue;
          std::printf("%-26s %-9s", s.name, format_name(f).c_str());
          for (int t = 0; t < 2; ++t) {
            const double sec = time_call(b, s, f, m, *pools[t], false, std::min(b.reps, 5));
            std::printf(" %10.0f", 2.0 * m * s.n * s.blocks * s.k / sec / 1e9);
          }
          std::printf("\n");
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
