// silu_mul (kernels/cpu/silu_mul_cpu.h: the SiLU-mul op of every Llama MLP, the graph form) over
// rows where a third of the gates are large (~100, the "massive activations" some layers of
// large models carry), next to rows of ordinary gates, in the same run: e^-g below f32's normal
// range used to make denormals (a microcode assist per lane on Intel cores).
//
//   bench_silu [--reps N]
//
// 64 rows of 5632 (TinyLlama's MLP width), one thread, median of the repetitions.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/bench_args.h"
#include "kernels/cpu/silu_mul_cpu.h"
#include "kernels/cpu/task_runner.h"

namespace bench = sampan::bench;

int main(int argc, char** argv) {
  int reps = 30;
  if (!bench::parse_reps_only(argc, argv, &reps)) return 2;
  const int64_t n = 5632, rows = 64;
  std::vector<float> plain(static_cast<size_t>(rows * n)), big(plain.size());
  const std::vector<float> u(plain.size(), 1.0f);
  std::vector<float> y(plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    plain[i] = static_cast<float>(i % 7) * 0.5f - 1.5f;
    big[i] = plain[i] + (i % 3 == 0 ? 100.0f : 0.0f);
  }
  sampan::cpu::SerialRunner serial;
  std::vector<double> tb, tp;
  for (int r = 0; r < reps + 2; ++r) {
    const double t0 = bench::now_s();
    sampan::cpu::silu_mul(rows, n, big.data(), n, u.data(), n, y.data(), n, serial);
    const double t1 = bench::now_s();
    sampan::cpu::silu_mul(rows, n, plain.data(), n, u.data(), n, y.data(), n, serial);
    const double t2 = bench::now_s();
    if (r >= 2) {
      tb.push_back(t1 - t0);
      tp.push_back(t2 - t1);
    }
  }
  const double a = bench::median(tb) * 1e6, b = bench::median(tp) * 1e6;
  std::printf("silu_mul %ld x %ld: a third of the gates ~100 %.1f us, ordinary gates %.1f us, "
              "ratio %.2f\n",
              static_cast<long>(rows), static_cast<long>(n), a, b, a / b);
  return 0;
}
