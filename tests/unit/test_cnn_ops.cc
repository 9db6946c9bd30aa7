// The CNN ops (conv2d, batch_norm, pool2d, unary) through graph::Graph + graph::Executor, their
// attribute errors, and the conv passes (conv_passes.h) checked against the unfused graph.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/graph/passes/conv_passes.h"
#include "engine/ops/op_registry.h"

using namespace sampan;
using namespace sampan::graph;

namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

Tensor random_f32(const Shape& shape, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  return Tensor::from_f32(shape, random_vec(static_cast<size_t>(shape_numel(shape)), rng, lo, hi));
}

std::vector<float> values_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

int live_nodes(const Graph& g) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.dead ? 0 : 1;
  return n;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("conv2d, batch_norm and pool2d run through the executor", "[cnn]") {
  ThreadPool pool(2);
  std::mt19937 rng(5);
  const int64_t c = 3, o = 4, h = 9, w = 8;
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("n"), Dim::fixed(c), Dim::fixed(h),
                                                  Dim::fixed(w)});
  const Tensor wt = random_f32({o, c, 3, 3}, rng);
  const Tensor bt = random_f32({o}, rng);
  const ValueId y = g.add("conv2d", "conv", {x, g.add_constant("w", wt), g.add_constant("b", bt)},
                          {{"strides", std::vector<int64_t>{2, 1}},
                           {"pads", std::vector<int64_t>{1, 0, 1, 2}}});
  const Tensor scale = random_f32({o}, rng), shift = random_f32({o}, rng),
               mean = random_f32({o}, rng), var = random_f32({o}, rng, 0.5f, 2.0f);
  const ValueId bn = g.add("batch_norm", "bn",
                           {y, g.add_constant("s", scale), g.add_constant("sh", shift),
                            g.add_constant("m", mean), g.add_constant("v", var)},
                           {{"eps", 1e-3}});
  const ValueId mp = g.add("pool2d", "pool", {bn},
                           {{"kind", std::string("max")},
                            {"kernel", std::vector<int64_t>{2, 2}},
                            {"strides", std::vector<int64_t>{2, 2}},
                            {"ceil_mode", int64_t{1}}});
  const ValueId gp = g.add("pool2d", "gap", {bn}, {{"kind", std::string("avg")},
                                                  {"global", int64_t{1}}});
  g.mark_output(bn);
  g.mark_output(mp);
  g.mark_output(gp);
  Executor ex(g, pool);
  const int64_t n = 2;
  const Tensor xt = random_f32({n, c, h, w}, rng);
  const std::vector<Tensor> out = ex.run({{"x", xt}});
  // Ho = (9 + 2 - 3) / 2 + 1 = 5, Wo = (8 + 2 - 3) / 1 + 1 = 8; pool ceil: 3 x 4.
  REQUIRE(out[0].shape() == Shape{n, o, 5, 8});
  REQUIRE(out[1].shape() == Shape{n, o, 3, 4});
  REQUIRE(out[2].shape() == Shape{n, o, 1, 1});
  const std::vector<float> xv = values_of(xt), wv = values_of(wt), bv = values_of(bt);
  const std::vector<float> got = values_of(out[0]);
  std::vector<double> want(got.size());
  double worst = 0.0;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t oy = 0; oy < 5; ++oy)
        for (int64_t ox = 0; ox < 8; ++ox) {
          double acc = bv[static_cast<size_t>(oc)];
          for (int64_t ci = 0; ci < c; ++ci)
            for (int64_t ky = 0; ky < 3; ++ky)
              for (int64_t kx = 0; kx < 3; ++kx) {
                const int64_t iy = oy * 2 - 1 + ky, ix = ox - 0 + kx;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                acc += double{xv[static_cast<size_t>(((b * c + ci) * h + iy) * w + ix)]} *
                       wv[static_cast<size_t>(((oc * c + ci) * 3 + ky) * 3 + kx)];
              }
          const size_t oi = static_cast<size_t>(oc);
          const double norm = (acc - mean.data<float>()[oi]) /
                                  std::sqrt(double{var.data<float>()[oi]} + 1e-3) *
                                  scale.data<float>()[oi] +
                              shift.data<float>()[oi];
          const size_t i = static_cast<size_t>(((b * o + oc) * 5 + oy) * 8 + ox);
          want[i] = norm;
          worst = std::max(worst, std::fabs(got[i] - norm));
        }
  CHECK(worst < 1e-4);
  // Max pool 2x2 stride 2 with ceil_mode over the 5 x 8 plane: the last row window holds one row.
  const std::vector<float> mpv = values_of(out[1]);
  const std::vector<float> gpv = values_of(out[2]);
  for (int64_t p = 0; p < n * o; ++p) {
    for (int64_t py = 0; py < 3; ++py)
      for (int64_t px = 0; px < 4; ++px) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t iy = 2 * py; iy < std::min<int64_t>(2 * py + 2, 5); ++iy)
          for (int64_t ix = 2 * px; ix < 2 * px + 2; ++ix) m = std::max(m, got[static_cast<size_t>(p * 40 + iy * 8 + ix)]);
        CHECK(mpv[static_cast<size_t>(p * 12 + py * 4 + px)] == m);
      }
    double sum = 0.0;
    for (int64_t i = 0; i < 40; ++i) sum += got[static_cast<size_t>(p * 40 + i)];
    CHECK(std::fabs(gpv[static_cast<size_t>(p)] - sum / 40.0) < 1e-5);
  }
}

TEST_CASE("conv2d and pool2d refuse bad attributes naming the node", "[cnn]") {
  ThreadPool pool(1);
  auto conv_error = [&](Attributes attrs, int64_t c, int64_t wc) {
    Graph g;
    const ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(1), Dim::fixed(c), Dim::fixed(5),
                                                    Dim::fixed(5)});
    const ValueId w = g.add_constant("w", Tensor::zeros({6, wc, 3, 3}, DType::kF32));
    g.mark_output(g.add("conv2d", "c1", {x, w}, std::move(attrs)));
    return error_of([&] {
      Executor ex(g, pool);
      ex.run({{"x", Tensor::zeros({1, c, 5, 5}, DType::kF32)}});
    });
  };
  CHECK_THAT(conv_error({{"pads", std::vector<int64_t>{1, 1, 1}}}, 4, 4),
             Catch::Contains("node 'c1' (conv2d): attribute 'pads' has 3 values, expected 4"));
  CHECK_THAT(conv_error({{"group", int64_t{4}}}, 6, 1),
             Catch::Contains("node 'c1' (conv2d): group 4 does not divide"));
  CHECK_THAT(conv_error({{"group", int64_t{2}}}, 4, 4),
             Catch::Contains("node 'c1' (conv2d): weight [6, 4, 3, 3] has 4 input channels"));
  CHECK_THAT(conv_error({{"activation", std::string("swish")}}, 4, 4),
             Catch::Contains("node 'c1' (conv2d): unknown activation 'swish'"));
  CHECK_THAT(conv_error({{"strides", std::vector<int64_t>{0, 1}}}, 4, 4),
             Catch::Contains("node 'c1' (conv2d): attribute 'strides' value 0 is below 1"));
  CHECK_THAT(conv_error({{"pads", std::vector<int64_t>{0, 0, 0, 0}},
                         {"dilations", std::vector<int64_t>{3, 3}}},
                        4, 4),
             Catch::Contains("node 'c1' (conv2d): input [1, 4, 5, 5] is smaller"));
  // Each message is one line.
  CHECK(conv_error({{"group", int64_t{4}}}, 6, 1).find('\n') == std::string::npos);

  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(1), Dim::fixed(2), Dim::fixed(4),
                                                  Dim::fixed(4)});
  g.mark_output(g.add("pool2d", "p1", {x}, {{"kind", std::string("avg")}}));
  CHECK_THAT(error_of([&] {
               Executor ex(g, pool);
               ex.run({{"x", Tensor::zeros({1, 2, 4, 4}, DType::kF32)}});
             }),
             Catch::Contains("node 'p1' (pool2d): missing attribute 'kernel'"));
}

namespace {

struct UnaryRef {
  const char* kind;
  double (*ref)(double);
  float lo, hi;
  double abs_tol, rel_tol;
};

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

Tensor run_unary(const std::string& kind, const Tensor& x, Attributes extra = {}) {
  ThreadPool pool(2);
  Graph g;
  std::vector<Dim> dims;
  for (int64_t d : x.shape()) dims.push_back(Dim::fixed(d));
  const ValueId in = g.add_input("x", x.dtype(), dims);
  extra.set("kind", kind);
  g.mark_output(g.add("unary", "u", {in}, extra));
  Executor ex(g, pool);
  return ex.run({{"x", x}})[0].clone();
}

}  // namespace

TEST_CASE("unary f32 kinds match the C library", "[cnn][unary]") {
  // Tolerances: erf to 2e-7 absolute (the op's contract); the exp-based kinds to a few ulp
  // relative; the rest exactly rounded.
  const UnaryRef refs[] = {
      {"relu", [](double x) { return x > 0 ? x : 0.0; }, -5, 5, 0, 0},
      {"sigmoid", sigmoid_ref, -30, 30, 1e-7, 1e-6},
      {"tanh", [](double x) { return std::tanh(x); }, -10, 10, 2e-7, 1e-6},
      {"erf", [](double x) { return std::erf(x); }, -6, 6, 2e-7, 0},
      {"sqrt", [](double x) { return std::sqrt(x); }, 0, 100, 0, 1e-7},
      {"exp", [](double x) { return std::exp(x); }, -80, 80, 0, 1e-6},
      {"log", [](double x) { return std::log(x); }, 1e-3f, 100, 1e-7, 1e-6},
      {"neg", [](double x) { return -x; }, -5, 5, 0, 0},
      {"abs", [](double x) { return std::fabs(x); }, -5, 5, 0, 0},
      {"reciprocal", [](double x) { return 1.0 / x; }, 0.1f, 10, 0, 1e-7},
      {"gelu", gelu_ref, -8, 8, 4e-7, 1e-6},
      {"gelu_tanh", gelu_tanh_ref, -8, 8, 4e-7, 1e-6},
      {"hard_sigmoid", [](double x) { return std::max(0.0, std::min(1.0, 0.2 * x + 0.5)); }, -5,
       5, 1e-7, 1e-7},
      {"hard_swish", [](double x) { return x * std::max(0.0, std::min(1.0, x / 6 + 0.5)); }, -6,
       6, 1e-7, 1e-6},
      {"leaky_relu", [](double x) { return x < 0 ? 0.01 * x : x; }, -5, 5, 1e-9, 1e-7},
      {"silu", [](double x) { return x * sigmoid_ref(x); }, -30, 30, 1e-7, 1e-6},
      {"softplus", [](double x) { return std::log1p(std::exp(x)); }, -30, 30, 1e-7, 1e-6},
      {"floor", [](double x) { return std::floor(x); }, -5, 5, 0, 0},
      {"ceil", [](double x) { return std::ceil(x); }, -5, 5, 0, 0},
  };
  std::mt19937 rng(9);
  for (const UnaryRef& r : refs) {
    // 3 x 7 x 1001 (a tail after the vectors) plus a few exact points.
    std::vector<float> xv = random_vec(3 * 7 * 1001, rng, r.lo, r.hi);
    if (r.lo < 0 && r.hi > 0) xv[0] = 0.0f, xv[1] = -0.0f, xv[2] = 0.3999f, xv[3] = 0.927f;
    const Tensor y = run_unary(r.kind, Tensor::from_f32({3, 7, 1001}, xv));
    const std::vector<float> yv = values_of(y);
    double worst = 0.0;
    for (size_t i = 0; i < xv.size(); ++i) {
      const double want = r.ref(xv[i]);
      const double err = std::fabs(yv[i] - want);
      worst = std::max(worst, err / (r.abs_tol + r.rel_tol * std::fabs(want) + 1e-30));
      if (err > r.abs_tol + r.rel_tol * std::fabs(want)) {
        INFO(r.kind << " x=" << xv[i] << " got " << yv[i] << " want " << want);
        CHECK(err <= r.abs_tol + r.rel_tol * std::fabs(want));
        break;
      }
    }
    INFO(r.kind << " worst error / tolerance " << worst);
    CHECK(worst <= 1.0);
  }
  // clip with its bounds, and defaults: no bound.
  const Tensor xs = Tensor::from_f32({5}, {-3.0f, -1.0f, 0.5f, 2.0f, 9.0f});
  CHECK(values_of(run_unary("clip", xs, {{"min", -1.5}, {"max", 2.0}})) ==
        std::vector<float>{-1.5f, -1.0f, 0.5f, 2.0f, 2.0f});
  CHECK(values_of(run_unary("clip", xs)) == values_of(xs));
  CHECK(values_of(run_unary("leaky_relu", xs, {{"alpha", 0.5}}))[0] == -1.5f);
}

TEST_CASE("unary not, integer neg/abs and known values", "[cnn][unary]") {
  Tensor b = Tensor::zeros({4}, DType::kBool);
  uint8_t* bp = static_cast<uint8_t*>(b.raw());
  bp[1] = 1, bp[3] = 1;
  const Tensor nb = run_unary("not", b);
  const uint8_t* nbp = static_cast<const uint8_t*>(nb.raw());
  CHECK((nbp[0] == 1 && nbp[1] == 0 && nbp[2] == 1 && nbp[3] == 0));
  const Tensor i32 = Tensor::from_i32({3}, {-4, 0, 7});
  const Tensor n32 = run_unary("neg", i32);
  CHECK((n32.data<int32_t>()[0] == 4 && n32.data<int32_t>()[1] == 0 && n32.data<int32_t>()[2] == -7));
  const Tensor a32 = run_unary("abs", i32);
  CHECK((a32.data<int32_t>()[0] == 4 && a32.data<int32_t>()[2] == 7));
  Tensor i64 = Tensor::zeros({2}, DType::kI64);
  i64.data<int64_t>()[0] = -(int64_t{1} << 40);
  i64.data<int64_t>()[1] = 5;
  const Tensor a64 = run_unary("abs", i64);
  CHECK((a64.data<int64_t>()[0] == (int64_t{1} << 40) && a64.data<int64_t>()[1] == 5));

  // Inference folds known integer contents.
  Graph g;
  const ValueId x = g.add_input("x", DType::kI64, {Dim::fixed(3)});
  g.add("unary", "neg", {x}, {{"kind", std::string("neg")}});
  const ops::OpSchema& s = ops::OpRegistry::instance().schema("unary");
  ops::TensorDesc in{{3}, DType::kI64};
  in.value = std::vector<int64_t>{1, -2, 3};
  const std::vector<ops::TensorDesc> out = s.infer(g.nodes()[0], {in});
  REQUIRE(out[0].value);
  CHECK(*out[0].value == std::vector<int64_t>{-1, 2, -3});
  // Wrong dtypes are refused naming the node.
  CHECK_THROWS_WITH(s.infer(g.nodes()[0], {{{3}, DType::kBool}}),
                    Catch::Contains("node 'neg' (unary): kind 'neg' takes f32, i32 or i64"));
  Graph g2;
  const ValueId x2 = g2.add_input("x", DType::kF32, {Dim::fixed(3)});
  g2.add("unary", "bad", {x2}, {{"kind", std::string("cube")}});
  CHECK_THROWS_WITH(s.infer(g2.nodes()[0], {{{3}, DType::kF32}}),
                    Catch::Contains("node 'bad' (unary): unknown kind 'cube'"));
}

namespace {

// A ResNet bottleneck tail: y = relu(bn(conv3x3(x)) + shortcut), where shortcut is a 1x1 conv of
// x placed after the main branch (so the fused conv must move to the add's place), plus a
// second block whose add takes a constant (a broadcast bias, never fused) and a clip.
Graph build_block(uint32_t seed, bool constant_add) {
  std::mt19937 rng(seed);
  const int64_t c = 6, o = 8;
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("n"), Dim::fixed(c), Dim::sym("h"),
                                                  Dim::sym("w")});
  const ValueId y = g.add("conv2d", "conv", {x, g.add_constant("w", random_f32({o, c, 3, 3}, rng)),
                                             g.add_constant("b", random_f32({o}, rng))},
                          {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  const ValueId bn = g.add("batch_norm", "bn",
                           {y, g.add_constant("s", random_f32({o}, rng)),
                            g.add_constant("sh", random_f32({o}, rng)),
                            g.add_constant("m", random_f32({o}, rng)),
                            g.add_constant("v", random_f32({o}, rng, 0.5f, 2.0f))},
                           {{"eps", 1e-5}});
  const ValueId sc =
      g.add("conv2d", "shortcut", {x, g.add_constant("ws", random_f32({o, c, 1, 1}, rng))});
  const ValueId sum = g.add("binary", "add", {bn, sc}, {{"kind", std::string("add")}});
  const ValueId r = g.add("unary", "relu", {sum}, {{"kind", std::string("relu")}});
  ValueId out = r;
  if (constant_add) {
    const ValueId y2 = g.add("conv2d", "conv2",
                             {r, g.add_constant("w2", random_f32({o, o, 1, 1}, rng))});
    const ValueId s2 = g.add("binary", "add2",
                             {y2, g.add_constant("bias2", random_f32({1, o, 1, 1}, rng))},
                             {{"kind", std::string("add")}});
    out = g.add("unary", "clip", {s2}, {{"kind", std::string("clip")}, {"min", 0.0}, {"max", 0.6}});
  }
  g.mark_output(out);
  return g;
}

}  // namespace

TEST_CASE("conv passes fold batch_norm, the residual add and the activation", "[cnn][passes]") {
  ThreadPool pool(2);
  std::mt19937 rng(21);
  for (bool constant_add : {false, true}) {
    INFO("constant add block: " << constant_add);
    Graph plain = build_block(3, constant_add);
    Graph fused = build_block(3, constant_add);
    const int before = live_nodes(fused);
    CHECK(passes::fold_conv_batch_norm(fused) == 1);
    fused.compact();
    CHECK(passes::fuse_conv_residual(fused) == 1);  // the constant add stays a binary
    fused.compact();
    CHECK(passes::fuse_conv_activation(fused) == 1);  // conv2's output feeds the add, not clip
    fused.compact();
    fused.validate();
    // conv + bn + shortcut + add + relu -> shortcut + conv(residual, relu).
    CHECK(live_nodes(fused) == before - 3);
    int convs = 0;
    for (const Node& n : fused.nodes()) {
      if (n.dead) continue;
      CHECK(n.op != "batch_norm");
      if (n.op == "conv2d" && n.inputs.size() == 4) {
        ++convs;
        CHECK(n.attrs.get_string("activation") == "relu");
      }
    }
    CHECK(convs == 1);
    Executor ex_plain(plain, pool);
    Executor ex_fused(fused, pool);
    for (Shape shape : {Shape{1, 6, 7, 9}, Shape{3, 6, 12, 5}}) {
      const Tensor x = random_f32(shape, rng);
      const std::vector<float> a = values_of(ex_plain.run({{"x", x}})[0]);
      const std::vector<float> b = values_of(ex_fused.run({{"x", x}})[0]);
      REQUIRE(a.size() == b.size());
      double worst = 0.0;
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double{std::fabs(a[i] - b[i])});
      CHECK(worst <= 1e-5);
    }
  }
}

TEST_CASE("conv passes leave shared or mismatched patterns alone", "[cnn][passes]") {
  std::mt19937 rng(4);
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(1), Dim::fixed(4), Dim::fixed(6),
                                                  Dim::fixed(6)});
  const ValueId y = g.add("conv2d", "conv", {x, g.add_constant("w", random_f32({4, 4, 1, 1}, rng))});
  // The conv's output has a second reader: no activation fusion.
  const ValueId r = g.add("unary", "relu", {y}, {{"kind", std::string("relu")}});
  g.mark_output(r);
  g.mark_output(y);
  // An add of a [1, 4, 1, 1] intermediate broadcasts: no residual fusion.
  const ValueId y2 = g.add("conv2d", "conv2", {x, g.add_constant("w2", random_f32({4, 4, 1, 1}, rng))});
  const ValueId gp = g.add("pool2d", "gap", {x}, {{"kind", std::string("avg")}, {"global", int64_t{1}}});
  g.mark_output(g.add("binary", "add", {y2, gp}, {{"kind", std::string("add")}}));
  CHECK(passes::fuse_conv_activation(g) == 0);
  CHECK(passes::fuse_conv_residual(g) == 0);
  CHECK(passes::fold_conv_batch_norm(g) == 0);
}
