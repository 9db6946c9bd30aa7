// The passes for imported encoders (matmul_passes.h) and fold_constants: each graph is run
// before and after its pass, against a double-precision reference computed here, and the
// rewritten graph must have the fused shape.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/graph/passes/matmul_passes.h"
#include "engine/graph/passes/passes.h"

using namespace sampan;
using namespace sampan::graph;

namespace {

Tensor random_f32(const Shape& shape, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = d(rng);
  return Tensor::from_f32(shape, v);
}

ValueId scalar(Graph& g, const std::string& name, float v) { return g.add_constant(name, Tensor::from_f32({}, {v})); }

ValueId binary(Graph& g, const std::string& name, const char* kind, ValueId a, ValueId b) {
  return g.add("binary", name, {a, b}, {{"kind", std::string(kind)}});
}

// GELU written out as an ONNX exporter writes it: x · (1 + erf(x / √2)) · 0.5.
ValueId gelu_chain(Graph& g, ValueId x, bool half_first) {
  const ValueId e = g.add("unary", "erf", {binary(g, "div", "div", x, scalar(g, "sqrt2", 1.4142135381698608f))},
                          {{"kind", std::string("erf")}});
  const ValueId one_plus = binary(g, "plus1", "add", e, scalar(g, "one", 1.0f));
  if (half_first) return binary(g, "mul2", "mul", binary(g, "half", "mul", x, scalar(g, "h", 0.5f)), one_plus);
  return binary(g, "mul2", "mul", binary(g, "mul1", "mul", x, one_plus), scalar(g, "h", 0.5f));
}

double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

std::vector<float> run(const Graph& g, const std::map<std::string, Tensor>& in) {
  ThreadPool pool(2);
  Executor ex(g, pool);
  const Tensor y = ex.run(in)[0].contiguous();
  return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
}

int live(const Graph& g, const std::string& op) { return passes::op_histogram(g)[op]; }

}  // namespace

TEST_CASE("fuse_gelu turns the erf arithmetic into one gelu, in both associations", "[passes]") {
  for (bool half_first : {false, true}) {
    std::mt19937 rng(3);
    Graph g;
    const ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(5), Dim::fixed(7)});
    g.mark_output(gelu_chain(g, x, half_first));
    const Tensor tx = random_f32({5, 7}, rng);
    const std::vector<float> before = run(g, {{"x", tx}});
    CHECK(passes::fuse_gelu(g) == 1);
    g.compact();
    CHECK(passes::op_histogram(g) == passes::OpHistogram{{"unary", 1}});
    const std::vector<float> after = run(g, {{"x", tx}});
    for (size_t i = 0; i < after.size(); ++i) {
      const double want = gelu(static_cast<double>(tx.data<float>()[i]));
      CHECK(std::abs(after[i] - want) <= 1e-6 * (1 + std::abs(want)));
      CHECK(std::abs(before[i] - want) <= 1e-6 * (1 + std::abs(want)));
    }
  }
}

TEST_CASE("fuse_gelu leaves a look-alike with other constants alone", "[passes]") {
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(2)});
  const ValueId e = g.add("unary", "erf", {binary(g, "div", "div", x, scalar(g, "c", 1.5f))}, {{"kind", std::string("erf")}});
  g.mark_output(binary(g, "mul2", "mul", binary(g, "mul1", "mul", x, binary(g, "p", "add", e, scalar(g, "one", 1.0f))),
                       scalar(g, "h", 0.5f)));
  CHECK(passes::fuse_gelu(g) == 0);
}

TEST_CASE("bias and gelu ride in the matmul", "[passes]") {
  std::mt19937 rng(9);
  Graph g;
  const int64_t m = 6, k = 24, n = 10;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("rows"), Dim::fixed(k)});
  const Tensor w = random_f32({k, n}, rng);
  const Tensor b = random_f32({n}, rng);
  const ValueId wv = g.add_constant("w", w);
  const ValueId mm = g.add("matmul", "mm", {x, wv}, {{"alpha", 0.5}});
  const ValueId biased = binary(g, "bias", "add", mm, g.add_constant("b", b));
  g.mark_output(gelu_chain(g, biased, false));
  // A second matmul on the same weight, unfused.
  const ValueId mm2 = g.add("matmul", "mm2", {x, wv}, {{"alpha", 0.5}});
  g.mark_output(mm2);

  const Tensor tx = random_f32({m, k}, rng);
  std::vector<double> want(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t t = 0; t < k; ++t) s += static_cast<double>(tx.data<float>()[i * k + t]) * w.data<float>()[t * n + j];
      want[static_cast<size_t>(i * n + j)] = gelu(0.5 * s + b.data<float>()[j]);
    }
  }
  const passes::PassReport r = passes::optimize(g);
  CHECK(r.rewrites("fuse_gelu") == 1);
  CHECK(r.rewrites("fuse_matmul_bias") == 1);
  CHECK(r.rewrites("fuse_matmul_activation") == 1);
  // Both matmuls then read the weight packed once (pack_matmul_weights).
  CHECK(r.rewrites("pack_matmul_weights") == 2);
  CHECK(passes::op_histogram(g) == passes::OpHistogram{{"matmul_packed", 2}});
  CHECK(g.node(g.value(g.outputs()[0]).producer).inputs[1] == g.node(g.value(g.outputs()[1]).producer).inputs[1]);
  const std::vector<float> got = run(g, {{"x", tx}});
  for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 1e-5 * (1 + std::abs(want[i])));
  CHECK(live(g, "binary") == 0);
}

// pack_matmul_weights on every form it takes (b [k, n] and trans_b [n, k], a of rank 1, 2 and
// 3 with a symbolic dimension, alpha, bias, activations) against double sums, and the forms it
// must leave alone: a b that is a graph input, a batched b, and a bf16 matmul.
TEST_CASE("pack_matmul_weights packs constant weights once and computes the same products", "[passes]") {
  std::mt19937 rng(17);
  const int64_t k = 37, n = 70;  // n: one full 64-wide strip and a partial one
  Graph g;
  const ValueId x3 = g.add_input("x3", DType::kF32, {Dim::sym("batch"), Dim::fixed(5), Dim::fixed(k)});
  const ValueId x1 = g.add_input("x1", DType::kF32, {Dim::fixed(k)});
  const ValueId xb = g.add_input("xb", DType::kF32, {Dim::fixed(4), Dim::fixed(k)});
  const Tensor w = random_f32({k, n}, rng), wt = random_f32({n, k}, rng), bias = random_f32({n}, rng);
  const ValueId wv = g.add_constant("w", w);
  const ValueId wtv = g.add_constant("wt", wt);
  const ValueId bv = g.add_constant("bias", bias);
  g.mark_output(g.add("matmul", "plain", {x3, wv}));
  g.mark_output(g.add("matmul", "gelu", {x3, wv, bv}, {{"alpha", 0.25}, {"activation", std::string("gelu")}}));
  g.mark_output(g.add("matmul", "trans", {x1, wtv, bv}, {{"trans_b", int64_t{1}}, {"activation", std::string("relu")}}));
  g.mark_output(g.add("matmul", "input_b", {x3, g.add_input("b", DType::kF32, {Dim::fixed(k), Dim::fixed(n)})}));
  g.mark_output(g.add("matmul", "batched_b", {xb, g.add_constant("w3", random_f32({2, k, n}, rng))}));
  CHECK(passes::pack_matmul_weights(g) == 3);
  g.compact();
  CHECK(passes::op_histogram(g) == passes::OpHistogram{{"matmul", 2}, {"matmul_packed", 3}});
  // "plain" and "gelu" share one packed copy of w.
  CHECK(g.node(g.value(g.outputs()[0]).producer).inputs[1] == g.node(g.value(g.outputs()[1]).producer).inputs[1]);

  const Tensor tx3 = random_f32({2, 5, k}, rng), tx1 = random_f32({k}, rng);
  ThreadPool pool(2);
  Executor ex(g, pool);
  const std::vector<Tensor> out = ex.run({{"x3", tx3}, {"x1", tx1}, {"xb", random_f32({4, k}, rng)},
                                          {"b", random_f32({k, n}, rng)}});
  REQUIRE(out[0].shape() == Shape{2, 5, n});
  REQUIRE(out[2].shape() == Shape{n});
  int checked = 0;
  auto expect = [&](const Tensor& y, int64_t row, const float* xr, bool trans, double alpha, const float* b,
                    const std::string& act) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, mag = 0;
      for (int64_t t = 0; t < k; ++t) {
        const double p = static_cast<double>(xr[t]) * (trans ? wt.data<float>()[j * k + t] : w.data<float>()[t * n + j]);
        s += p;
        mag += std::abs(p);
      }
      double v = alpha * s + (b ? b[j] : 0.0);
      if (act == "gelu") v = gelu(v);
      if (act == "relu") v = std::max(v, 0.0);
      const double got = y.contiguous().data<float>()[row * n + j];
      CHECK(std::abs(got - v) <= 1e-6 * (mag + 1.0));
      ++checked;
    }
  };
  for (int64_t r = 0; r < 10; ++r) {
    expect(out[0], r, tx3.data<float>() + r * k, false, 1.0, nullptr, "none");
    expect(out[1], r, tx3.data<float>() + r * k, false, 0.25, bias.data<float>(), "gelu");
  }
  expect(out[2], 0, tx1.data<float>(), true, 1.0, bias.data<float>(), "relu");
  CHECK(checked == 21 * n);
}

TEST_CASE("pack_matmul_weights leaves bf16 matmuls to their own kernel", "[passes]") {
  std::mt19937 rng(18);
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(3), Dim::fixed(16)});
  g.mark_output(g.add("matmul", "mm", {x, g.add_constant("w", random_f32({16, 8}, rng))}));
  passes::PassOptions opts;
  opts.bf16 = true;
  const passes::PassReport r = passes::optimize(g, opts);
  CHECK(r.rewrites("convert_precision_bf16") == 1);
  CHECK(r.rewrites("pack_matmul_weights") == 0);
  CHECK(passes::op_histogram(g) == passes::OpHistogram{{"matmul", 1}});
}

TEST_CASE("fold_constants runs all-constant nodes once and keeps the rest", "[passes]") {
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(3)});
  Tensor ints = Tensor::empty({3}, DType::kI64);
  for (int i = 0; i < 3; ++i) ints.data<int64_t>()[i] = i - 1;
  const ValueId c = g.add("cast", "to_f32", {g.add_constant("ints", ints)}, {{"to", std::string("f32")}});
  const ValueId scaled = binary(g, "scale", "mul", c, scalar(g, "three", 3.0f));
  g.mark_output(binary(g, "use", "add", x, scaled));
  CHECK(passes::fold_constants(g) == 2);
  g.compact();
  CHECK(passes::op_histogram(g) == passes::OpHistogram{{"binary", 1}});
  const std::vector<float> got = run(g, {{"x", Tensor::from_f32({3}, {10, 20, 30})}});
  CHECK(got == std::vector<float>{7, 20, 33});
}

TEST_CASE("drop_identities rewires consumers and keeps an identity that names a graph output", "[passes]") {
  std::mt19937 rng(5);
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(3), Dim::fixed(4)});
  const ValueId id1 = g.add("identity", "dropout", {x});
  const ValueId r = g.add("unary", "relu", {id1}, {{"kind", std::string("relu")}});
  const ValueId sum = binary(g, "add", "add", r, g.add("identity", "dropout2", {r}));
  g.mark_output(g.add("identity", "fetch", {sum}));
  const Tensor tx = random_f32({3, 4}, rng);
  CHECK(passes::drop_identities(g) == 2);
  g.compact();
  g.validate();
  CHECK(live(g, "identity") == 1);  // the fetch
  const std::vector<float> y = run(g, {{"x", tx}});
  REQUIRE(y.size() == 12);
  for (int i = 0; i < 12; ++i) {
    const double v = std::max(0.0, static_cast<double>(tx.data<float>()[i]));
    CHECK(y[static_cast<size_t>(i)] == Approx(2.0 * v).margin(1e-7));
  }
}
