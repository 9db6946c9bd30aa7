// CPU paged attention speed on the TinyLlama-1.1B shape (32 query heads, 4 KV heads, head dim 64;
// --shape llama3-8b: 32 / 8 / 128, llama2-7b: 32 / 32 / 128, qwen2.5-7b: 28 / 4 / 128,
// qwen1.5-1.8b: 16 / 16 / 128), one layer, per instruction set and thread count.
//
//   bench_attention [--reps N] [--block-size B] [--isa avx2|avx512|avx512_vnni|avx512_bf16|amx]
//                   [--formats-only] [--cold] [--format f32|bf16|fp8|int8|int4] [--q-scale S]
//                   [--shape tinyllama|llama3-8b|llama2-7b|qwen2.5-7b|qwen1.5-1.8b]
//
// Cases (K/V in shuffled blocks of B rows of a shared pool, as the serving engine lays them out):
//   batched decode   64 sequences x 256 context, one token each, in one call
//   64 x 1 decode    the same 64 tokens, one call per sequence (what batching saves)
//   decode 1 x 4096  one sequence, long context (the split-K path)
//   prefill 512      one sequence, a 512-token prompt
// Then decode per KV-cache format (f32, bf16, fp8, int8, int4; kv_cache_write fills the pools):
//   decode 1 x 512, decode 1 x 4096, batched decode 64 x 256. At the avx512_vnni level and above
//   int8 and int4 take the integer loop (attention_int_avx512_vnni.cc), at avx512 the FMA loop:
//   `--isa avx512` and `--isa avx512_vnni` compare the two.
// Reported: wall milliseconds per call (median after a warm-up), process CPU milliseconds per
// call (median; on a shared, overloaded machine the 1-thread CPU time is the figure to trust,
// with 2 threads it also counts the pool's spinning), and K/V cache bytes read per wall second
// (every attended K and V row, in its format's bytes, counted once per token, i.e. what a decode
// streams).
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <iterator>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/task_runner.h"

namespace {

using sampan::ThreadPool;
using sampan::cpu::AttentionShape;
using sampan::cpu::Isa;
using sampan::KvDtype;
using sampan::cpu::PagedKvCache;

// The attention shape (--shape): TinyLlama-1.1B's by default, Llama-3-8B's with --shape llama3-8b.
int64_t g_heads = 32, g_kv_heads = 4, g_head_dim = 64;
int64_t g_kv_width = g_kv_heads * g_head_dim;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A pool holding `n_seqs` sequences of `len` positions in shuffled blocks, and a batch of the
// last `n_new` positions of each.
// A pool buffer as the engine's CPU allocator gives it (engine/core/device.cc): from 2 MiB on,
// 2 MiB-aligned with transparent huge pages asked for before it is touched. On 4 KiB pages every
// cache block of a few KB is a fresh page walk and the hardware prefetchers stop at each page
// edge, which is not what a decode step sees.
struct PoolBuffer {
  std::unique_ptr<uint8_t, decltype(&std::free)> p{nullptr, &std::free};
  size_t n = 0;

  void resize(size_t bytes) {
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    void* raw = nullptr;
    if (::posix_memalign(&raw, kHuge, rounded) != 0) std::abort();
    ::madvise(raw, rounded, MADV_HUGEPAGE);  // advice: a no-op where THP is off
    std::memset(raw, 0, rounded);
    p.reset(static_cast<uint8_t*>(raw));
    n = bytes;
  }
  uint8_t* data() const { return p.get(); }
  size_t size() const { return n; }
};

struct Case {
  PoolBuffer k, v;               // [n_blocks, bs, kv_row_bytes]
  std::vector<int32_t> tables;   // [n_seqs, max_blocks]
  std::vector<int32_t> pos, seq;  // [n_tokens]
  std::vector<float> q, out;     // [n_tokens, heads * head_dim]
  PagedKvCache cache;
  int64_t kv_rows_read = 0;  // sum over tokens of attended positions
  int64_t row_bytes = 0;
};

// --q-scale S: q uniform in [-S, S] instead of [-1, 1]. S = 100 spreads a head's scores over
// hundreds, so most softmax weights fall below f32's normal range (what a peaked head, an
// attention sink, makes), where denormals would cost a microcode assist each.
float g_q_scale = 1.0f;

Case make_case(int64_t n_seqs, int64_t len, int64_t n_new, int64_t bs,
               KvDtype dtype = KvDtype::kF32) {
  Case c;
  const int64_t per_seq = (len + bs - 1) / bs;
  const int64_t n_blocks = n_seqs * per_seq;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  c.row_bytes = sampan::kv_row_bytes(dtype, g_kv_heads, g_head_dim);
  c.k.resize(static_cast<size_t>(n_blocks * bs * c.row_bytes));
  c.v.resize(c.k.size());
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  c.tables = ids;  // row s: blocks s * per_seq .. of the permutation
  c.cache.k = c.k.data();
  c.cache.v = c.v.data();
  c.cache.dtype = dtype;
  c.cache.n_blocks = n_blocks;
  c.cache.block_size = bs;
  c.cache.block_tables = c.tables.data();
  c.cache.n_seqs = n_seqs;
  c.cache.max_blocks = per_seq;
  // Every position of every sequence, written (quantized) as the engine would.
  {
    AttentionShape s;
    s.n_heads = g_kv_heads;
    s.n_kv_heads = g_kv_heads;
    s.head_dim = g_head_dim;
    std::vector<float> k(static_cast<size_t>(len * g_kv_width)), v(k.size());
    std::vector<int32_t> pos(static_cast<size_t>(len)), seq(pos.size());
    std::iota(pos.begin(), pos.end(), 0);
    for (int64_t sq = 0; sq < n_seqs; ++sq) {
      for (float& x : k) x = unit(rng);
      for (float& x : v) x = unit(rng);
      std::fill(seq.begin(), seq.end(), static_cast<int32_t>(sq));
      sampan::cpu::kv_cache_write(len, s, k.data(), g_kv_width, v.data(), g_kv_width, pos.data(),
                                  seq.data(), c.cache);
    }
  }
  for (int64_t s = 0; s < n_seqs; ++s) {
    for (int64_t p = len - n_new; p < len; ++p) {
      c.seq.push_back(static_cast<int32_t>(s));
      c.pos.push_back(static_cast<int32_t>(p));
      c.kv_rows_read += p + 1;
    }
  }
  c.q.resize(c.pos.size() * g_heads * g_head_dim);
  for (float& x : c.q) x = g_q_scale * unit(rng);
  c.out.resize(c.q.size());
  return c;
}

double cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Timing {
  double wall_s = 0;
  double cpu_s = 0;
};

// Wall and process CPU seconds per run of `fn`, medians of `reps` after one warm-up.
// --cold: every timed call finds the K/V pools in memory, not in any cache, as a decode step does
// after the weights of the layers between two attention calls have streamed through the caches
// (the cache of a few MB per layer fits this VM's L3, which would otherwise hold it hot).
bool g_cold = false;

void flush(const PoolBuffer& buf) {
  for (size_t i = 0; i < buf.size(); i += 64) _mm_clflush(buf.data() + i);
  _mm_mfence();
}

template <class F>
Timing time_it(int reps, F&& fn, const PoolBuffer* k = nullptr, const PoolBuffer* v = nullptr) {
  fn();
  std::vector<double> wall, cpu;
  for (int r = 0; r < reps; ++r) {
    if (g_cold && k != nullptr) {
      flush(*k);
      flush(*v);
    }
    const double t0 = now_s(), c0 = cpu_s();
    fn();
    wall.push_back(now_s() - t0);
    cpu.push_back(cpu_s() - c0);
  }
  return {median(wall), median(cpu)};
}

struct Row {
  const char* name;
  Case* c;
  bool one_call_per_token;
};

// One line per (row, thread count) on the active ISA; `label` heads the line (the ISA, or the
// ISA and KV format).
void run_rows(const std::string& label, const Row* rows, size_t n_rows, int reps,
              ThreadPool* const* pools, size_t n_pools) {
  AttentionShape shape;
  shape.n_heads = g_heads;
  shape.n_kv_heads = g_kv_heads;
  shape.head_dim = g_head_dim;
  shape.scale = 0.125f;
  for (size_t ri = 0; ri < n_rows; ++ri) {
    const Row& r = rows[ri];
    for (size_t pi = 0; pi < n_pools; ++pi) {
      ThreadPool* pool = pools[pi];
      Case& c = *r.c;
      const int64_t n = static_cast<int64_t>(c.pos.size());
      const int64_t qw = g_heads * g_head_dim;
      const Timing tm = time_it(reps, [&] {
        if (!r.one_call_per_token) {
          sampan::cpu::attention(n, shape, c.q.data(), qw, c.cache, c.pos.data(), c.seq.data(),
                                 c.out.data(), qw, *pool);
          return;
        }
        for (int64_t t = 0; t < n; ++t) {
          sampan::cpu::attention(1, shape, c.q.data() + t * qw, qw, c.cache, &c.pos[size_t(t)],
                                 &c.seq[size_t(t)], c.out.data() + t * qw, qw, *pool);
        }
      }, &c.k, &c.v);
      const double bytes = static_cast<double>(c.kv_rows_read) * 2.0 * c.row_bytes;
      std::printf("%-14s %-26s %8d %10.3f %10.3f %10.2f\n", label.c_str(), r.name,
                  pool->concurrency(), tm.wall_s * 1e3, tm.cpu_s * 1e3, bytes / tm.wall_s / 1e9);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  int64_t bs = 16;
  std::string only_isa;
  bool formats_only = false;
  std::string only_format;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--block-size" && i + 1 < argc) {
      bs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--isa" && i + 1 < argc) {
      only_isa = argv[++i];
    } else if (a == "--formats-only") {
      formats_only = true;
    } else if (a == "--q-scale" && i + 1 < argc) {
      g_q_scale = std::strtof(argv[++i], nullptr);
    } else if (a == "--cold") {
      g_cold = true;
    } else if (a == "--shape" && i + 1 < argc) {
      const std::string shape = argv[++i];
      if (shape == "llama3-8b") {
        g_heads = 32;
        g_kv_heads = 8;
        g_head_dim = 128;
      } else if (shape == "llama2-7b") {  // one query head per KV head
        g_heads = 32;
        g_kv_heads = 32;
        g_head_dim = 128;
      } else if (shape == "qwen2.5-7b") {  // 7 query heads per KV head
        g_heads = 28;
        g_kv_heads = 4;
        g_head_dim = 128;
      } else if (shape == "qwen1.5-1.8b") {  // MHA, 16 heads: int8 rows of 2.1 KB
        g_heads = 16;
        g_kv_heads = 16;
        g_head_dim = 128;
      } else if (shape != "tinyllama") {
        std::fprintf(stderr,
                     "error: --shape: unknown shape '%s' "
                     "(tinyllama|llama3-8b|llama2-7b|qwen2.5-7b|qwen1.5-1.8b)\n",
                     shape.c_str());
        return 2;
      }
      g_kv_width = g_kv_heads * g_head_dim;
    } else if (a == "--format" && i + 1 < argc) {
      only_format = argv[++i];
      formats_only = true;
      KvDtype parsed;
      if (!sampan::parse_kv_dtype(only_format.c_str(), &parsed)) {
        std::fprintf(stderr,
                     "error: --format: unknown KV-cache format '%s' (f32|bf16|fp8|int8|int4)\n",
                     only_format.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--reps N] [--block-size B] "
                   "[--isa avx2|avx2_vnni|avx512|avx512_vnni|avx512_bf16|amx] "
                   "[--formats-only] "
                   "[--cold] [--format f32|bf16|fp8|int8|int4] [--q-scale S] "
                   "[--shape tinyllama|llama3-8b|llama2-7b|qwen2.5-7b|qwen1.5-1.8b]\n",
                   argv[0]);
      return 2;
    }
  }
  ThreadPool pool1(1), pool2(2);
  ThreadPool* const pools[] = {&pool1, &pool2};
  const Isa saved = sampan::cpu::active_isa();
  std::vector<Isa> isas;
  // amx: the same kernels as avx512_bf16 (attention has no tile path; see attention_cpu.h).
  // avx2_vnni: as avx2 but for the int4 / int8 caches' decode, whose integer loop
  // (attention_int_avx2.cc) takes VEX vpdpwssd there; only in the per-format table.
  // avx512_vnni: as avx512 but for the int4 / int8 caches' decode, which multiplies in integers
  // there (attention_int_avx512_vnni.cc); only in the per-format table.
  // avx512_bf16: as avx512_vnni but for the prefill, whose kernel multiplies in bf16 there with
  // SAMPAN_GEMM_PRECISION=bf16 (on CPUs that run vdpbf16ps at the FMA rate); only in the first
  // table.
  for (Isa isa : {Isa::kAvx2, Isa::kAvx2Vnni, Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAvx512Bf16,
                  Isa::kAmx}) {
    if (!sampan::cpu::isa_supported(isa)) continue;
    if (!only_isa.empty() && only_isa != sampan::cpu::isa_name(isa)) continue;
    isas.push_back(isa);
  }
  std::printf("attention, %lld heads / %lld KV heads / head dim %lld, block size %lld\n",
              static_cast<long long>(g_heads), static_cast<long long>(g_kv_heads),
              static_cast<long long>(g_head_dim), static_cast<long long>(bs));
  std::printf("%-14s %-26s %8s %10s %10s %10s\n", "isa", "case", "threads", "ms/call",
              "cpu ms", "KV GB/s");
  if (!formats_only) {
    Case batched = make_case(64, 256, 1, bs);
    Case long_decode = make_case(1, 4096, 1, bs);
    Case prefill = make_case(1, 512, 512, bs);
    const Row rows[] = {{"batched decode 64 x 256", &batched, false},
                        {"64 x 1 decode (256 ctx)", &batched, true},
                        {"decode 1 x 4096", &long_decode, false},
                        {"prefill 512", &prefill, false}};
    for (Isa isa : isas) {
      if (isa == Isa::kAvx512Vnni || isa == Isa::kAvx2Vnni) continue;
      sampan::cpu::set_isa(isa);
      run_rows(std::string(sampan::cpu::isa_name(isa)), rows, std::size(rows), reps, pools,
               std::size(pools));
    }
  }
  // Decode per KV-cache format: the bytes streamed shrink with the format, the work per byte
  // grows (dequantization in the dot products and the V accumulation).
  std::printf("\ndecode by KV-cache format (GB/s of cache bytes in the format)\n");
  for (KvDtype dt : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF8E4M3, KvDtype::kI8,
                     KvDtype::kI4}) {
    if (!only_format.empty() && only_format != sampan::kv_dtype_name(dt)) continue;
    Case d512 = make_case(1, 512, 1, bs, dt);
    Case d4096 = make_case(1, 4096, 1, bs, dt);
    Case batched = make_case(64, 256, 1, bs, dt);
    const Row rows[] = {{"decode 1 x 512", &d512, false},
                        {"decode 1 x 4096", &d4096, false},
                        {"batched decode 64 x 256", &batched, false}};
    for (Isa isa : isas) {
      if (isa == Isa::kAvx512Bf16) continue;
      sampan::cpu::set_isa(isa);
      run_rows(std::string(sampan::cpu::isa_name(isa)) + " " + sampan::kv_dtype_name(dt),
               rows, std::size(rows), reps, pools, std::size(pools));
    }
  }
  sampan::cpu::set_isa(saved);
  return 0;
}
