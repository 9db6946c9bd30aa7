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
  CHECK(passes::op_histogram(g) == passes::OpHistogram{{"matmul", 2}});
  const std::vector<float> got = run(g, {{"x", tx}});
  for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 1e-5 * (1 + std::abs(want[i])));
  CHECK(live(g, "binary") == 0);
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
