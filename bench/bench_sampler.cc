// Token sampling cost on the CPU (engine/runtime/sampler.h) per call, for vocabularies of
// Llama-2 (32,000) and Llama-3 (128,256) size, next to one scalar log-sum-exp pass over the
// same logits (std::exp in double, what the sampler ran per call before its vector passes), in
// the same run.
//
//   bench_sampler [--reps N]
//
// Cases: greedy (temperature 0: the checks, the argmax, and the log-sum-exp for the chosen
// token's logprob; and without logprobs, SamplingParams::logprobs false), temperature 1,
// temperature 0.3 over logits of spread 10 (most weights far below the largest: where
// denormals once cost a microcode assist per lane), top-k 40, top-p 0.9, and top-p 0.9 over near-flat logits (temperature 1: most of the vocabulary in the
// nucleus). Logits are Gaussian (standard deviation 3, 10 or 0.5), seeded.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/bench_args.h"
#include "engine/runtime/sampler.h"

namespace bench = sampan::bench;

namespace {

using sampan::runtime::Sampler;
using sampan::runtime::SamplingParams;

struct Case {
  const char* name;
  float spread, temperature;
  int top_k;
  float top_p;
  bool logprobs = true;  // SamplingParams::logprobs
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 200;
  if (!bench::parse_reps_only(argc, argv, &reps)) return 2;
  const Case cases[] = {{"greedy", 3, 0, 0, 1},
                        {"greedy, no logprobs", 3, 0, 0, 1, false},
                        {"temperature 1", 3, 1, 0, 1},
                        {"temperature 0.3, spread 10", 10, 0.3f, 0, 1},
                        {"top-k 40", 3, 0.7f, 40, 1},
                        {"top-p 0.9", 3, 0.7f, 0, 0.9f},
                        {"top-p 0.9, flat", 0.5f, 1, 0, 0.9f}};
  std::printf("%-28s %8s %14s %22s %8s\n", "case", "vocab", "sample us", "scalar log-sum-exp us",
              "ratio");
  for (const int vocab : {32000, 128256}) {
    for (const Case& c : cases) {
      std::mt19937 rng(11);
      std::normal_distribution<float> d(0.0f, c.spread);
      std::vector<float> logits(static_cast<size_t>(vocab));
      for (float& l : logits) l = d(rng);
      SamplingParams p;
      p.temperature = c.temperature;
      p.top_k = c.top_k;
      p.top_p = c.top_p;
      p.logprobs = c.logprobs;
      p.seed = 1;
      Sampler s(p);
      const std::vector<int32_t> seen;
      std::vector<double> ts, tr;
      volatile double sink = 0;
      for (int r = 0; r < reps + 2; ++r) {
        double t0 = bench::now_s();
        sink = sink + s.sample(logits, seen).id;
        const double t1 = bench::now_s();
        const float mx = *std::max_element(logits.begin(), logits.end());
        double z = 0;
        for (const float l : logits) z += std::exp(l - mx);
        sink = sink + z;
        const double t2 = bench::now_s();
        if (r >= 2) {
          ts.push_back(t1 - t0);
          tr.push_back(t2 - t1);
        }
      }
      const double a = bench::median(ts) * 1e6, b = bench::median(tr) * 1e6;
      std::printf("%-28s %8d %14.1f %22.1f %8.2f\n", c.name, vocab, a, b, a / b);
    }
  }
  return 0;
}
