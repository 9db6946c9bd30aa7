// The CUDA kernel of `attention` (prefill tiles, split-K decode, KV write in every cache format)
// against the CPU backend. Each case builds one attention node, runs it on a CPU executor and on
// a CUDA executor with the same inputs and the same starting pools (random rows already cached,
// written by the CPU quantizer), and compares the outputs and then the pools byte for byte.
// The CPU op is the independent reference (tests/kernels/test_paged_attention.cc and
// test_kv_quant.cc check it against plain loops and a double-precision reference).
//
// Tolerances:
//  - pools: identical bytes in every format. Both backends quantize with the same f32
//    operations, rounding to nearest even and taking scales from exact maxima/minima.
//  - outputs: |cuda - cpu| <= 3e-5 + 3e-5 |cpu|. K and V dequantize to the same values on both
//    sides (bytes identical), so only the f32 arithmetic order differs: a score q.k of
//    head_dim products of N(0,1) / sqrt(head_dim) terms carries ~sqrt(head_dim) * 6e-8 < 1e-6
//    of rounding; the exponentials (CUDA expf <= 2 ulp, the CPU's vector exp a few ulp) and
//    the running sums over up to 4097 keys add ~sqrt(4097) * 6e-8 = 4e-6 relative on each
//    side; fp8/int8 apply the K scale per element here and per score on the CPU (one more
//    rounding). The output is a weighted mean of V rows of scale 1, so the error is absolute
//    at that scale (outputs near 0 do not shrink it) and relative for larger outputs: 1e-5 for
//    the two sides together, times 3 for margin.
//
// The CPU reference runs at GemmPrecision::kF32 (set when the run starts), so that it is the f32
// path whatever a later CPU kernel does at the default precision: until stop 55 an int8 cache on
// AMX-INT8 CPUs multiplied on the int8 tiles with q and the softmax weights rounded to 16 bits,
// ~4e-5 off the f32 result, which the H100 machine's host CPU showed against this file's 3e-5
// tolerance (int8 cases only).
//
// Without a GPU the binary prints "SKIPPED: no CUDA device visible" and exits 77 (CTest: skipped)
// before Catch starts: main() is in cuda_test_util.cc.
//
// Catch's listener interface (TestEventListenerBase) is declared only with this defined.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/graph/executor.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/kv_quant.h"
#include "tests/cuda/cuda_test_util.h"

using namespace sampan;
using namespace sampan::graph;
using namespace sampan::cuda_test;

namespace {

// The reference's exact f32 path (see the top of the file).
struct PinExactCpuPath : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(const Catch::TestRunInfo& info) override {
    TestEventListenerBase::testRunStarting(info);
    cpu::set_gemm_precision(cpu::GemmPrecision::kF32);
  }
};
CATCH_REGISTER_LISTENER(PinExactCpuPath)

constexpr double kTol = 3e-5;  // rtol and atol of the outputs (see the top of the file)

struct Config {
  int64_t n_heads = 8;
  int64_t n_kv = 2;
  int64_t head_dim = 128;
  int64_t block_size = 16;
  int64_t window = 0;
  KvDtype dtype = KvDtype::kF32;

  std::string str() const {
    std::ostringstream s;
    s << kv_dtype_name(dtype) << " heads " << n_heads << "/" << n_kv << " head_dim "
      << head_dim << " block " << block_size << " window " << window;
    return s.str();
  }
};

// A sequence of the step: `cached` positions already in the pool, `fresh` new tokens after
// them (1: a decode token; more: a prefill chunk). Tokens of the step follow the list order.
struct SeqStep {
  int64_t cached = 0;
  int64_t fresh = 1;
};

Graph attention_graph(const Config& c) {
  Graph g;
  const Dim t = Dim::sym("t");
  const int64_t row = c.dtype == KvDtype::kF32
                          ? c.n_kv * c.head_dim
                          : kv_row_bytes(c.dtype, c.n_kv, c.head_dim);
  const DType pool_type = c.dtype == KvDtype::kF32 ? DType::kF32 : DType::kI8;
  const std::vector<Dim> pool_dims = {Dim::sym("nb"), Dim::sym("bs"), Dim::fixed(row)};
  const ValueId q = g.add_input("q", DType::kF32, {t, Dim::fixed(c.n_heads * c.head_dim)});
  const ValueId k = g.add_input("k", DType::kF32, {t, Dim::fixed(c.n_kv * c.head_dim)});
  const ValueId v = g.add_input("v", DType::kF32, {t, Dim::fixed(c.n_kv * c.head_dim)});
  const ValueId kc = g.add_input("k_cache", pool_type, pool_dims);
  const ValueId vc = g.add_input("v_cache", pool_type, pool_dims);
  const ValueId pos = g.add_input("positions", DType::kI32, {t});
  const ValueId seq = g.add_input("seq_ids", DType::kI32, {t});
  const ValueId tab =
      g.add_input("block_tables", DType::kI32, {Dim::sym("n_seqs"), Dim::sym("max_blocks")});
  g.mark_output(g.add("attention", "layer.attn", {q, k, v, kc, vc, pos, seq, tab},
                      {{"n_heads", c.n_heads},
                       {"n_kv_heads", c.n_kv},
                       {"head_dim", c.head_dim},
                       {"scale", 1.0 / std::sqrt(static_cast<double>(c.head_dim))},
                       {"sliding_window", c.window},
                       {"kv_dtype", std::string(kv_dtype_name(c.dtype))}}));
  return g;
}

// Pools [n_blocks, block_size, row] whose every row holds a random K/V row in the format (as
// kv_cache_write would have stored it), so cached positions read as real data.
Tensor random_pool(const Config& c, int64_t n_blocks, std::mt19937& rng) {
  const int64_t rows = n_blocks * c.block_size, width = c.n_kv * c.head_dim;
  if (c.dtype == KvDtype::kF32) return random_f32({n_blocks, c.block_size, width}, rng);
  const int64_t row_bytes = kv_row_bytes(c.dtype, c.n_kv, c.head_dim);
  Tensor p = Tensor::zeros({n_blocks, c.block_size, row_bytes}, DType::kI8);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(width));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& e : x) e = d(rng);
    cpu::kv_quantize_row(c.dtype, x.data(), c.n_kv, c.head_dim,
                         static_cast<uint8_t*>(p.raw()) + r * row_bytes);
  }
  return p;
}

// One engine of each kind over the same starting pools, stepped together.
class Pair {
 public:
  Pair(const Config& c, const std::vector<int64_t>& seq_lengths, std::mt19937& rng)
      : c_(c), graph_(attention_graph(c)), cpu_(graph_, pool()), gpu_(graph_, pool(), kGpu) {
    // Each sequence gets blocks for its final length, drawn from a shuffled pool (plus spares
    // no sequence uses), so neighbouring positions live in scattered blocks.
    int64_t total = 0, max_blocks = 1;
    for (int64_t len : seq_lengths) {
      const int64_t nb = (len + c.block_size - 1) / c.block_size;
      total += nb;
      max_blocks = std::max(max_blocks, nb + 1);  // + 1: a trailing -1 entry nobody reads
    }
    const int64_t n_blocks = total + 3;
    std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    const int64_t n_seqs = static_cast<int64_t>(seq_lengths.size());
    std::vector<int32_t> tables(static_cast<size_t>(n_seqs * max_blocks), -1);
    size_t next = 0;
    for (int64_t s = 0; s < n_seqs; ++s) {
      const int64_t nb = (seq_lengths[static_cast<size_t>(s)] + c.block_size - 1) / c.block_size;
      for (int64_t i = 0; i < nb; ++i) tables[static_cast<size_t>(s * max_blocks + i)] = ids[next++];
    }
    tables_ = Tensor::from_i32({n_seqs, max_blocks}, tables);
    k_cpu_ = random_pool(c, n_blocks, rng);
    v_cpu_ = random_pool(c, n_blocks, rng);
    k_gpu_ = k_cpu_.to(kGpu);
    v_gpu_ = v_cpu_.to(kGpu);
  }

  // One step of `steps` (sequence i of the list is sequence id i); compares outputs and pools.
  void step(const std::vector<SeqStep>& steps, std::mt19937& rng, const std::string& what) {
    std::vector<int32_t> pos, seq;
    for (size_t s = 0; s < steps.size(); ++s) {
      for (int64_t i = 0; i < steps[s].fresh; ++i) {
        pos.push_back(static_cast<int32_t>(steps[s].cached + i));
        seq.push_back(static_cast<int32_t>(s));
      }
    }
    const int64_t n = static_cast<int64_t>(pos.size());
    std::map<std::string, Tensor> in = {
        {"q", random_f32({n, c_.n_heads * c_.head_dim}, rng)},
        {"k", random_f32({n, c_.n_kv * c_.head_dim}, rng)},
        {"v", random_f32({n, c_.n_kv * c_.head_dim}, rng)},
        {"positions", Tensor::from_i32({n}, pos)},
        {"seq_ids", Tensor::from_i32({n}, seq)},
        {"block_tables", tables_}};
    std::map<std::string, Tensor> in_gpu = in;
    in["k_cache"] = k_cpu_;
    in["v_cache"] = v_cpu_;
    in_gpu["k_cache"] = k_gpu_;
    in_gpu["v_cache"] = v_gpu_;
    const Tensor want = cpu_.run(in)[0].clone();
    const Tensor got = gpu_.run(in_gpu)[0].to(Device::cpu());
    const std::string where = c_.str() + ", " + what + " (" + std::to_string(n) + " tokens)";
    expect_close(got, want, kTol, kTol, where + ": output");
    expect_same_bytes(k_gpu_.to(Device::cpu()), k_cpu_, where + ": K pool");
    expect_same_bytes(v_gpu_.to(Device::cpu()), v_cpu_, where + ": V pool");
  }

 private:
  Config c_;
  Graph graph_;
  Executor cpu_;
  Executor gpu_;
  Tensor tables_, k_cpu_, v_cpu_, k_gpu_, v_gpu_;
};

constexpr KvDtype kFormats[] = {KvDtype::kF32, KvDtype::kBF16,
                                     KvDtype::kF8E4M3, KvDtype::kI8, KvDtype::kI4};

// A step the scheduler could make: decode tokens of sequences of length 17, 4097 (many
// splits), 1 and 300, a fresh 300-token prefill and a 100-token chunk after 200 cached
// positions, interleaved so that tiles of 64 tokens straddle runs. Then every sequence decodes
// one more token, reading what the first step wrote.
void mixed_then_decode(const Config& c, std::mt19937& rng) {
  const std::vector<SeqStep> first = {{16, 1}, {0, 300}, {4096, 1}, {0, 1}, {200, 100}, {299, 1}};
  std::vector<int64_t> lengths;
  std::vector<SeqStep> second;
  for (const SeqStep& s : first) {
    lengths.push_back(s.cached + s.fresh + 1);
    second.push_back({s.cached + s.fresh, 1});
  }
  Pair p(c, lengths, rng);
  p.step(first, rng, "mixed prefill and decode");
  p.step(second, rng, "decode after it");
}

}  // namespace

TEST_CASE("attention on CUDA matches the CPU: mixed batches, GQA, head dims, block sizes",
          "[cuda]") {
  std::mt19937 rng(1);
  for (KvDtype dtype : kFormats) {
    for (int64_t group : {1, 2, 4, 8}) {
      for (int64_t hd : {64, 128}) {
        for (int64_t bs : {16, 1}) {
          Config c;
          c.dtype = dtype;
          c.n_kv = 2;
          c.n_heads = 2 * group;
          c.head_dim = hd;
          c.block_size = bs;
          mixed_then_decode(c, rng);
        }
      }
    }
  }
}

TEST_CASE("attention on CUDA matches the CPU: prefill only and decode only", "[cuda]") {
  std::mt19937 rng(2);
  for (KvDtype dtype : kFormats) {
    for (int64_t bs : {16, 1}) {
      Config c;
      c.dtype = dtype;
      c.block_size = bs;
      {
        // A fresh prompt and a chunk continuing a cached prefix.
        Pair p(c, {300, 400}, rng);
        p.step({{0, 300}, {250, 130}}, rng, "prefill only");
      }
      {
        Pair p(c, {1, 17, 300, 4097}, rng);
        p.step({{0, 1}, {16, 1}, {299, 1}, {4096, 1}}, rng, "decode only");
      }
      {
        // One long sequence alone: the most splits a step can get.
        Pair p(c, {4097}, rng);
        p.step({{4096, 1}}, rng, "one long decode");
      }
    }
  }
}

TEST_CASE("attention on CUDA matches the CPU: awkward shapes and a sliding window", "[cuda]") {
  std::mt19937 rng(3);
  for (KvDtype dtype : kFormats) {
    // head_dim 80 (padded to 128; one int4 group per head) and 36 (int4 and bf16 read value by
    // value); a group of 16 query heads (several rows per warp in the decode kernel); 32 and
    // 256 head dims; a window shorter than the sequences.
    const Config shapes[] = {
        {.n_heads = 4, .n_kv = 1, .head_dim = 80, .block_size = 16},
        {.n_heads = 6, .n_kv = 3, .head_dim = 36, .block_size = 5},
        {.n_heads = 32, .n_kv = 2, .head_dim = 64, .block_size = 16},
        {.n_heads = 2, .n_kv = 1, .head_dim = 32, .block_size = 16},
        {.n_heads = 4, .n_kv = 2, .head_dim = 256, .block_size = 16},
        {.n_heads = 8, .n_kv = 2, .head_dim = 128, .block_size = 16, .window = 100},
        {.n_heads = 8, .n_kv = 2, .head_dim = 64, .block_size = 1, .window = 33},
    };
    for (Config c : shapes) {
      c.dtype = dtype;
      mixed_then_decode(c, rng);
    }
  }
}

TEST_CASE("attention on CUDA: a token with a bad block id touches nothing", "[cuda]") {
  // Sequence 1's table points outside the pool. The CPU refuses the step before running it; on
  // CUDA the kernels skip that token (nothing read or written through the bad id), the other
  // tokens run, and the run ends in the same kind of error: Debug builds name the token (they
  // read the flags back after the node), Release builds the node (the executor's fault word).
  std::mt19937 rng(4);
  Config c;
  c.n_heads = 4;
  c.n_kv = 2;
  c.head_dim = 64;
  c.block_size = 4;
  const Graph g = attention_graph(c);
  const int64_t n_blocks = 8;
  const Tensor k_pool = random_pool(c, n_blocks, rng), v_pool = random_pool(c, n_blocks, rng);
  const Tensor tables = Tensor::from_i32({2, 2}, {3, 5, 100, 1});
  const int64_t n = 3;
  std::map<std::string, Tensor> in = {{"q", random_f32({n, c.n_heads * c.head_dim}, rng)},
                                      {"k", random_f32({n, c.n_kv * c.head_dim}, rng)},
                                      {"v", random_f32({n, c.n_kv * c.head_dim}, rng)},
                                      {"positions", Tensor::from_i32({n}, {5, 6, 2})},
                                      {"seq_ids", Tensor::from_i32({n}, {0, 0, 1})},
                                      {"block_tables", tables},
                                      {"k_cache", k_pool.to(kGpu)},
                                      {"v_cache", v_pool.to(kGpu)}};
  Executor gpu(g, pool(), kGpu);
  try {
    gpu.run(in);
    FAIL("a block id outside the cache was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(e.what(), Catch::Contains("block id"));
#ifndef NDEBUG
    CHECK_THAT(e.what(), Catch::Contains("token 2"));
#else
    CHECK_THAT(e.what(), Catch::Contains("node 'layer.attn' (attention)"));
#endif
  }
  // The good tokens' K/V rows are written as the CPU writes them (the CPU runs them alone), and
  // nothing else in the pools changed.
  std::map<std::string, Tensor> good = in;
  good["q"] = in["q"].slice(0, 0, 2).contiguous();
  good["k"] = in["k"].slice(0, 0, 2).contiguous();
  good["v"] = in["v"].slice(0, 0, 2).contiguous();
  good["positions"] = Tensor::from_i32({2}, {5, 6});
  good["seq_ids"] = Tensor::from_i32({2}, {0, 0});
  const Tensor k_cpu = k_pool.clone(), v_cpu = v_pool.clone();
  good["k_cache"] = k_cpu;
  good["v_cache"] = v_cpu;
  Executor cpu(g, pool());
  cpu.run(good);
  expect_same_bytes(in["k_cache"].to(Device::cpu()), k_cpu, "K pool");
  expect_same_bytes(in["v_cache"].to(Device::cpu()), v_cpu, "V pool");
  // The executor stays usable: the good tokens alone now run, and match the CPU.
  good["k_cache"] = k_pool.to(kGpu);
  good["v_cache"] = v_pool.to(kGpu);
  std::map<std::string, Tensor> good_cpu = good;
  good_cpu["k_cache"] = k_pool.clone();
  good_cpu["v_cache"] = v_pool.clone();
  expect_close(gpu.run(good)[0].to(Device::cpu()), cpu.run(good_cpu)[0], kTol, kTol,
               "the good tokens after the error");
}
