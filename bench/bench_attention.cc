// CPU paged attention speed on the TinyLlama-1.1B shape (32 query heads, 4 KV heads, head dim 64),
// one layer, per instruction set and thread count.
//
//   bench_attention [--reps N] [--block-size B] [--isa avx2|avx512]
//
// Cases (K/V in shuffled blocks of B rows of a shared pool, as the serving engine lays them out):
//   batched decode   64 sequences x 256 context, one token each, in one call
//   64 x 1 decode    the same 64 tokens, one call per sequence (what batching saves)
//   decode 1 x 4096  one sequence, long context (the split-K path)
//   prefill 512      one sequence, a 512-token prompt
// Reported: wall milliseconds per call (median after a warm-up), process CPU milliseconds per
// call (median; on a shared, overloaded machine the 1-thread CPU time is the figure to trust,
// with 2 threads it also counts the pool's spinning), and K/V bytes read per wall second (every
// attended K and V row counted once per (token, KV head), i.e. what a decode streams).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/isa.h"

namespace {

using sampan::ThreadPool;
using sampan::cpu::AttentionShape;
using sampan::cpu::Isa;
using sampan::cpu::PagedKvCache;

constexpr int64_t kHeads = 32, kKvHeads = 4, kHeadDim = 64;
constexpr int64_t kKvWidth = kKvHeads * kHeadDim;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A pool holding `n_seqs` sequences of `len` positions in shuffled blocks, and a batch of the
// last `n_new` positions of each.
struct Case {
  std::vector<float> k, v;       // [n_blocks, bs, kv_width]
  std::vector<int32_t> tables;   // [n_seqs, max_blocks]
  std::vector<int32_t> pos, seq;  // [n_tokens]
  std::vector<float> q, out;     // [n_tokens, heads * head_dim]
  PagedKvCache cache;
  int64_t kv_rows_read = 0;  // sum over tokens of attended positions
};

Case make_case(int64_t n_seqs, int64_t len, int64_t n_new, int64_t bs) {
  Case c;
  const int64_t per_seq = (len + bs - 1) / bs;
  const int64_t n_blocks = n_seqs * per_seq;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  c.k.resize(static_cast<size_t>(n_blocks * bs * kKvWidth));
  c.v.resize(c.k.size());
  for (float& x : c.k) x = unit(rng);
  for (float& x : c.v) x = unit(rng);
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  c.tables = ids;  // row s: blocks s * per_seq .. of the permutation
  for (int64_t s = 0; s < n_seqs; ++s) {
    for (int64_t p = len - n_new; p < len; ++p) {
      c.seq.push_back(static_cast<int32_t>(s));
      c.pos.push_back(static_cast<int32_t>(p));
      c.kv_rows_read += p + 1;
    }
  }
  c.q.resize(c.pos.size() * kHeads * kHeadDim);
  for (float& x : c.q) x = unit(rng);
  c.out.resize(c.q.size());
  c.cache.k = c.k.data();
  c.cache.v = c.v.data();
  c.cache.n_blocks = n_blocks;
  c.cache.block_size = bs;
  c.cache.block_tables = c.tables.data();
  c.cache.n_seqs = n_seqs;
  c.cache.max_blocks = per_seq;
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
template <class F>
Timing time_it(int reps, F&& fn) {
  fn();
  std::vector<double> wall, cpu;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_s(), c0 = cpu_s();
    fn();
    wall.push_back(now_s() - t0);
    cpu.push_back(cpu_s() - c0);
  }
  return {median(wall), median(cpu)};
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  int64_t bs = 16;
  std::string only_isa;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--block-size" && i + 1 < argc) {
      bs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--isa" && i + 1 < argc) {
      only_isa = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--reps N] [--block-size B] [--isa avx2|avx512]\n",
                   argv[0]);
      return 2;
    }
  }
  AttentionShape shape;
  shape.n_heads = kHeads;
  shape.n_kv_heads = kKvHeads;
  shape.head_dim = kHeadDim;
  shape.scale = 0.125f;

  Case batched = make_case(64, 256, 1, bs);
  Case long_decode = make_case(1, 4096, 1, bs);
  Case prefill = make_case(1, 512, 512, bs);
  struct Row {
    const char* name;
    Case* c;
    bool one_call_per_token;
  };
  const Row rows[] = {{"batched decode 64 x 256", &batched, false},
                      {"64 x 1 decode (256 ctx)", &batched, true},
                      {"decode 1 x 4096", &long_decode, false},
                      {"prefill 512", &prefill, false}};

  ThreadPool pool1(1), pool2(2);
  ThreadPool* pools[] = {&pool1, &pool2};
  const Isa saved = sampan::cpu::active_isa();
  std::printf("attention, %lld heads / %lld KV heads / head dim %lld, block size %lld\n",
              static_cast<long long>(kHeads), static_cast<long long>(kKvHeads),
              static_cast<long long>(kHeadDim), static_cast<long long>(bs));
  std::printf("%-8s %-26s %8s %10s %10s %10s\n", "isa", "case", "threads", "ms/call",
              "cpu ms", "KV GB/s");
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!sampan::cpu::isa_supported(isa)) continue;
    if (!only_isa.empty() && only_isa != sampan::cpu::isa_name(isa)) continue;
    sampan::cpu::set_isa(isa);
    for (const Row& r : rows) {
      for (ThreadPool* pool : pools) {
        Case& c = *r.c;
        const int64_t n = static_cast<int64_t>(c.pos.size());
        const int64_t qw = kHeads * kHeadDim;
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
        });
        const double bytes = static_cast<double>(c.kv_rows_read) * kKvWidth * 2 * sizeof(float);
        const std::string isa_str(sampan::cpu::isa_name(isa));
        std::printf("%-8s %-26s %8d %10.3f %10.3f %10.2f\n", isa_str.c_str(), r.name,
                    pool->concurrency(), tm.wall_s * 1e3, tm.cpu_s * 1e3, bytes / tm.wall_s / 1e9);
      }
    }
  }
  sampan::cpu::set_isa(saved);
  return 0;
}
