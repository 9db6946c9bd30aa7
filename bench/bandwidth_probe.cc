// Standalone DRAM read-bandwidth probe: the ceiling a memory-bound decode step can reach.
//
//   bandwidth_probe [--threads N] [--bytes B] [--repeats R] [--isa auto|avx512|avx2|scalar] [--json]
//
// Reads a buffer much larger than the last-level cache (default 2 GiB; this machine reports a
// 480 MB L3) with 1..N threads (default N = 2), each thread streaming its own contiguous slice,
// and prints the median GB/s (1e9 bytes/s) over R repeats. Needs only the standard library; the
// SIMD loops carry their own target attribute because bench/ is not built with -mavx2.

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// 2 MiB pages (transparent huge pages, asked for before the buffer is touched), as the engine's
// allocator gives its large buffers: the ceiling is measured the way the weights are read.
constexpr size_t kAlign = size_t(2) << 20;
constexpr size_t kLine = 64;

enum class Isa { kScalar, kAvx2, kAvx512 };

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

// Four independent accumulators per loop keep several loads in flight; the sum is returned so
// the compiler cannot drop the reads.
__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* p,  // [n]
                                                         size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 256 <= n; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 192));
  }
  __m512i s = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, s);
  uint64_t sum = 0;
  for (uint64_t v : lanes) sum += v;
  return sum;
}

__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p,  // [n]
                                                   size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

uint64_t read_scalar(const uint8_t* p,  // [n]
                     size_t n) {
  const uint64_t* q = reinterpret_cast<const uint64_t*>(p);
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (size_t i = 0; i + 4 <= n / 8; i += 4) {
    a0 += q[i];
    a1 += q[i + 1];
    a2 += q[i + 2];
    a3 += q[i + 3];
  }
  return a0 + a1 + a2 + a3;
}

uint64_t read_slice(Isa isa, const uint8_t* p,  // [n]
                    size_t n) {
  switch (isa) {
    case Isa::kAvx512: return read_avx512(p, n);
    case Isa::kAvx2: return read_avx2(p, n);
    case Isa::kScalar: return read_scalar(p, n);
  }
  return 0;
}

struct Options {
  int max_threads = 2;
  size_t bytes = size_t{2} << 30;
  int repeats = 9;
  std::string isa = "auto";
  bool json = false;
};

size_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit = end ? std::string(end) : "";
  double mult = 1;
  if (unit == "K" || unit == "KiB") mult = 1024.0;
  else if (unit == "M" || unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty()) return 0;
  return static_cast<size_t>(v * mult);
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    if (a == "--json") o->json = true;
    else if (a == "--threads" && has_value) o->max_threads = std::atoi(argv[++i]);
    else if (a == "--bytes" && has_value) o->bytes = parse_bytes(argv[++i]);
    else if (a == "--repeats" && has_value) o->repeats = std::atoi(argv[++i]);
    else if (a == "--isa" && has_value) o->isa = argv[++i];
    else return false;
  }
  return o->max_threads >= 1 && o->max_threads <= 1024 && o->repeats >= 1 &&
         o->bytes >= (size_t{1} << 20);
}

Isa pick_isa(const std::string& want, bool* ok) {
  __builtin_cpu_init();
  bool has512 = __builtin_cpu_supports("avx512f");
  bool has2 = __builtin_cpu_supports("avx2");
  *ok = true;
  if (want == "auto") return has512 ? Isa::kAvx512 : has2 ? Isa::kAvx2 : Isa::kScalar;
  if (want == "avx512" && has512) return Isa::kAvx512;
  if (want == "avx2" && has2) return Isa::kAvx2;
  if (want == "scalar") return Isa::kScalar;
  *ok = false;
  return Isa::kScalar;
}

// One timed pass: every thread streams its slice once; the time runs from the first thread's
// start to the last thread's finish, so a straggler counts against the figure as it would in a
// GEMV. Spin loops yield because the machine may have no spare core for the waiting main thread.
double timed_pass(Isa isa, const uint8_t* buf,  // [bytes]
                  size_t bytes, int threads, uint64_t* sink) {
  size_t slice = (bytes / threads) / kLine * kLine;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<Clock::time_point> begin(threads), done(threads);
  std::vector<uint64_t> sums(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      begin[t] = Clock::now();
      sums[t] = read_slice(isa, buf + t * slice, slice);
      done[t] = Clock::now();
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  for (uint64_t s : sums) *sink += s;
  double secs = std::chrono::duration<double>(*std::max_element(done.begin(), done.end()) -
                                              *std::min_element(begin.begin(), begin.end()))
                    .count();
  return static_cast<double>(slice) * threads / secs / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse(argc, argv, &opt)) {
    std::fprintf(stderr,
                 "usage: %s [--threads N (1..N measured, default 2)] [--bytes B (suffix K/M/G, "
                 "default 2G)] [--repeats R] [--isa auto|avx512|avx2|scalar] [--json]\n",
                 argv[0]);
    return 2;
  }
  bool isa_ok = false;
  Isa isa = pick_isa(opt.isa, &isa_ok);
  if (!isa_ok) {
    std::fprintf(stderr, "error: --isa %s not supported on this CPU\n", opt.isa.c_str());
    return 2;
  }
  size_t bytes = (opt.bytes + kAlign - 1) / kAlign * kAlign;
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(kAlign, bytes));
  if (!buf) {
    std::fprintf(stderr, "error: cannot allocate %zu bytes\n", bytes);
    return 1;
  }
  ::madvise(buf, bytes, MADV_HUGEPAGE);  // advice: a no-op where THP is off
  // Touch every page (with non-zero data) before timing so page faults are not measured.
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t v = i * 0x9E3779B97F4A7C15ull;
    std::memcpy(buf + i, &v, 8);
  }

  uint64_t sink = 0;
  std::string json = "{\"bytes\":" + std::to_string(bytes) + ",\"repeats\":" +
                     std::to_string(opt.repeats) + ",\"isa\":\"" + isa_name(isa) +
                     "\",\"results\":[";
  for (int threads = 1; threads <= opt.max_threads; ++threads) {
    timed_pass(isa, buf, bytes, threads, &sink);  // warm-up: TLB, thread start-up
    std::vector<double> gbps;
    for (int r = 0; r < opt.repeats; ++r) gbps.push_back(timed_pass(isa, buf, bytes, threads, &sink));
    std::sort(gbps.begin(), gbps.end());
    double median = gbps[gbps.size() / 2];
    if (opt.json) {
      char item[160];
      std::snprintf(item, sizeof item,
                    "%s{\"threads\":%d,\"gbps_median\":%.3f,\"gbps_min\":%.3f,\"gbps_max\":%.3f}",
                    threads > 1 ? "," : "", threads, median, gbps.front(), gbps.back());
      json += item;
    } else {
      std::printf("read bandwidth, %d thread%s, %s, %.2f GiB x %d: median %.2f GB/s (min %.2f, "
                  "max %.2f)\n",
                  threads, threads > 1 ? "s" : "", isa_name(isa),
                  static_cast<double>(bytes) / (1u << 30), opt.repeats, median, gbps.front(),
                  gbps.back());
    }
  }
  json += "]}";
  if (opt.json) std::printf("%s\n", json.c_str());
  std::free(buf);
  // The checksum keeps every read observable; printing it to stderr keeps stdout parseable.
  std::fprintf(stderr, "checksum %llu\n", static_cast<unsigned long long>(sink));
  return 0;
}
