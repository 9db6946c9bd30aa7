// CPU GEMM/GEMV speed on TinyLlama-1.1B shapes, per instruction set and thread count.
//
//   bench_gemm [gemv] [gemm] [--reps N] [--isa avx2|avx512|avx512_bf16|amx] [--m 128,512]
//              [--dtype bf16|f16|f32] [--shape SUBSTRING]
//   (default: both sections, every ISA of that list the CPU has, GEMM m = 128 and 512, bf16 and
//   f16 weights, every shape)
//
// GEMV (decode, m = 1, 4, 8): weight bytes / time, in GB/s and as a fraction of the read
// bandwidth measured just before each table with the same thread count (AVX-512 or AVX2 loads
// summing a 2 GiB buffer). Every call takes its weights from the next unread stretch of a
// 1.5 GiB pool, so the numbers are DRAM, not last-level cache (some servers have L3s of
// hundreds of MB), as in a real decode step that streams the whole model.
// GEMM (prefill): GFLOP/s (2*m*n*k per call). Levels with a bf16 prefill path (avx512_bf16:
// the vdpbf16ps panels; amx) get a column per GemmPrecision: "split" (kSplitBf16, the default)
// and "bf16" (kBf16); avx512 is the f32 FMA panels.
// Every figure is the median of the repeats after two warm-up calls; threads are a
// sampan::ThreadPool of 1 or 2.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_buffers.h"
#include "engine/core/thread_pool.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/gemm_internal.h"
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

__attribute__((target("avx512f"))) float sum_avx512(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  float t[16];
  _mm512_storeu_ps(t, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  float s = 0;
  for (float v : t) s += v;
  return s;
}

__attribute__((target("avx2"))) float sum_avx2(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

// Read bandwidth in GB/s with `pool`'s threads each summing a contiguous part of buf.
// buf: [n] f32.
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

// Random finite 16-bit values that are normal numbers both as bf16 and as f16 (|v| in
// [2^-7, 2) as bf16, [1, 2) as f16), so one pool serves both dtypes without denormal stalls.
void fill_16bit(uint16_t* p, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t r = rng();
    p[i] = static_cast<uint16_t>(0x3c00 | (r & 0x3ff) | ((r >> 16) & 0x8000));
  }
}

struct Bench {
  int reps = 15;
  // Weights for GEMV: every call reads the next unread stretch. Aligned as the engine's weight
  // buffers are (a batched decode on AMX reads aligned bf16 rows in place; see gemm_amx.cc).
  PageBuffer<uint16_t> pool;
  int64_t cursor = 0;          // where the next GEMV call's weights start, across all shapes
};

// Seconds per call, median over `reps` after two warm-up calls. With `cycle`, every call takes
// its weights from the pool right after the previous call's (wrapping around), so no call finds
// its weights in a cache, whatever shape ran before.
double time_gemm(Bench& b, const Shape& s, DType dt, int64_t m, ThreadPool& threads, bool cycle,
                 int reps) {
  // In 16-bit pool elements: f32 weights take two each.
  const int64_t block_elems = s.n * s.k * (dt == DType::kF32 ? 2 : 1);
  const int64_t call_elems = block_elems * s.blocks;
  std::vector<float> x(m * s.k);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : x) v = dist(rng);
  const int64_t n_out = s.ep == GemmEpilogue::kSiluMul ? s.n : s.n * s.blocks;
  std::vector<float> y(m * n_out);
  std::vector<float> bias(s.n, 0.01f);
  auto call = [&] {
    GemmWeights w;
    w.dtype = dt;
    w.k = s.k;
    w.n_blocks = s.blocks;
    if (!cycle || b.cursor + call_elems > static_cast<int64_t>(b.pool.size())) b.cursor = 0;
    const uint16_t* base = b.pool.data() + b.cursor;
    if (cycle) b.cursor += call_elems;
    for (int i = 0; i < s.blocks; ++i) {
      w.data[i] = base + i * block_elems;
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

const char* dtype_name(DType dt) {
  return dt == DType::kF16 ? "f16" : dt == DType::kF32 ? "f32" : "bf16";
}

// The GemmPrecision settings worth a column at `isa`: only the bf16 paths read it.
std::vector<sampan::cpu::GemmPrecision> precisions_at(Isa isa) {
  using sampan::cpu::GemmPrecision;
  if (isa == Isa::kAvx512Bf16 || isa == Isa::kAmx) {
    return {GemmPrecision::kSplitBf16, GemmPrecision::kBf16};
  }
  return {GemmPrecision::kSplitBf16};
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < s.size();) {
    const size_t j = std::min(s.find(',', i), s.size());
    out.push_back(std::atoll(s.substr(i, j - i).c_str()));
    i = j + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bool want_gemv = false, want_gemm = false;
  std::string only_isa, only_shape;
  std::vector<int64_t> gemm_ms = {128, 512};
  std::vector<DType> gemm_dtypes = {DType::kBF16, DType::kF16};
  Bench b;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "gemv")
      want_gemv = true;
    else if (a == "gemm")
      want_gemm = true;
    else if (a == "--reps" && i + 1 < argc)
      b.reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--isa" && i + 1 < argc)
      only_isa = argv[++i];
    else if (a == "--m" && i + 1 < argc)
      gemm_ms = parse_list(argv[++i]);
    else if (a == "--shape" && i + 1 < argc)
      only_shape = argv[++i];
    else if (a == "--dtype" && i + 1 < argc) {
      const std::string d = argv[++i];
      gemm_dtypes = {d == "f16" ? DType::kF16 : d == "f32" ? DType::kF32 : DType::kBF16};
    } else {
      std::fprintf(stderr,
                   "usage: %s [gemv] [gemm] [--reps N] [--isa avx2|avx512|avx512_bf16|amx] "
                   "[--m 128,512] [--dtype bf16|f16|f32] [--shape SUBSTRING]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!want_gemv && !want_gemm) want_gemv = want_gemm = true;

  ThreadPool pool1(1), pool2(2);
  ThreadPool* pools[] = {&pool1, &pool2};
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16, Isa::kAmx}) {
    if (!sampan::cpu::isa_supported(isa)) continue;
    if (!only_isa.empty() && only_isa != sampan::cpu::isa_name(isa)) continue;
    isas.push_back(isa);
  }
  const Isa saved = sampan::cpu::active_isa();

  // Measured again before every GEMV table: on a shared machine the bandwidth a thread gets
  // drifts, and each table is compared with what it had at the time.
  double bw[2];
  // Allocated once and kept: freeing 2 GiB between tables made the next measurements erratic.
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> probe_buf;
  const int64_t probe_n = (int64_t(2) << 30) / 4;
  auto probe = [&] {
    if (!probe_buf) {
      probe_buf.reset(static_cast<float*>(std::aligned_alloc(64, probe_n * 4)));
      std::fill(probe_buf.get(), probe_buf.get() + probe_n, 1.0f);
    }
    std::printf("read bandwidth (sum of 2 GiB): ");
    for (int t = 0; t < 2; ++t) {
      bw[t] = read_bandwidth(*pools[t], probe_buf.get(), probe_n, 5);
      std::printf("%d thread%s %.1f GB/s%s", t + 1, t ? "s" : "", bw[t], t ? "\n" : ", ");
    }
  };

  // Below the AMX threshold the AMX setting runs the AVX-512 kernels: no column of its own.
  auto gemv_column = [](Isa isa, int64_t m) {
    return isa != Isa::kAvx512Bf16 && (isa != Isa::kAmx || m >= sampan::cpu::gemm_detail::kAmxMinM);
  };
  if (want_gemv) {
    b.pool.assign((int64_t(3) << 30) / 4, false);  // 1.5 GiB of 16-bit weights, 4 KiB pages
    fill_16bit(b.pool.data(), b.pool.size(), 1);
    for (int64_t m : {1, 4, 8}) {
      std::printf("\n");
      probe();
      // Untimed: the first calls after the probe ran slow in some runs on a shared machine.
      time_gemm(b, kShapes[0], DType::kBF16, m, pool1, true, 30);
      std::printf("GEMV m=%ld: GB/s of weights (fraction of read bandwidth, same threads)\n",
                  static_cast<long>(m));
      std::printf("%-26s %-5s", "shape", "dtype");
      for (Isa isa : isas) {
        if (!gemv_column(isa, m)) continue;
        for (int t = 1; t <= 2; ++t) {
          std::printf(
              " %13s",
              (std::string(sampan::cpu::isa_name(isa)) + "/" + std::to_string(t) + "t").c_str());
        }
      }
      std::printf("\n");
      for (const Shape& s : kShapes) {
        for (DType dt : {DType::kBF16, DType::kF16}) {
          std::printf("%-26s %-5s", s.name, dtype_name(dt));
          for (Isa isa : isas) {
            if (!gemv_column(isa, m)) continue;
            sampan::cpu::set_isa(isa);
            for (int t = 0; t < 2; ++t) {
              const double sec = time_gemm(b, s, dt, m, *pools[t], true, b.reps);
              const double gbs = 2.0 * s.n * s.k * s.blocks / sec / 1e9;
              std::printf(" %6.1f (%4.2f)", gbs, gbs / bw[t]);
            }
          }
          std::printf("\n");
          std::fflush(stdout);
        }
      }
    }
  }

  if (want_gemm) {
    // A single copy: prefill is compute-bound and reuses the weights from cache by design.
    // (f32 weights take twice the elements of the 16-bit pool.)
    int64_t most = 0;
    for (const Shape& s : kShapes) most = std::max(most, s.n * s.k * s.blocks);
    b.pool.assign(2 * most, false);
    fill_16bit(b.pool.data(), 2 * most, 2);
    const sampan::cpu::GemmPrecision saved_precision = sampan::cpu::gemm_precision();
    for (int64_t m : gemm_ms) {
      std::printf("\nGEMM m=%ld: GFLOP/s\n", static_cast<long>(m));
      std::printf("%-26s %-5s", "shape", "dtype");
      for (Isa isa : isas) {
        for (sampan::cpu::GemmPrecision p : precisions_at(isa)) {
          std::string name(sampan::cpu::isa_name(isa));
          if (precisions_at(isa).size() > 1) {
            name += p == sampan::cpu::GemmPrecision::kBf16 ? "-bf16" : "-split";
          }
          for (int t = 1; t <= 2; ++t) {
            std::printf(" %18s", (name + "/" + std::to_string(t) + "t").c_str());
          }
        }
      }
      std::printf("\n");
      for (const Shape& s : kShapes) {
        if (!only_shape.empty() && std::string(s.name).find(only_shape) == std::string::npos) {
          continue;
        }
        for (DType dt : gemm_dtypes) {
          std::printf("%-26s %-5s", s.name, dtype_name(dt));
          for (Isa isa : isas) {
            sampan::cpu::set_isa(isa);
            for (sampan::cpu::GemmPrecision p : precisions_at(isa)) {
              sampan::cpu::set_gemm_precision(p);
              // The FMA paths take ~0.05-1 s per call here; a few repeats are enough.
              const int reps = isa == Isa::kAmx ? b.reps : std::min(b.reps, 5);
              for (int t = 0; t < 2; ++t) {
                const double sec = time_gemm(b, s, dt, m, *pools[t], false, reps);
                std::printf(" %18.0f", 2.0 * m * s.n * s.blocks * s.k / sec / 1e9);
              }
            }
          }
          std::printf("\n");
          std::fflush(stdout);
        }
      }
    }
    sampan::cpu::set_gemm_precision(saved_precision);
  }
  sampan::cpu::set_isa(saved);
  return 0;
}
