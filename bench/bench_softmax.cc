// Row softmax on the CPU (kernels/cpu/softmax_cpu.h, what BERT-style attention_nc and the
// softmax op run) with part of each row masked the way encoders pad (-10000 added), next to the
// same call on unmasked rows in the same run: masked lanes used to make denormals (a microcode
// assist each on Intel cores), which this ratio shows.
//
//   bench_softmax [--reps N]
//
// 12 heads x 128 query rows of 128 keys (BERT-base at sequence 128), one thread; median of the
// repetitions, microseconds per call.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/bench_args.h"
#include "engine/core/thread_pool.h"
#include "kernels/cpu/softmax_cpu.h"

namespace bench = sampan::bench;

int main(int argc, char** argv) {
  int reps = 50;
  if (!bench::parse_reps_only(argc, argv, &reps)) return 2;
  const int rows = 12 * 128, n = 128;
  sampan::ThreadPool pool(1);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> plain(static_cast<size_t>(rows * n)), y(plain.size());
  for (float& v : plain) v = d(rng);
  std::printf("%-22s %12s %14s %8s\n", "masked keys per row", "masked us", "unmasked us", "ratio");
  for (const int masked : {0, 32, 96}) {
    std::vector<float> x = plain;
    for (int r = 0; r < rows; ++r) {
      for (int j = n - masked; j < n; ++j) x[static_cast<size_t>(r * n + j)] += -10000.0f;
    }
    std::vector<double> tm, tu;
    for (int r = 0; r < reps + 2; ++r) {
      double t0 = bench::now_s();
      sampan::cpu::softmax(rows, n, 1, x.data(), y.data(), pool);
      const double t1 = bench::now_s();
      sampan::cpu::softmax(rows, n, 1, plain.data(), y.data(), pool);
      const double t2 = bench::now_s();
      if (r >= 2) {
        tm.push_back(t1 - t0);
        tu.push_back(t2 - t1);
      }
    }
    const double a = bench::median(tm) * 1e6, b = bench::median(tu) * 1e6;
    std::printf("%-22d %12.1f %14.1f %8.2f\n", masked, a, b, a / b);
  }
  return 0;
}
