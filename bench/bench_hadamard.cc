// Walsh-Hadamard (FWHT) speed, per instruction set and thread count, and the time of the offline
// rotation of TinyLlama-1.1B-shaped weights.
//
//   bench_hadamard [--reps N] [--rotate-layers L]
//
// FWHT cases (block = hadamard_block_for(n)):
//   [1, 11008]   one decode token before down_proj (Llama-2-7B intermediate, 43 blocks of 256)
//   [64, 11008]  a 64-token batch
//   [1, 4096]    one token, one block of 4096
// Reported: wall microseconds per call (median after a warm-up) and GB/s counting each float
// read and written once (what an in-place transform must at least move).
// The rotation case rotates L layers (default 2) plus the 32000 x 2048 embedding and lm_head of
// random bf16 weights in TinyLlama's shape; the full model has 22 layers.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/models/llama_rotate.h"
#include "kernels/common/half.h"
#include "kernels/cpu/hadamard_cpu.h"
#include "kernels/cpu/isa.h"

namespace {

using sampan::ThreadPool;
using sampan::cpu::Isa;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench_fwht(int reps) {
  struct Shape {
    int64_t rows, n;
  };
  const Shape shapes[] = {{1, 11008}, {64, 11008}, {1, 4096}};
  std::printf("%-8s %-7s %-14s %6s %12s %9s\n", "isa", "threads", "shape", "block", "us/call",
              "GB/s");
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!sampan::cpu::set_isa(isa)) continue;
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      for (const Shape& s : shapes) {
        const int64_t block = sampan::cpu::hadamard_block_for(s.n);
        std::vector<float> x(static_cast<size_t>(s.rows * s.n));
        std::mt19937 rng(1);
        std::normal_distribution<float> d;
        for (float& v : x) v = d(rng);
        // An orthogonal, self-inverse transform: repeating it keeps values bounded.
        for (int w = 0; w < 3; ++w) sampan::cpu::hadamard_rows(s.rows, s.n, block, x.data(), s.n, pool);
        // Enough calls per sample that each sample spans ~1 ms.
        const int inner = std::max<int>(1, static_cast<int>(200000 / (s.rows * s.n)));
        std::vector<double> t;
        for (int r = 0; r < reps; ++r) {
          const double t0 = now_s();
          for (int i = 0; i < inner; ++i) {
            sampan::cpu::hadamard_rows(s.rows, s.n, block, x.data(), s.n, pool);
          }
          t.push_back((now_s() - t0) / inner);
        }
        const double sec = median(t);
        const double bytes = 2.0 * 4.0 * static_cast<double>(s.rows * s.n);
        char shape[32];
        std::snprintf(shape, sizeof shape, "[%lld, %lld]", static_cast<long long>(s.rows),
                      static_cast<long long>(s.n));
        std::printf("%-8s %-7d %-14s %6lld %12.2f %9.2f\n",
                    std::string(sampan::cpu::isa_name(isa)).c_str(), threads, shape,
                    static_cast<long long>(block), sec * 1e6, bytes / sec / 1e9);
      }
    }
  }
}

sampan::Tensor random_bf16(std::mt19937& rng, int64_t rows, int64_t cols) {
  sampan::Tensor t = sampan::Tensor::empty({rows, cols}, sampan::DType::kBF16);
  std::normal_distribution<float> d(0.0f, 0.02f);
  uint16_t* p = t.data<uint16_t>();
  for (int64_t i = 0; i < rows * cols; ++i) p[i] = sampan::f32_to_bf16(d(rng));
  return t;
}

void bench_rotate(int64_t n_layer) {
  using namespace sampan;
  HfConfig c;
  c.source = "tinyllama-shape";
  c.vocab_size = 32000;
  c.hidden_size = 2048;
  c.intermediate_size = 5632;
  c.n_layer = n_layer;
  c.n_head = 32;
  c.n_head_kv = 4;
  c.head_dim = 64;
  c.tie_word_embeddings = false;
  std::mt19937 rng(2);
  models::LlamaWeights w;
  const int64_t d = c.hidden_size, f = c.intermediate_size;
  w.tok_embd = random_bf16(rng, c.vocab_size, d);
  for (int64_t i = 0; i < n_layer; ++i) {
    models::LlamaLayerWeights l;
    l.attn_norm = Tensor::from_f32({d}, std::vector<float>(static_cast<size_t>(d), 1.0f));
    l.ffn_norm = l.attn_norm;
    l.attn.q.weight = random_bf16(rng, c.q_dim(), d);
    l.attn.k.weight = random_bf16(rng, c.kv_dim(), d);
    l.attn.v.weight = random_bf16(rng, c.kv_dim(), d);
    l.attn.o.weight = random_bf16(rng, d, c.q_dim());
    l.gate.weight = random_bf16(rng, f, d);
    l.up.weight = random_bf16(rng, f, d);
    l.down.weight = random_bf16(rng, d, f);
    w.layers.push_back(l);
  }
  w.output_norm = Tensor::from_f32({d}, std::vector<float>(static_cast<size_t>(d), 1.0f));
  w.output.weight = random_bf16(rng, c.vocab_size, d);
  const double t0 = now_s();
  models::rotate_llama_weights(c, w, 42);
  const double sec = now_s() - t0;
  std::printf("rotate: %lld layers + embedding + lm_head (TinyLlama shape, bf16 -> f32): %.2f s "
              "with %d threads\n",
              static_cast<long long>(n_layer), sec, ThreadPool::hardware_threads());
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 21;
  int64_t rotate_layers = 2;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--rotate-layers") == 0 && i + 1 < argc) {
      rotate_layers = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_hadamard [--reps N] [--rotate-layers L]\n");
      return 2;
    }
  }
  bench_fwht(reps);
  if (rotate_layers > 0) bench_rotate(rotate_layers);
  return 0;
}
