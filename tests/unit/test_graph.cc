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

// ---- typed attributes ----------------------------------------------------------------------

namespace {

// A test op with one typed attribute: y = x * factor. parse_scale counts its calls, so a test can
// see that attributes are parsed once per executor, not per run.
struct ScaleAttrs final : ops::OpAttrs {
  float factor = 1.0f;
};

int g_scale_parses = 0;

ScaleAttrs parse_scale(const Node& node) {
  ++g_scale_parses;
  ScaleAttrs a;
  a.factor = static_cast<float>(node.attrs.get_float("factor"));
  return a;
}

std::vector<ops::TensorDesc> infer_scale(const Node&, const ScaleAttrs&,
                                         const std::vector<ops::TensorDesc>& in) {
  return {in[0]};
}

void run_scale(const ops::KernelContext& ctx) {
  const Tensor x = ctx.inputs[0].contiguous();  // any shape
  const float f = ctx.attrs_as<ScaleAttrs>().factor;
  for (int64_t i = 0; i < x.numel(); ++i) ctx.outputs[0].data<float>()[i] = x.data<float>()[i] * f;
}

const ops::RegisterOp kScaleSchema(ops::with_attrs<ScaleAttrs>(
    {.name = "test_scale"}, {{"factor", ops::AttrType::kFloat}}, parse_scale, infer_scale));
const ops::RegisterKernel kScaleCpu("test_scale", DeviceType::kCPU, run_scale);

// The message of the error `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("op attributes are declared with types and parsed once per executor", "[graph]") {
  const ops::OpSchema& schema = ops::OpRegistry::instance().schema("test_scale");
  REQUIRE(schema.attrs.size() == 1);
  CHECK(schema.attrs[0].name == "factor");
  CHECK(schema.attrs[0].type == ops::AttrType::kFloat);
  CHECK(schema.attrs[0].required);
  // Every registered op that declares attributes parses them; the built-in ops with attributes
  // declare them.
  for (const std::string& op : ops::OpRegistry::instance().op_names()) {
    const ops::OpSchema& s = ops::OpRegistry::instance().schema(op);
    INFO(op);
    CHECK((s.attrs.empty() || s.parse_attrs != nullptr));
    CHECK(s.infer_typed != nullptr);
  }
  for (const char* op : {"attention", "linear", "rope", "rms_norm", "add_rms_norm", "hadamard",
                         "split"}) {
    INFO(op);
    CHECK_FALSE(ops::OpRegistry::instance().schema(op).attrs.empty());
  }

  ThreadPool pool(1);
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("n")});
  const ValueId a = g.add("test_scale", "triple", {x}, {{"factor", int64_t{3}}});  // int reads as float
  g.mark_output(g.add("test_scale", "half", {a}, {{"factor", 0.5}}));
  g_scale_parses = 0;
  Executor ex(g, pool);
  CHECK(g_scale_parses == 2);  // one per node, at construction
  for (int64_t n : {1, 4, 4, 9}) {
    std::vector<float> xv(static_cast<size_t>(n));
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i) - 2.0f;
    const Tensor y = ex.run({{"x", Tensor::from_f32({n}, xv)}})[0];
    REQUIRE(y.shape() == Shape{n});
    for (int64_t i = 0; i < n; ++i) CHECK(y.data<float>()[i] == xv[static_cast<size_t>(i)] * 1.5f);
  }
  CHECK(g_scale_parses == 2);  // runs (and re-inference for new shapes) never parse again
}

TEST_CASE("runs never read attributes by name: the parsed ones stay in force", "[graph]") {
  // Erasing a node's attributes after the executor was built changes nothing, for runs of the
  // same shapes and for new shapes (which infer again, from the parsed attributes too).
  ThreadPool pool(1);
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("n"), Dim::fixed(4)});
  const ValueId w = g.add_constant("w", Tensor::from_f32({4}, {1.0f, 2.0f, 0.5f, -1.0f}));
  g.mark_output(g.add("rms_norm", "norm", {x, w}, {{"eps", 1e-5}}));
  Executor ex(g, pool);
  const std::vector<float> xv = {1, 2, 3, 4, -1, 0, 2, 5, 0.5f, 0.25f, 3, 1};
  const Tensor want = ex.run({{"x", Tensor::from_f32({3, 4}, xv)}})[0].clone();
  g.mutable_node(0).attrs = Attributes();
  for (int64_t rows : {3, 2, 3}) {
    const std::vector<float> part(xv.begin(), xv.begin() + rows * 4);
    const Tensor got = ex.run({{"x", Tensor::from_f32({rows, 4}, part)}})[0];
    REQUIRE(got.shape() == Shape{rows, 4});
    for (int64_t i = 0; i < rows * 4; ++i) CHECK(got.data<float>()[i] == want.data<float>()[i]);
  }
  // A new executor parses the node as it is now.
  CHECK_THROWS_WITH(Executor(g, pool), Catch::Contains("node 'norm' (rms_norm): missing attribute 'eps'"));
}

TEST_CASE("bad attributes are one-line errors naming node and attribute, before any run",
          "[graph]") {
  ThreadPool pool(1);
  const int64_t d = 8;
  auto norm_graph = [&](Attributes attrs) {
    Graph g;
    const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("n"), Dim::fixed(d)});
    const ValueId w = g.add_constant("w", Tensor::zeros({d}, DType::kF32));
    g.mark_output(g.add("rms_norm", "norm", {x, w}, std::move(attrs)));
    return g;
  };
  auto build = [&](const Graph& g) { return error_of([&] { Executor ex(g, pool); }); };
  std::vector<std::pair<std::string, std::string>> cases;  // message, expected part

  cases.emplace_back(build(norm_graph({})), "node 'norm' (rms_norm): missing attribute 'eps'");
  cases.emplace_back(build(norm_graph({{"eps", std::string("tiny")}})),
                     "node 'norm' (rms_norm): attribute 'eps' is a string, expected a number");
  {
    Graph g;
    const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("n"), Dim::fixed(d)});
    const ValueId pos = g.add_input("pos", DType::kI32, {Dim::sym("n")});
    const ValueId f = g.add_constant("f", Tensor::zeros({2}, DType::kF32));
    g.mark_output(g.add("rope", "q_rope", {x, pos, f}, {{"n_heads", 2.0}, {"head_dim", int64_t{4}}}));
    cases.emplace_back(build(g),
                       "node 'q_rope' (rope): attribute 'n_heads' is a float, expected an integer");
  }
  {
    Graph g;
    const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("n"), Dim::fixed(d)});
    const ValueId w = g.add_constant("w", Tensor::zeros({4, d}, DType::kF32));
    g.mark_output(g.add("linear", "proj", {x, w}, {{"epilogue", std::string("relu")}}));
    cases.emplace_back(build(g), "node 'proj' (linear): unknown epilogue 'relu'");
  }
  {
    Graph g;
    const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("n"), Dim::fixed(d)});
    const auto parts = g.add_node("split", "qkv.split", {x}, {{"sizes", int64_t{4}}}, 2);
    g.mark_output(parts[0]);
    cases.emplace_back(build(g), "node 'qkv.split' (split): attribute 'sizes' is an integer, "
                                 "expected an integer list");
  }
  for (const auto& [msg, want] : cases) {
    INFO(msg);
    CHECK_THAT(msg, Catch::Contains(want));
    CHECK(msg.find('\n') == std::string::npos);
  }

  // The same checks serve callers of the schema's own inference (no executor).
  const Graph g = norm_graph({});
  const std::vector<ops::TensorDesc> in = {{{2, d}, DType::kF32}, {{d}, DType::kF32}};
  CHECK_THROWS_WITH(ops::OpRegistry::instance().schema("rms_norm").infer(g.node(0), in),
                    Catch::Contains("node 'norm' (rms_norm): missing attribute 'eps'"));
}

// ---- shape inference reuse -----------------------------------------------------------------

TEST_CASE("shape inference runs only when the input shapes change", "[graph]") {
  std::mt19937 rng(11);
  const int64_t d = 16, f = 24;
  Net net = build_net(rng, d, f);
  passes::optimize(net.g);
  ThreadPool pool(2);
  Executor ex(net.g, pool);
  CHECK(ex.inferences() == 0);
  const Tensor x5 = random_f32({5, d}, rng), x7 = random_f32({7, d}, rng);
  const Tensor first = ex.run({{"x", x5}})[0].clone();
  CHECK(ex.inferences() == 1);
  // Same shapes, new values: shapes and plan are reused, the values are computed afresh.
  const Tensor x5b = random_f32({5, d}, rng);
  const Tensor second = ex.run({{"x", x5b}})[0].clone();
  CHECK(ex.inferences() == 1);
  const Tensor again = ex.run({{"x", x5}})[0].clone();
  CHECK(ex.inferences() == 1);
  const Tensor seven = ex.run({{"x", x7}})[0].clone();
  CHECK(ex.inferences() == 2);
  const Tensor back = ex.run({{"x", x5}})[0].clone();
  CHECK(ex.inferences() == 3);  // only the last run's shapes are kept

  // Every result equals a fresh executor's, bit for bit.
  auto fresh = [&](const Tensor& x) {
    Executor other(net.g, pool);
    return other.run({{"x", x}})[0].clone();
  };
  auto same = [](const Tensor& a, const Tensor& b) {
    REQUIRE(a.shape() == b.shape());
    for (int64_t i = 0; i < a.numel(); ++i) CHECK(a.data<float>()[i] == b.data<float>()[i]);
  };
  same(first, fresh(x5));
  same(second, fresh(x5b));
  same(again, first);
  same(seven, fresh(x7));
  same(back, first);

  // plan_for infers for its own shapes; the next run infers again for its shapes.
  const MemoryPlan p = ex.plan_for({{"x", {9, d}}});
  CHECK(ex.inferences() == 4);
  CHECK(p.arena_bytes > 0);
  same(ex.run({{"x", x5}})[0].clone(), first);
  CHECK(ex.inferences() == 5);
  CHECK(ex.plan().arena_bytes < p.arena_bytes);  // planned for 5 rows again, not 9
}

TEST_CASE("shapes that fail inference fail on every run", "[graph]") {
  ThreadPool pool(1);
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("n"), Dim::sym("k")});
  const ValueId w = g.add_constant("w", Tensor::zeros({3, 5}, DType::kF32));
  g.mark_output(g.add("linear", "proj", {x, w}));
  Executor ex(g, pool);
  for (int i = 0; i < 2; ++i) {
    CHECK_THROWS_WITH(ex.run({{"x", Tensor::zeros({2, 4}, DType::kF32)}}),
                      Catch::Contains("node 'proj' (linear)"));
  }
  CHECK(ex.inferences() == 2);
  CHECK(ex.run({{"x", Tensor::zeros({2, 5}, DType::kF32)}})[0].shape() == Shape{2, 3});
  CHECK(ex.run({{"x", Tensor::zeros({2, 5}, DType::kF32)}})[0].shape() == Shape{2, 3});
  CHECK(ex.inferences() == 3);
  // A binding error leaves nothing half-bound: the good shapes still reuse their inference, and
  // a symbol bound inconsistently is refused as before.
  CHECK_THROWS_WITH(ex.run({{"x", Tensor::zeros({2, 5}, DType::kI32)}}),
                    Catch::Contains("graph input 'x' is i32, expected f32"));
  CHECK(ex.run({{"x", Tensor::zeros({2, 5}, DType::kF32)}})[0].shape() == Shape{2, 3});
  CHECK(ex.inferences() == 3);
}

TEST_CASE("inputs sharing a symbol must agree on it, on every run", "[graph]") {
  ThreadPool pool(1);
  Graph g;
  const ValueId a = g.add_input("a", DType::kF32, {Dim::sym("n"), Dim::fixed(3)});
  const ValueId b = g.add_input("b", DType::kF32, {Dim::sym("n"), Dim::fixed(3)});
  g.mark_output(g.add("add", "sum", {a, b}));
  Executor ex(g, pool);
  const Tensor two = Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(ex.run({{"a", two}, {"b", two}})[0].data<float>()[5] == 12.0f);
  CHECK_THROWS_WITH(ex.run({{"a", two}, {"b", Tensor::zeros({4, 3}, DType::kF32)}}),
                    Catch::Contains("graph input 'b' has dim 0 = 4 but 'n' is 2 elsewhere"));
  CHECK(ex.run({{"a", two}, {"b", two}})[0].data<float>()[0] == 2.0f);
}

// ---- pass pipeline -------------------------------------------------------------------------

TEST_CASE("the pass pipeline reports each named pass and the ops before and after", "[graph]") {
  std::mt19937 rng(5);
  Net net = build_net(rng, 8, 16);
  const int nodes_before = static_cast<int>(net.g.nodes().size());
  const passes::PassReport r = passes::optimize(net.g);
  // The default pipeline: the classic-model passes first (they find nothing in a decoder), then
  // the decoder's three in their order, then the conv layout choice (nothing here either);
  // convert_precision_bf16 runs only when asked for, so it is not in this report.
  std::vector<std::string> names;
  for (const auto& p : r.passes) names.push_back(p.name);
  REQUIRE(names == std::vector<std::string>{"drop_identities", "fold_constants", "fold_conv_batch_norm",
                                            "fuse_conv_residual", "fuse_conv_activation", "fuse_gelu",
                                            "fuse_matmul_bias", "fuse_matmul_activation", "fuse_encoder_attention",
                                            "fuse_add_layer_norm", "fuse_gate_up_silu", "fuse_sibling_linears",
                                            "fuse_add_rms_norm", "pack_matmul_weights", "choose_conv_layout"});
  CHECK(r.passes.back().rewrites == 0);
  const size_t first = 10;
  for (size_t i = 0; i < first; ++i) {
    CHECK(r.passes[i].rewrites == 0);
    CHECK(r.passes[i].nodes_after == nodes_before);
  }
  CHECK(r.passes[first].rewrites == 1);
  CHECK(r.passes[first + 1].rewrites == 1);
  CHECK(r.passes[first + 2].rewrites == 1);
  CHECK(r.rewrites("fuse_sibling_linears") == 1);
  CHECK(r.rewrites("no_such_pass") == 0);
  // Node counts chain from the graph given to the graph left.
  CHECK(r.passes[0].nodes_before == nodes_before);
  for (size_t i = 1; i < r.passes.size(); ++i) CHECK(r.passes[i].nodes_before == r.passes[i - 1].nodes_after);
  CHECK(r.passes.back().nodes_after == static_cast<int>(net.g.nodes().size()));
  // gate+up+silu_mul -> 1 node; q,k,v -> linear + split; add+rms_norm -> 1 node.
  CHECK(r.passes[first].nodes_after == nodes_before - 2);
  CHECK(r.passes[first + 1].nodes_after == nodes_before - 3);
  CHECK(r.passes[first + 2].nodes_after == nodes_before - 4);

  CHECK(r.ops_before == passes::OpHistogram{{"add", 4}, {"linear", 6}, {"rms_norm", 2}, {"silu_mul", 1}});
  CHECK(r.ops_after == passes::OpHistogram{{"add", 3}, {"add_rms_norm", 1}, {"linear", 3},
                                           {"rms_norm", 1}, {"split", 1}});
  CHECK(r.ops_after == passes::op_histogram(net.g));

  const std::string table = r.table("  ");
  CHECK_THAT(table, Catch::Contains("  fuse_gate_up_silu: 1 rewrite, 13 -> 11 nodes\n"));
  CHECK_THAT(table, Catch::Contains("  ops after:  add 3, add_rms_norm 1, linear 3, rms_norm 1, split 1\n"));
  CHECK(r.str() == "add+rms_norm: 1, gate/up+silu: 1, sibling linears (qkv): 1");
}

TEST_CASE("a custom pipeline runs only its passes and reports them", "[graph]") {
  std::mt19937 rng(6);
  Net net = build_net(rng, 8, 16);
  const passes::PassReport r =
      passes::run_passes(net.g, {{"fuse_add_rms_norm", passes::fuse_add_rms_norm}});
  REQUIRE(r.passes.size() == 1);
  CHECK(r.passes[0].name == "fuse_add_rms_norm");
  CHECK(r.add_rms_norm == 1);
  CHECK(r.gate_up_silu == 0);
  CHECK(r.sibling_linears == 0);
  CHECK(r.ops_after.at("linear") == 6);
  CHECK(r.ops_after.at("add_rms_norm") == 1);
  CHECK(r.passes[0].nodes_after == r.passes[0].nodes_before - 1);
  // An empty pipeline changes nothing and reports no pass.
  Net other = build_net(rng, 8, 16);
  const passes::PassReport none = passes::run_passes(other.g, {});
  CHECK(none.passes.empty());
  CHECK(none.ops_before == none.ops_after);
}

TEST_CASE("ops with side effects name the inputs they write", "[graph]") {
  // A CUDA executor stages every host input that no op writes and refuses the written ones (a
  // copy would drop the writes): attention must name exactly its two KV pools (inputs 3 and 4),
  // or a host q, positions or block table is refused and no model runs on a GPU.
  const ops::OpRegistry& reg = ops::OpRegistry::instance();
  const ops::OpSchema& attention = reg.schema("attention");
  CHECK(attention.has_side_effects);
  CHECK(attention.written_inputs == std::vector<int>{3, 4});
  // Every op that writes an input says which (an empty list would mean "any of them").
  for (const std::string& name : reg.op_names()) {
    const ops::OpSchema& s = reg.schema(name);
    if (!s.has_side_effects) continue;
    INFO(name);
    CHECK_FALSE(s.written_inputs.empty());
    for (int i : s.written_inputs) CHECK((i >= 0 && i < s.max_inputs));
  }
}
