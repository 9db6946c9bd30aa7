// Graph IR, executor and fusion passes on small hand-built graphs. Results are checked against
// plain loops written here, and every fused graph against the same graph unfused.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/graph/passes/passes.h"
#include "engine/ops/op_registry.h"

using namespace sampan;
using namespace sampan::graph;

namespace {

Tensor random_f32(const Shape& shape, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = d(rng);
  return Tensor::from_f32(shape, v);
}

// A two-block residual network in the shape of a transformer layer:
//   n = rms_norm(x); q,k,v = linear(n) x3; s = q + k + v; h = x + s
//   m = rms_norm(h); y = down(silu(gate(m)) * up(m)); out = h + y
struct Net {
  Graph g;
  ValueId x;
};

Net build_net(std::mt19937& rng, int64_t d, int64_t f) {
  Net net;
  Graph& g = net.g;
  net.x = g.add_input("x", DType::kF32, {Dim::sym("n"), Dim::fixed(d)});
  auto c = [&](const std::string& name, const Shape& s, float scale) {
    return g.add_constant(name, random_f32(s, rng, scale));
  };
  const ValueId n = g.add("rms_norm", "norm1", {net.x, c("w1", {d}, 1.0f)}, {{"eps", 1e-5}});
  const ValueId q = g.add("linear", "q", {n, c("wq", {d, d}, 0.2f), c("bq", {d}, 0.1f)});
  const ValueId k = g.add("linear", "k", {n, c("wk", {d, d}, 0.2f), c("bk", {d}, 0.1f)});
  const ValueId v = g.add("linear", "v", {n, c("wv", {d, d}, 0.2f), c("bv", {d}, 0.1f)});
  const ValueId s = g.add("add", "qk", {q, k});
  const ValueId s2 = g.add("add", "qkv", {s, v});
  const ValueId h = g.add("add", "res1", {net.x, s2});
  const ValueId m = g.add("rms_norm", "norm2", {h, c("w2", {d}, 1.0f)}, {{"eps", 1e-5}});
  const ValueId gt = g.add("linear", "gate", {m, c("wg", {f, d}, 0.2f)});
  const ValueId up = g.add("linear", "up", {m, c("wu", {f, d}, 0.2f)});
  const ValueId a = g.add("silu_mul", "act", {gt, up});
  const ValueId y = g.add("linear", "down", {a, c("wd", {d, f}, 0.2f)});
  g.mark_output(g.add("add", "res2", {h, y}));
  return net;
}

// Plain reference of the same network from the graph's constants.
std::vector<double> reference(const Graph& g, const Tensor& x) {
  auto cst = [&](const std::string& name) -> const float* {
    for (size_t i = 0; i < g.n_values(); ++i) {
      if (g.value(static_cast<ValueId>(i)).name == name) return g.value(static_cast<ValueId>(i)).constant.data<float>();
    }
    FAIL("no constant " << name);
    return nullptr;
  };
  const int64_t rows = x.dim(0), d = x.dim(1);
  const int64_t f = [&] {
    for (size_t i = 0; i < g.n_values(); ++i) {
      if (g.value(static_cast<ValueId>(i)).name == "wg") return g.value(static_cast<ValueId>(i)).constant.dim(0);
    }
    return int64_t{0};
  }();
  auto norm = [&](const std::vector<double>& in, const float* w) {
    double ss = 0;
    for (double e : in) ss += e * e;
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(in.size()) + 1e-5);
    std::vector<double> o(in.size());
    for (size_t i = 0; i < in.size(); ++i) o[i] = in[i] * r * w[i];
    return o;
  };
  auto lin = [&](const std::vector<double>& in, const float* w, const float* b, int64_t n) {
    std::vector<double> o(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      double s = b ? b[j] : 0.0;
      for (size_t i = 0; i < in.size(); ++i) s += in[i] * w[j * static_cast<int64_t>(in.size()) + static_cast<int64_t>(i)];
      o[static_cast<size_t>(j)] = s;
    }
    return o;
  };
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> xr(x.data<float>() + r * d, x.data<float>() + (r + 1) * d);
    auto n = norm(xr, cst("w1"));
    auto q = lin(n, cst("wq"), cst("bq"), d), k = lin(n, cst("wk"), cst("bk"), d),
         v = lin(n, cst("wv"), cst("bv"), d);
    std::vector<double> h(static_cast<size_t>(d));
    for (int64_t i = 0; i < d; ++i) h[i] = xr[i] + q[i] + k[i] + v[i];
    auto m = norm(h, cst("w2"));
    auto gt = lin(m, cst("wg"), nullptr, f), up = lin(m, cst("wu"), nullptr, f);
    std::vector<double> a(static_cast<size_t>(f));
    for (int64_t i = 0; i < f; ++i) a[i] = gt[i] / (1 + std::exp(-gt[i])) * up[i];
    auto y = lin(a, cst("wd"), nullptr, d);
    for (int64_t i = 0; i < d; ++i) out.push_back(h[i] + y[i]);
  }
  return out;
}

}  // namespace

TEST_CASE("executor runs a graph and matches a plain reference, fused and unfused", "[graph]") {
  std::mt19937 rng(42);
  const int64_t d = 40, f = 72;
  Net plain = build_net(rng, d, f);
  std::mt19937 rng2(42);
  Net fused = build_net(rng2, d, f);
  const passes::PassReport report = passes::optimize(fused.g);
  CHECK(report.gate_up_silu == 1);
  CHECK(report.sibling_linears == 1);
  CHECK(report.add_rms_norm == 1);
  // add(q,k), add(.., v), res1+norm2 fused, linear(qkv)+split, linear(gate/up), down, res2,
  // norm1.
  CHECK(fused.g.nodes().size() < plain.g.nodes().size());

  ThreadPool pool(2);
  Executor ex_plain(plain.g, pool);
  Executor ex_fused(fused.g, pool);
  for (int64_t rows : {1, 5, 17}) {
    Tensor x = random_f32({rows, d}, rng);
    const auto want = reference(plain.g, x);
    const Tensor a = ex_plain.run({{"x", x}})[0].clone();
    const Tensor b = ex_fused.run({{"x", x}})[0].clone();
    REQUIRE(a.shape() == Shape{rows, d});
    REQUIRE(b.shape() == Shape{rows, d});
    // f32 kernels against a double reference over sums of ~100 terms: 1e-4 relative.
    for (int64_t i = 0; i < rows * d; ++i) {
      CHECK(a.data<float>()[i] == Approx(want[static_cast<size_t>(i)]).epsilon(1e-4).margin(1e-4));
      CHECK(b.data<float>()[i] == Approx(want[static_cast<size_t>(i)]).epsilon(1e-4).margin(1e-4));
    }
    // The planner reuses buffers: the arena is smaller than all intermediates together.
    CHECK(ex_plain.plan().arena_bytes < ex_plain.plan().naive_bytes);
  }
}

TEST_CASE("fusion passes keep the graph valid and fused ops exist", "[graph]") {
  std::mt19937 rng(1);
  Net net = build_net(rng, 8, 16);
  passes::optimize(net.g);
  net.g.validate();
  bool has_add_norm = false, has_silu_linear = false, has_split = false;
  for (const Node& n : net.g.nodes()) {
    has_add_norm |= n.op == "add_rms_norm";
    has_split |= n.op == "split";
    has_silu_linear |= n.op == "linear" && n.attrs.get_string("epilogue", "store") == "silu_mul";
    CHECK(n.op != "silu_mul");
  }
  CHECK(has_add_norm);
  CHECK(has_silu_linear);
  CHECK(has_split);
}

TEST_CASE("bad shapes and bindings give one-line errors naming the node or input", "[graph]") {
  ThreadPool pool(1);
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("n"), Dim::fixed(4)});
  const ValueId w = g.add_constant("w", Tensor::zeros({3, 5}, DType::kF32));
  g.mark_output(g.add("linear", "proj", {x, w}));
  Executor ex(g, pool);
  try {
    ex.run({{"x", Tensor::zeros({2, 4}, DType::kF32)}});
    FAIL("expected an error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("proj") != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
  CHECK_THROWS_WITH(ex.run({}), Catch::Contains("graph input 'x' is not bound"));
  CHECK_THROWS_WITH(ex.run({{"x", Tensor::zeros({2, 3}, DType::kF32)}}),
                    Catch::Contains("graph input 'x' has dim 1 = 3, expected 4"));
  CHECK_THROWS_WITH(ex.run({{"x", Tensor::zeros({2, 4}, DType::kI32)}}),
                    Catch::Contains("graph input 'x' is i32, expected f32"));
  CHECK_THROWS_WITH(g.add("no_such_op", "n", {x}), Catch::Contains("unknown op 'no_such_op'"));
  CHECK_THROWS_WITH(g.add("rms_norm", "n", {x}), Catch::Contains("takes 2..2 inputs, got 1"));
}

TEST_CASE("a backend without a kernel is refused before anything runs", "[graph]") {
  static const ops::RegisterOp schema_only({.name = "test_schema_only_op",
                                            .infer = [](const Node&, const std::vector<ops::TensorDesc>& in) {
                                              return std::vector<ops::TensorDesc>{in[0]};
                                            }});
  ThreadPool pool(1);
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(2)});
  g.mark_output(g.add("test_schema_only_op", "lonely", {x}));
  CHECK_THROWS_WITH(Executor(g, pool), Catch::Contains("node 'lonely': op 'test_schema_only_op' has no kernel on cpu"));
}

// Not under AddressSanitizer: its allocator aborts on an impossible size instead of failing it.
#ifndef __SANITIZE_ADDRESS__
TEST_CASE("an arena that cannot be allocated is named, and the executor stays usable", "[graph]") {
  // A [2^20, 2^31] f32 output (8 PiB) gathered from an empty table: only the arena is huge.
  ThreadPool pool(1);
  Graph g;
  const ValueId ids = g.add_input("ids", DType::kI32, {Dim::sym("n")});
  const ValueId table = g.add_constant("table", Tensor::empty({0, int64_t{1} << 31}, DType::kF32));
  g.mark_output(g.add("embedding", "embed", {ids, table}));
  Executor ex(g, pool);
  try {
    ex.run({{"ids", Tensor::from_i32({int64_t{1} << 20}, std::vector<int32_t>(1 << 20, 0))}});
    FAIL("an 8 PiB arena was allocated");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kOutOfMemory);
    CHECK_THAT(e.what(), Catch::Contains("executor arena for 1 intermediate buffers "
                                         "(9007199254740992 bytes on cpu)"));
  }
  CHECK(ex.run({{"ids", Tensor::from_i32({0}, {})}})[0].shape() == Shape{0, int64_t{1} << 31});
}
#endif

TEST_CASE("plan_for predicts the plan a run makes", "[graph]") {
  std::mt19937 rng(3);
  Net net = build_net(rng, 16, 24);
  passes::optimize(net.g);
  ThreadPool pool(1);
  Executor ex(net.g, pool);
  const MemoryPlan predicted = ex.plan_for({{"x", {9, 16}}});
  ex.run({{"x", random_f32({9, 16}, rng)}});
  CHECK(predicted.arena_bytes == ex.plan().arena_bytes);
  CHECK(predicted.naive_bytes == ex.plan().naive_bytes);
  CHECK(predicted.offsets == ex.plan().offsets);
  CHECK_THROWS_WITH(ex.plan_for({}), Catch::Contains("graph input 'x' has no shape"));
}
