// CUDA kernels of the row-wise LLM ops against the CPU backend, and the executor's device paths.
// Every op test builds a one-node graph, runs it on a CPU executor and on a CUDA executor with
// the same random inputs, and compares. The CPU backend is the independent reference: its
// kernels are tested against plain loops and numpy in tests/kernels.
//
// Tolerances, |cuda - cpu| <= atol + rtol * |cpu|:
//   add, embedding: exact (one IEEE add; f16/bf16 widen exactly).
//   rms_norm, add_rms_norm: rtol 1e-5, atol 1e-6. The sum of squares is reduced in another
//     order (f32 shuffle tree vs f32 lanes + double blocks); its relative error, a few 1e-7,
//     reaches the outputs through 1/sqrt.
//   silu_mul: rtol 1e-5, atol 1e-6. CUDA's expf (<= 2 ulp) against the CPU's vector exp.
//   rope: rtol 1e-5, atol 1e-5. cos/sin in double then rounded may differ by 1 ulp; y = a c - b s
//     cancels, so the error is relative to |a| + |b| (~1), not to y.
//   lora: rtol 1e-5, atol 1e-5. Two f32 products summed in other orders (at the test case).
//   hadamard: rtol 1e-5, atol 1e-5. Same butterflies, but an output near 0 carries rounding
//     of partial sums as large as the row: absolute error relative to the row scale (~1).
//
// Without a GPU the binary prints "SKIPPED: no CUDA device visible" and exits 77 (CTest: skipped)
// before Catch starts: main() is in cuda_test_util.cc.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/graph/executor.h"
#include "tests/cuda/cuda_test_util.h"

using namespace sampan;
using namespace sampan::graph;
using namespace sampan::cuda_test;

namespace {

// Widths that hit the scalar path (1, 7, 4099), the float4 path (8, 4096) and a row longer
// than one 1024-thread block (4099: several elements per thread).
const int64_t kWidths[] = {1, 7, 8, 4096, 4099};
const int64_t kRows[] = {1, 3, 17};

}  // namespace

TEST_CASE("rms_norm on CUDA matches the CPU", "[cuda]") {
  std::mt19937 rng(1);
  for (int64_t d : kWidths) {
    for (int64_t rows : kRows) {
      Graph g;
      const ValueId x = g.add_input("x", DType::kF32, fixed({rows, d}));
      const ValueId w = g.add_constant("w", random_f32({d}, rng));
      g.mark_output(g.add("rms_norm", "norm", {x, w}, {{"eps", 1e-6}}));
      compare_backends(g, {{"x", random_f32({rows, d}, rng, 3.0f)}}, 1e-5, 1e-6,
                       "rms_norm rows " + std::to_string(rows));
    }
  }
  SECTION("a column slice on the device (row stride > width)") {
    const int64_t rows = 5, d = 12;
    Graph g;
    const ValueId x = g.add_input("x", DType::kF32, fixed({rows, d}));
    g.mark_output(g.add("rms_norm", "norm", {x, g.add_constant("w", random_f32({d}, rng))},
                        {{"eps", 1e-5}}));
    const Tensor big = random_f32({rows, 3 * d}, rng);
    const std::map<std::string, Tensor> gpu = {{"x", big.to(kGpu).slice(1, d, 2 * d)}};
    compare_backends(g, {{"x", big.slice(1, d, 2 * d)}}, 1e-5, 1e-6, "strided rms_norm", &gpu);
  }
}

TEST_CASE("add_rms_norm on CUDA matches the CPU, both outputs", "[cuda]") {
  std::mt19937 rng(2);
  for (int64_t d : kWidths) {
    for (int64_t rows : kRows) {
      Graph g;
      const ValueId x = g.add_input("x", DType::kF32, fixed({rows, d}));
      const ValueId r = g.add_input("r", DType::kF32, fixed({rows, d}));
      const ValueId w = g.add_constant("w", random_f32({d}, rng));
      const auto outs = g.add_node("add_rms_norm", "fused", {x, r, w}, {{"eps", 1e-5}}, 2);
      g.mark_output(outs[0]);
      g.mark_output(outs[1]);
      compare_backends(g, {{"x", random_f32({rows, d}, rng)}, {"r", random_f32({rows, d}, rng)}},
                       1e-5, 1e-6, "add_rms_norm rows " + std::to_string(rows));
    }
  }
}

TEST_CASE("add on CUDA matches the CPU exactly", "[cuda]") {
  std::mt19937 rng(3);
  for (int64_t d : kWidths) {
    for (int64_t rows : kRows) {
      Graph g;
      const ValueId a = g.add_input("a", DType::kF32, fixed({rows, d}));
      const ValueId b = g.add_input("b", DType::kF32, fixed({rows, d}));
      g.mark_output(g.add("add", "sum", {a, b}));
      compare_backends(g, {{"a", random_f32({rows, d}, rng)}, {"b", random_f32({rows, d}, rng)}},
                       0, 0, "add rows " + std::to_string(rows));
    }
  }
  SECTION("rank 3, contiguous") {
    Graph g;
    const ValueId a = g.add_input("a", DType::kF32, fixed({2, 3, 5}));
    const ValueId b = g.add_input("b", DType::kF32, fixed({2, 3, 5}));
    g.mark_output(g.add("add", "sum", {a, b}));
    compare_backends(g, {{"a", random_f32({2, 3, 5}, rng)}, {"b", random_f32({2, 3, 5}, rng)}},
                     0, 0, "add rank 3");
  }
  SECTION("strided rows, more rows than gridDim.y (65535)") {
    const int64_t rows = 70000, d = 5;
    Graph g;
    const ValueId a = g.add_input("a", DType::kF32, fixed({rows, d}));
    const ValueId b = g.add_input("b", DType::kF32, fixed({rows, d}));
    g.mark_output(g.add("add", "sum", {a, b}));
    const Tensor big = random_f32({rows, 8}, rng);
    const Tensor other = random_f32({rows, d}, rng);
    const std::map<std::string, Tensor> gpu = {{"a", big.to(kGpu).slice(1, 3, 3 + d)},
                                               {"b", other}};
    compare_backends(g, {{"a", big.slice(1, 3, 3 + d)}, {"b", other}}, 0, 0, "strided add", &gpu);
  }
}

TEST_CASE("silu_mul on CUDA matches the CPU", "[cuda]") {
  std::mt19937 rng(4);
  for (int64_t d : kWidths) {
    for (int64_t rows : kRows) {
      Graph g;
      const ValueId gate = g.add_input("g", DType::kF32, fixed({rows, d}));
      const ValueId up = g.add_input("u", DType::kF32, fixed({rows, d}));
      g.mark_output(g.add("silu_mul", "act", {gate, up}));
      // Scale 40: gates past +-88 reach the exp overflow edge (silu -> -0 there).
      compare_backends(g, {{"g", random_f32({rows, d}, rng, 40.0f)}, {"u", random_f32({rows, d}, rng)}},
                       1e-5, 1e-6, "silu_mul rows " + std::to_string(rows));
    }
  }
  SECTION("more rows than gridDim.y (65535)") {
    const int64_t rows = 70000, d = 3;
    Graph g;
    const ValueId gate = g.add_input("g", DType::kF32, fixed({rows, d}));
    const ValueId up = g.add_input("u", DType::kF32, fixed({rows, d}));
    g.mark_output(g.add("silu_mul", "act", {gate, up}));
    compare_backends(g, {{"g", random_f32({rows, d}, rng, 4.0f)}, {"u", random_f32({rows, d}, rng)}},
                     1e-5, 1e-6, "silu_mul many rows");
  }
}

namespace {

Tensor inv_freq_table(int64_t head_dim) {
  std::vector<float> f(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / head_dim));
  }
  return Tensor::from_f32({head_dim / 2}, f);
}

Tensor random_positions(int64_t n, std::mt19937& rng) {
  // Up to 200k: large angles, where the f32 product and the double cos/sin both matter.
  std::uniform_int_distribution<int32_t> d(0, 200000);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int32_t& v : p) v = d(rng);
  if (!p.empty()) p[0] = 0;
  return Tensor::from_i32({n}, p);
}

Graph rope_graph(int64_t n, int64_t heads, int64_t hd, double attn_factor) {
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, fixed({n, heads * hd}));
  const ValueId pos = g.add_input("pos", DType::kI32, fixed({n}));
  const ValueId f = g.add_constant("inv_freq", inv_freq_table(hd));
  g.mark_output(g.add("rope", "rope", {x, pos, f},
                      {{"n_heads", heads}, {"head_dim", hd}, {"attn_factor", attn_factor}}));
  return g;
}

}  // namespace

TEST_CASE("rope on CUDA matches the CPU", "[cuda]") {
  std::mt19937 rng(5);
  for (int64_t hd : {2, 6, 64, 128, 256}) {
    for (int64_t heads : {1, 3, 32}) {
      for (int64_t n : kRows) {
        const double factor = heads == 3 ? 0.7 : 1.0;
        const Graph g = rope_graph(n, heads, hd, factor);
        compare_backends(g, {{"x", random_f32({n, heads * hd}, rng)}, {"pos", random_positions(n, rng)}},
                         1e-5, 1e-5,
                         "rope head_dim " + std::to_string(hd) + " heads " + std::to_string(heads));
      }
    }
  }
  SECTION("the q part of a fused QKV output on the device") {
    const int64_t n = 7, heads = 4, kv = 2, hd = 64;
    const Graph g = rope_graph(n, heads, hd, 1.0);
    const Tensor qkv = random_f32({n, (heads + 2 * kv) * hd}, rng);
    const Tensor pos = random_positions(n, rng);
    const std::map<std::string, Tensor> gpu = {{"x", qkv.to(kGpu).slice(1, 0, heads * hd)},
                                               {"pos", pos.to(kGpu)}};
    compare_backends(g, {{"x", qkv.slice(1, 0, heads * hd)}, {"pos", pos}}, 1e-5, 1e-5,
                     "rope on a QKV slice", &gpu);
  }
}

namespace {

Tensor table_of(DType type, int64_t vocab, int64_t dim, std::mt19937& rng) {
  const Tensor f = random_f32({vocab, dim}, rng);
  return type == DType::kF32 ? f : to_half_type(f, type);
}

Graph embedding_graph(int64_t n, Tensor table) {
  Graph g;
  const ValueId ids = g.add_input("ids", DType::kI32, fixed({n}));
  g.mark_output(g.add("embedding", "embed", {ids, g.add_constant("table", std::move(table))}));
  return g;
}

Tensor random_ids(int64_t n, int64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& id : v) id = d(rng);
  if (n > 1) v[static_cast<size_t>(n - 1)] = static_cast<int32_t>(vocab - 1);
  return Tensor::from_i32({n}, v);
}

}  // namespace

TEST_CASE("embedding on CUDA matches the CPU exactly for f32, f16 and bf16 tables", "[cuda]") {
  std::mt19937 rng(6);
  const int64_t vocab = 50;
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t d : kWidths) {
      for (int64_t n : kRows) {
        const Graph g = embedding_graph(n, table_of(type, vocab, d, rng));
        compare_backends(g, {{"ids", random_ids(n, vocab, rng)}}, 0, 0,
                         std::string("embedding ") + dtype_name(type));
      }
    }
  }
}

TEST_CASE("embedding on CUDA refuses an id outside the vocabulary and stays usable", "[cuda]") {
  std::mt19937 rng(7);
  const Graph g = embedding_graph(3, table_of(DType::kF32, 10, 8, rng));
  Executor ex(g, pool(), kGpu);
  for (int32_t bad : {10, -1}) {
    try {
      ex.run({{"ids", Tensor::from_i32({3}, {1, bad, 2})}});
      FAIL("expected an error for id " << bad);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      CHECK_THAT(e.what(), Catch::Contains("node 'embed' (embedding)") &&
                               Catch::Contains("token id " + std::to_string(bad) + " at position 1"));
    }
  }
  const std::vector<Tensor> want = run_on(g, {{"ids", Tensor::from_i32({3}, {1, 9, 2})}}, Device::cpu());
  const Tensor got = ex.run({{"ids", Tensor::from_i32({3}, {1, 9, 2})}})[0].to(Device::cpu());
  expect_close(got, want[0], 0, 0, "embedding after an error");
}

TEST_CASE("hadamard on CUDA matches the CPU for blocks 1..512 and large blocks", "[cuda]") {
  std::mt19937 rng(8);
  for (int64_t block = 1; block <= 512; block *= 2) {
    for (int64_t blocks : {1, 3}) {
      for (int64_t rows : kRows) {
        const int64_t n = block * blocks;
        Graph g;
        const ValueId x = g.add_input("x", DType::kF32, fixed({rows, n}));
        g.mark_output(g.add("hadamard", "rot", {x}, {{"block", block}}));
        compare_backends(g, {{"x", random_f32({rows, n}, rng)}}, 1e-5, 1e-5,
                         "hadamard block " + std::to_string(block) + " n " + std::to_string(n));
      }
    }
  }
  SECTION("blocks that fill a tile (4096) or need opt-in shared memory (16384)") {
    for (int64_t block : {4096, 16384}) {
      Graph g;
      const ValueId x = g.add_input("x", DType::kF32, fixed({2, 2 * block}));
      g.mark_output(g.add("hadamard", "rot", {x}, {{"block", block}}));
      compare_backends(g, {{"x", random_f32({2, 2 * block}, rng)}}, 1e-5, 1e-5,
                       "hadamard block " + std::to_string(block));
    }
  }
  SECTION("a column slice on the device, 11008 = 43 x 256 wide") {
    const int64_t rows = 3, n = 11008;
    Graph g;
    const ValueId x = g.add_input("x", DType::kF32, fixed({rows, n}));
    g.mark_output(g.add("hadamard", "rot", {x}, {{"block", 256}}));
    const Tensor big = random_f32({rows, n + 4}, rng);
    const std::map<std::string, Tensor> gpu = {{"x", big.to(kGpu).slice(1, 4, n + 4)}};
    compare_backends(g, {{"x", big.slice(1, 4, n + 4)}}, 1e-5, 1e-5, "strided hadamard", &gpu);
  }
}

TEST_CASE("gather_rows on CUDA matches the CPU exactly", "[cuda]") {
  std::mt19937 rng(9);
  for (int64_t d : kWidths) {
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{17}}) {
      const int64_t rows = 19;
      Graph g;
      const ValueId x = g.add_input("x", DType::kF32, fixed({rows, d}));
      const ValueId idx = g.add_input("idx", DType::kI32, fixed({m}));
      g.mark_output(g.add("gather_rows", "pick", {x, idx}));
      std::vector<int32_t> v(static_cast<size_t>(m));
      std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(rows - 1));
      for (int32_t& i : v) i = pick(rng);
      v.back() = static_cast<int32_t>(rows - 1);  // the last row, as the LM head asks for
      compare_backends(g, {{"x", random_f32({rows, d}, rng)}, {"idx", Tensor::from_i32({m}, v)}},
                       0, 0, "gather_rows m " + std::to_string(m));
    }
  }
  SECTION("more index rows than gridDim.y (65535)") {
    const int64_t rows = 5, m = 70000, d = 3;
    Graph g;
    const ValueId x = g.add_input("x", DType::kF32, fixed({rows, d}));
    const ValueId idx = g.add_input("idx", DType::kI32, fixed({m}));
    g.mark_output(g.add("gather_rows", "pick", {x, idx}));
    std::vector<int32_t> v(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % rows);
    compare_backends(g, {{"x", random_f32({rows, d}, rng)}, {"idx", Tensor::from_i32({m}, v)}},
                     0, 0, "gather_rows many rows");
  }
}

// The CPU op refuses an index outside the input before running; the CUDA kernel cannot check on
// the host without a synchronisation, so it skips the row (NaN) and reports it through the
// executor's fault word: the run throws naming the node, and the executor stays usable.
TEST_CASE("gather_rows on CUDA refuses a row index outside the input", "[cuda]") {
  std::mt19937 rng(10);
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, fixed({4, 8}));
  const ValueId idx = g.add_input("idx", DType::kI32, fixed({3}));
  g.mark_output(g.add("gather_rows", "pick", {x, idx}));
  graph::Executor gpu(g, pool(), kGpu);
  const Tensor xs = random_f32({4, 8}, rng);
  for (int32_t bad : {4, -1}) {
    INFO("index " << bad);
    try {
      gpu.run({{"x", xs}, {"idx", Tensor::from_i32({3}, {0, bad, 2})}});
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      CHECK_THAT(e.what(), Catch::Contains("node 'pick' (gather_rows)") &&
                               Catch::Contains("row index outside"));
    }
  }
  compare_backends(g, {{"x", xs}, {"idx", Tensor::from_i32({3}, {3, 1, 0})}}, 0, 0,
                   "gather_rows after a refused run");
  const std::vector<Tensor> again = gpu.run({{"x", xs}, {"idx", Tensor::from_i32({3}, {1, 1, 3})}});
  CHECK(again[0].to(Device::cpu()).data<float>()[0] == xs.data<float>()[8]);
}

namespace {

// One lora node over n adapters of rank r (scale 0 for adapter 1: it does not target this
// projection), y and x graph inputs, the adapter tensors constants.
Graph lora_graph(int64_t t, int64_t in, int64_t out, int64_t r, std::mt19937& rng) {
  const int64_t n = 3;
  Graph g;
  const ValueId y = g.add_input("y", DType::kF32, fixed({t, out}));
  const ValueId x = g.add_input("x", DType::kF32, fixed({t, in}));
  const ValueId ids = g.add_input("ids", DType::kI32, fixed({t}));
  // A ~ 1/sqrt(in) keeps h = x A^T O(1) at every width; B O(0.3).
  const ValueId a = g.add_constant("a", random_f32({n, r, in}, rng, 1.0f / std::sqrt(static_cast<float>(in))));
  const ValueId b = g.add_constant("b", random_f32({n, out, r}, rng, 0.3f));
  const ValueId s = g.add_constant("scale", Tensor::from_f32({n}, {0.5f, 0.0f, 2.0f}));
  g.mark_output(g.add("lora", "lora", {y, x, ids, a, b, s}));
  return g;
}

Tensor random_adapter_ids(int64_t t, std::mt19937& rng) {
  std::vector<int32_t> v(static_cast<size_t>(t));
  std::uniform_int_distribution<int32_t> pick(-1, 2);
  for (int32_t& i : v) i = pick(rng);
  return Tensor::from_i32({t}, v);
}

}  // namespace

// Tolerance: both backends compute h = s (x A^T) in f32, then y + h B^T, in other summation
// orders; with these magnitudes (h, B h and y all O(1)) f32 rounding stays near 1e-6.
TEST_CASE("lora on CUDA matches the CPU over mixed adapters", "[cuda]") {
  std::mt19937 rng(11);
  // (in, out, r): float4 paths (in, r multiples of 4), scalar ones (63, 5), one rank chunk of
  // each register width (8, 16, 32, 64) and two chunks (100), widths of a real projection.
  const int64_t shapes[][3] = {{64, 48, 8},   {63, 17, 5},   {260, 100, 16}, {128, 96, 24},
                               {96, 64, 40},  {96, 64, 100}, {2048, 256, 8}, {256, 2048, 16}};
  for (const auto& sh : shapes) {
    for (int64_t t : {1, 5, 19}) {
      const Graph g = lora_graph(t, sh[0], sh[1], sh[2], rng);
      compare_backends(g,
                       {{"y", random_f32({t, sh[1]}, rng)},
                        {"x", random_f32({t, sh[0]}, rng)},
                        {"ids", random_adapter_ids(t, rng)}},
                       1e-5, 1e-5,
                       "lora in " + std::to_string(sh[0]) + " out " + std::to_string(sh[1]) +
                           " r " + std::to_string(sh[2]) + " tokens " + std::to_string(t));
    }
  }
  SECTION("every token on the base or a non-targeting adapter copies y exactly") {
    const int64_t t = 6;
    const Graph g = lora_graph(t, 32, 40, 8, rng);
    compare_backends(g,
                     {{"y", random_f32({t, 40}, rng)},
                      {"x", random_f32({t, 32}, rng)},
                      {"ids", Tensor::from_i32({t}, {-1, 1, 1, -1, 1, -1})}},
                     0, 0, "lora without adapters");
  }
  SECTION("y a column slice of a fused projection on the device, more token groups than gridDim.y") {
    const int64_t t = 70000 * 8 + 3, in = 8, out = 12, r = 4;
    const Graph g = lora_graph(t, in, out, r, rng);
    const Tensor big = random_f32({t, 3 * out}, rng);
    const Tensor x = random_f32({t, in}, rng);
    const Tensor ids = random_adapter_ids(t, rng);
    const std::map<std::string, Tensor> gpu = {
        {"y", big.to(kGpu).slice(1, out, 2 * out)}, {"x", x}, {"ids", ids}};
    compare_backends(g, {{"y", big.slice(1, out, 2 * out)}, {"x", x}, {"ids", ids}}, 1e-5, 1e-5,
                     "lora strided y", &gpu);
  }
}

// The CPU op refuses an adapter id outside [-1, n) before running; the CUDA kernels skip that
// token (NaN row) and report it through the executor's fault word: the run throws naming the
// node, and the executor stays usable.
TEST_CASE("lora on CUDA refuses an adapter id the graph does not have", "[cuda]") {
  std::mt19937 rng(12);
  const Graph g = lora_graph(3, 16, 8, 4, rng);
  graph::Executor gpu(g, pool(), kGpu);
  const Tensor y = random_f32({3, 8}, rng), x = random_f32({3, 16}, rng);
  for (int32_t bad : {3, -2}) {
    INFO("id " << bad);
    try {
      gpu.run({{"y", y}, {"x", x}, {"ids", Tensor::from_i32({3}, {0, bad, 2})}});
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      CHECK_THAT(e.what(), Catch::Contains("node 'lora' (lora)") &&
                               Catch::Contains("adapter the graph does not have"));
    }
  }
  compare_backends(g, {{"y", y}, {"x", x}, {"ids", Tensor::from_i32({3}, {2, -1, 0})}}, 1e-5,
                   1e-5, "lora after a refused run");
  const std::vector<Tensor> again = gpu.run({{"y", y}, {"x", x}, {"ids", Tensor::from_i32({3}, {-1, -1, -1})}});
  CHECK(again[0].to(Device::cpu()).data<float>()[0] == y.data<float>()[0]);
}

TEST_CASE("the CUDA executor takes host or device inputs and uploads constants once", "[cuda]") {
  std::mt19937 rng(9);
  const int64_t d = 64;
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("n"), Dim::fixed(d)});
  const Tensor w = random_f32({d}, rng);
  // The same tensor twice (tied weights): one device copy serves both.
  const ValueId w1 = g.add_constant("w1", w);
  const ValueId w2 = g.add_constant("w2", w);
  const ValueId w3 = g.add_constant("w3", random_f32({d}, rng));
  const ValueId h = g.add("rms_norm", "n1", {x, w1}, {{"eps", 1e-5}});
  const ValueId h2 = g.add("rms_norm", "n2", {h, w2}, {{"eps", 1e-5}});
  g.mark_output(g.add("rms_norm", "n3", {h2, w3}, {{"eps", 1e-5}}));

  Executor cpu(g, pool());
  Executor gpu(g, pool(), kGpu);
  CHECK(gpu.uploaded_constants() == 0);  // nothing before the first run
  for (int64_t rows : {4, 9, 4}) {
    const Tensor in = random_f32({rows, d}, rng);
    const Tensor want = cpu.run({{"x", in}})[0].clone();
    const std::vector<Tensor> from_host = gpu.run({{"x", in}});
    REQUIRE(from_host[0].device() == kGpu);
    const Tensor a = from_host[0].to(Device::cpu());
    const Tensor b = gpu.run({{"x", in.to(kGpu)}})[0].to(Device::cpu());
    expect_close(a, want, 1e-5, 1e-6, "host input");
    expect_close(b, a, 0, 0, "device input against host input");
    CHECK(gpu.uploaded_constants() == 2);  // w (for w1 and w2) and w3, on the first run only
  }

  SECTION("a constant already on the device is used as is") {
    Graph gd;
    const ValueId xd = gd.add_input("x", DType::kF32, fixed({3, d}));
    gd.mark_output(gd.add("rms_norm", "n", {xd, gd.add_constant("w", w.to(kGpu))}, {{"eps", 1e-5}}));
    Graph gh;
    const ValueId xh = gh.add_input("x", DType::kF32, fixed({3, d}));
    gh.mark_output(gh.add("rms_norm", "n", {xh, gh.add_constant("w", w)}, {{"eps", 1e-5}}));
    Executor ex(gd, pool(), kGpu);
    const Tensor in = random_f32({3, d}, rng);
    const Tensor got = ex.run({{"x", in}})[0].to(Device::cpu());
    CHECK(ex.uploaded_constants() == 0);
    expect_close(got, run_on(gh, {{"x", in}}, Device::cpu())[0], 1e-5, 1e-6, "device constant");
  }
}

TEST_CASE("CUDA out-of-memory names the buffer and leaves the process usable", "[cuda]") {
  SECTION("the arena") {
    // A [2^20, 2^31] f32 output (8 PiB) from an empty table: the inputs are small, the arena is not.
    const Graph g = [] {
      Graph gr;
      const ValueId ids = gr.add_input("ids", DType::kI32, {Dim::sym("n")});
      gr.mark_output(gr.add("embedding", "embed",
                            {ids, gr.add_constant("table", Tensor::empty({0, int64_t{1} << 31}, DType::kF32))}));
      return gr;
    }();
    Executor ex(g, pool(), kGpu);
    try {
      ex.run({{"ids", Tensor::from_i32({int64_t{1} << 20}, std::vector<int32_t>(1 << 20, 0))}});
      FAIL("an 8 PiB arena was allocated");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kOutOfMemory);
      CHECK_THAT(e.what(), Catch::Contains("executor arena") && Catch::Contains("bytes on cuda:0"));
    }
    CHECK(ex.run({{"ids", Tensor::from_i32({0}, {})}})[0].shape() == Shape{0, int64_t{1} << 31});
  }
  SECTION("a constant upload") {
    // A host tensor claiming 4 PiB over a small buffer: the device allocation fails before any
    // byte of it is read.
    std::vector<float> small(16, 0.0f);
    const auto storage = Storage::wrap(small.data(), size_t{1} << 52, Device::cpu(), nullptr);
    Graph g;
    const ValueId x = g.add_input("x", DType::kF32, fixed({4}));
    g.mark_output(g.add("add", "sum", {x, g.add_constant("huge", Tensor::from_storage(storage, 0, {int64_t{1} << 50}, DType::kF32))}));
    Executor ex(g, pool(), kGpu);
    try {
      ex.run({{"x", Tensor::from_f32({4}, {1, 2, 3, 4})}});
      FAIL("a 4 PiB constant was uploaded");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kOutOfMemory);
      CHECK_THAT(e.what(), Catch::Contains("uploading constant 'huge'") &&
                               Catch::Contains("4503599627370496 bytes"));
    }
  }
  // The device still works.
  std::mt19937 rng(10);
  Graph g;
  const ValueId a = g.add_input("a", DType::kF32, fixed({2, 3}));
  g.mark_output(g.add("add", "sum", {a, a}));
  compare_backends(g, {{"a", random_f32({2, 3}, rng)}}, 0, 0, "add after out-of-memory");
}

TEST_CASE("Tensor::to copies host to device to host", "[cuda]") {
  std::mt19937 rng(11);
  const Tensor h = random_f32({5, 7}, rng);
  const Tensor d = h.slice(1, 2, 6).to(kGpu);  // packed on the host, then uploaded
  CHECK(d.device() == kGpu);
  CHECK(d.is_contiguous());
  const Tensor d2 = d.to(kGpu);  // device to device
  const Tensor back = d2.to(Device::cpu());
  expect_close(back, h.slice(1, 2, 6).contiguous(), 0, 0, "round trip");
  CHECK_THROWS_AS(d.reshape({20}).slice(0, 0, 10).reshape({2, 5}).slice(1, 0, 2).to(Device::cpu()),
                  Error);  // a strided device tensor
}
