// GEMM speed for GGUF block-type weights (dtype kU8, gemm_ggml.h) on TinyLlama-1.1B shapes.
//
//   bench_gemm_ggml [--types Q4_0,Q8_0,...] [--m 1,4,16,512] [--threads 1,2] [--reps N]
//                   [--cached] [--isa avx2|avx512]
//
// For each type, shape (n x k: 2048x2048 q/o_proj, 5632x2048 gate/up, 2048x5632 down), m and
// thread count: the median time per call over the repeats after two warm-up calls, as GB/s of
// weight bytes read (n * ggml_row_bytes(k) / time) and GFLOP/s (2 m n k / time). Unless
// --cached, each call takes its weights from the next unread stretch of a 1 GiB pool, so they
// come from DRAM (the figure to compare with bandwidth_probe's read bandwidth at m = 1); with
// --cached every call reads the same weights (from L2/L3 by their size): the kernels' compute
// speed. m = 512 runs only on 2048x2048 (it is compute-bound and slow). With --cpu-time the
// times are the calling thread's CPU time (meaningful with --threads 1 only, where decode runs on
// the calling thread): use it on a machine shared with other work.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "kernels/common/ggml_type.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/isa.h"

namespace {

using sampan::GgmlType;
using sampan::ThreadPool;
using sampan::cpu::GemmEpilogue;
using sampan::cpu::GemmWeights;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of the calling thread: with one thread (the call runs on the caller) it is the
// kernel's own time even on a machine busy with other work.
double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

const GgmlType kAllTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1,   GgmlType::kQ5_0,
                              GgmlType::kQ5_1, GgmlType::kQ8_0,   GgmlType::kQ2_K,
                              GgmlType::kQ3_K, GgmlType::kQ4_K,   GgmlType::kQ5_K,
                              GgmlType::kQ6_K, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS};

struct Shape {
  const char* name;
  int64_t n, k;
};

const Shape kShapes[] = {
    {"2048x2048", 2048, 2048}, {"5632x2048", 5632, 2048}, {"2048x5632", 2048, 5632}};

}  // namespace

int main(int argc, char** argv) {
  std::vector<GgmlType> types(std::begin(kAllTypes), std::end(kAllTypes));
  std::vector<int64_t> ms = {1, 4, 16, 512};
  std::vector<int> threads = {1, 2};
  int reps = 15;
  bool cached = false, cpu_time = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--types") {
      types.clear();
      for (const std::string& t : split(next())) {
        for (GgmlType g : kAllTypes) {
          if (t == sampan::ggml_type_name(g)) types.push_back(g);
        }
      }
    } else if (a == "--m") {
      ms.clear();
      for (const std::string& v : split(next())) ms.push_back(std::stoll(v));
    } else if (a == "--threads") {
      threads.clear();
      for (const std::string& v : split(next())) threads.push_back(std::stoi(v));
    } else if (a == "--reps") {
      reps = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--cached") {
      cached = true;
    } else if (a == "--cpu-time") {
      cpu_time = true;
    } else if (a == "--isa") {
      const auto isa = sampan::cpu::isa_from_name(next());
      if (!isa || !sampan::cpu::set_isa(*isa)) {
        std::fprintf(stderr, "unsupported --isa\n");
        return 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--types Q4_0,...] [--m 1,4] [--threads 1,2] [--reps N] "
                   "[--cached] [--isa avx2|avx512]\n",
                   argv[0]);
      return 1;
    }
  }
  // The pool: random bytes with every odd byte's bit 6 clear, so every f16 scale field (all at
  // even offsets of even-sized blocks) is finite and below 2: no NaN or inf reaches the sums.
  const int64_t pool_bytes = cached ? (int64_t{64} << 20) : (int64_t{1} << 30);
  std::vector<uint8_t> pool(pool_bytes + 64);
  {
    std::mt19937_64 rng(42);
    for (int64_t i = 0; i + 8 <= pool_bytes; i += 8) {
      const uint64_t v = rng() & 0xbfbfbfbfbfbfbfbfull;
      std::memcpy(pool.data() + i, &v, 8);
    }
  }
  int64_t cursor = 0;
  std::vector<float> x, y;
  std::printf("isa %s, %s weights, median of %d calls, %s\n",
              std::string(sampan::cpu::isa_name(sampan::cpu::active_isa())).c_str(),
              cached ? "cached" : "streamed (DRAM)", reps,
              cpu_time ? "thread CPU time" : "wall time");
  std::printf("%-7s %-10s %5s %3s %10s %9s %9s\n", "type", "shape", "m", "thr", "us/call", "GB/s",
              "GFLOP/s");
  for (int nt : threads) {
    ThreadPool tp(nt);
    for (GgmlType t : types) {
      for (const Shape& s : kShapes) {
        for (int64_t m : ms) {
          if (m > 16 && s.n != 2048) continue;
          if (m > 16 && s.k != 2048) continue;
          const int64_t bytes = s.n * sampan::ggml_row_bytes(t, s.k);
          x.assign(m * s.k, 0.5f);
          for (int64_t i = 0; i < m * s.k; ++i)
            x[i] = static_cast<float>((i * 7919) % 1001) / 1000 - 0.5f;
          y.assign(m * s.n, 0.0f);
          const int calls = m > 16 ? std::max(3, reps / 5) : reps;
          std::vector<double> times;
          for (int c = 0; c < calls + 2; ++c) {
            if (cached || cursor + bytes > pool_bytes) cursor = 0;
            GemmWeights w;
            w.dtype = sampan::DType::kU8;
            w.ggml_type = t;
            w.k = s.k;
            w.n_blocks = 1;
            w.data[0] = pool.data() + cursor;
            w.rows[0] = s.n;
            cursor += (bytes + 63) / 64 * 64;
            const double t0 = cpu_time ? thread_cpu_s() : now_s();
            sampan::cpu::gemm(m, x.data(), s.k, w, GemmEpilogue::kStore, y.data(), s.n, tp);
            if (c >= 2) times.push_back((cpu_time ? thread_cpu_s() : now_s()) - t0);
          }
          std::sort(times.begin(), times.end());
          const double sec = times[times.size() / 2];
          std::printf("%-7s %-10s %5lld %3d %10.1f %9.2f %9.2f\n", sampan::ggml_type_name(t),
                      s.name, static_cast<long long>(m), nt, sec * 1e6, bytes / sec * 1e-9,
                      2.0 * m * s.n * s.k / sec * 1e-9);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}
