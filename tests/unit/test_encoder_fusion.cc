// The encoder fusions (engine/graph/passes/encoder_passes.h): the attention_nc op against a
// double-precision reference, fuse_encoder_attention on graphs written the way transformers'
// BERT export writes attention (and look-alikes it must leave alone), and add_layer_norm.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/graph/passes/encoder_passes.h"
#include "engine/graph/passes/matmul_passes.h"
#include "engine/graph/passes/passes.h"

using namespace sampan;
using namespace sampan::graph;

namespace {

Tensor random_f32(const Shape& shape, std::mt19937& rng, float lo = -2.0f, float hi = 2.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = d(rng);
  return Tensor::from_f32(shape, v);
}

Tensor i64s(const std::vector<int64_t>& v, bool scalar = false) {
  Tensor t = Tensor::empty(scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())}, DType::kI64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

std::vector<std::vector<float>> run_all(const Graph& g, const std::map<std::string, Tensor>& in) {
  ThreadPool pool(2);
  Executor ex(g, pool);
  std::vector<std::vector<float>> outs;
  for (const Tensor& t : ex.run(in)) {
    const Tensor y = t.contiguous();
    outs.emplace_back(y.data<float>(), y.data<float>() + y.numel());
  }
  return outs;
}

std::vector<float> run(const Graph& g, const std::map<std::string, Tensor>& in) { return run_all(g, in)[0]; }

int live(const Graph& g, const std::string& op) { return passes::op_histogram(g)[op]; }

int live_nodes(const Graph& g) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.dead ? 0 : 1;
  return n;
}

// Double reference of attention_nc. q, k: [B, S, H·D] (row stride ld), v [B, S, H·D]; mask
// [B, 1, mq, S] (mq 1 or S) or empty.
std::vector<double> reference(const float* q, const float* k, const float* v, int64_t ld, const float* mask, int64_t mq,
                              int64_t b_, int64_t s_, int64_t h_, int64_t d_, double scale) {
  std::vector<double> out(static_cast<size_t>(b_ * s_ * h_ * d_), 0.0);
  std::vector<double> p(static_cast<size_t>(s_));
  for (int64_t b = 0; b < b_; ++b) {
    for (int64_t h = 0; h < h_; ++h) {
      for (int64_t i = 0; i < s_; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < s_; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < d_; ++d) dot += double(q[(b * s_ + i) * ld + h * d_ + d]) * k[(b * s_ + j) * ld + h * d_ + d];
          double m = mask ? double(mask[(b * mq + (mq == 1 ? 0 : i)) * s_ + j]) : 0.0;
          p[size_t(j)] = dot * scale + m;
          mx = std::max(mx, p[size_t(j)]);
        }
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < d_; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < s_; ++j) acc += p[size_t(j)] / sum * v[(b * s_ + j) * ld + h * d_ + d];
          out[size_t((b * s_ + i) * h_ * d_ + h * d_ + d)] = acc;
        }
      }
    }
  }
  return out;
}

// A key-padding mask [B, 1, mq, S] as BERT builds it: 0 for kept keys, finfo(f32).min for
// padding (batch item b keeps its first S - 2·b keys, at least one); mq = S adds random
// per-query values.
Tensor make_mask(int64_t b_, int64_t s_, int64_t mq, std::mt19937& rng) {
  Tensor m = random_f32({b_, 1, mq, s_}, rng, -1.0f, 1.0f);
  float* p = m.data<float>();
  for (int64_t b = 0; b < b_; ++b) {
    const int64_t keep = std::max<int64_t>(1, s_ - 2 * b);
    for (int64_t i = 0; i < mq; ++i) {
      for (int64_t j = 0; j < s_; ++j) {
        float& x = p[(b * mq + i) * s_ + j];
        if (mq == 1) x = 0.0f;
        if (j >= keep) x = std::numeric_limits<float>::lowest();
      }
    }
  }
  return m;
}

}  // namespace

TEST_CASE("attention_nc matches a double reference over awkward sizes, masks and strided q/k/v", "[encoder]") {
  std::mt19937 rng(11);
  const int64_t B = 2;
  for (int64_t S : {1, 7, 37}) {
    for (int64_t D : {16, 64}) {
      for (int64_t H : {1, 4}) {
        for (int mask_kind : {0, 1, 2}) {  // none, [B,1,1,S] padding, [B,1,S,S] padding + values
          CAPTURE(S, D, H, mask_kind);
          const int64_t n = H * D;
          // q, k, v are views of one fused [B, S, 3n] output (a split on the last axis).
          Graph g;
          const ValueId x = g.add_input("qkv", DType::kF32, {Dim::sym("batch"), Dim::sym("seq"), Dim::fixed(3 * n)});
          const std::vector<ValueId> parts = g.add_node("split", "split", {x}, {{"sizes", std::vector<int64_t>{n, n, n}}, {"axis", int64_t{-1}}}, 3);
          std::vector<ValueId> in = parts;
          const int64_t mq = mask_kind == 2 ? S : 1;
          if (mask_kind) in.push_back(g.add_input("mask", DType::kF32, {Dim::sym("batch"), Dim::fixed(1), Dim::fixed(mq), Dim::sym("seq")}));
          const double scale = 1.0 / std::sqrt(double(D));
          g.mark_output(g.add("attention_nc", "attn", in, {{"n_heads", H}, {"scale", scale}}));
          const Tensor tqkv = random_f32({B, S, 3 * n}, rng);
          std::map<std::string, Tensor> feeds = {{"qkv", tqkv}};
          Tensor tm;
          if (mask_kind) feeds["mask"] = tm = make_mask(B, S, mq, rng);
          const std::vector<float> got = run(g, feeds);
          const float* p = tqkv.data<float>();
          const std::vector<double> want = reference(p, p + n, p + 2 * n, 3 * n, mask_kind ? tm.data<float>() : nullptr, mq, B, S, H, D, scale);
          REQUIRE(got.size() == want.size());
          double worst = 0;
          for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
          CHECK(worst <= 1e-5);
        }
      }
    }
  }
}

TEST_CASE("attention_nc refuses a mask that does not broadcast and bad head counts", "[encoder]") {
  Graph g;
  const ValueId q = g.add_input("q", DType::kF32, {Dim::fixed(2), Dim::fixed(5), Dim::fixed(8)});
  const ValueId m = g.add_input("m", DType::kF32, {Dim::fixed(2), Dim::fixed(1), Dim::fixed(1), Dim::fixed(4)});
  g.mark_output(g.add("attention_nc", "attn", {q, q, q, m}, {{"n_heads", int64_t{2}}}));
  CHECK_THROWS_WITH(run(g, {{"q", Tensor::zeros({2, 5, 8}, DType::kF32)}, {"m", Tensor::zeros({2, 1, 1, 4}, DType::kF32)}}),
                    Catch::Contains("attn") && Catch::Contains("broadcast"));
  Graph g2;
  const ValueId q2 = g2.add_input("q", DType::kF32, {Dim::fixed(2), Dim::fixed(5), Dim::fixed(8)});
  g2.mark_output(g2.add("attention_nc", "attn", {q2, q2, q2}, {{"n_heads", int64_t{3}}}));
  CHECK_THROWS_WITH(run(g2, {{"q", Tensor::zeros({2, 5, 8}, DType::kF32)}}), Catch::Contains("n_heads 3"));
}

namespace {

// What fuse_encoder_attention must find, built as transformers' BERT export (after the matmul
// passes' inputs): Q/K/V matmul + bias, reshape by concat(unsqueeze(gather(shape(x))), ...),
// transposes, q·kᵀ, scale, + mask, softmax, ·v, transpose, reshape, output dense.
struct Variant {
  bool div_scale = false;          // / sqrt(D) instead of · 1/sqrt(D)
  bool two_k_transposes = false;   // k: [0,2,1,3] then [0,1,3,2]
  bool with_mask = true;
  bool const_targets = false;      // [0, 0, H, D] and [0, 0, H·D] constants
  std::vector<int64_t> out_perm = {0, 2, 1, 3};  // look-alike: anything else
  int64_t k_head_dim = 0;          // look-alike: another head size in k's reshape (0: D)
};

struct Built {
  Graph g;
  int64_t hidden, heads, dim;
};

Built build_bert_attention(std::mt19937& rng, int64_t hidden, int64_t heads, const Variant& var) {
  Built b{{}, hidden, heads, hidden / heads};
  Graph& g = b.g;
  const int64_t D = b.dim;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("batch"), Dim::sym("seq"), Dim::fixed(hidden)});
  ValueId mask = kNoValue;
  if (var.with_mask) mask = g.add_input("mask", DType::kF32, {Dim::sym("batch"), Dim::fixed(1), Dim::fixed(1), Dim::sym("seq")});
  auto dim_of = [&](ValueId v, int64_t i, const std::string& tag) {
    const ValueId sh = g.add("shape", tag + "/shape", {v});
    const ValueId ga = g.add("gather", tag + "/gather", {sh, g.add_constant(tag + "/i", i64s({i}, true))}, {{"axis", int64_t{0}}});
    return g.add("unsqueeze", tag + "/unsq", {ga}, {{"axes", std::vector<int64_t>{0}}});
  };
  auto target = [&](const std::string& tag, std::vector<int64_t> tail) {
    if (var.const_targets) {
      std::vector<int64_t> t = {0, 0};
      for (int64_t& v : tail) if (v == -1) v = tail.size() == 2 ? hidden / D : hidden;  // all known
      t.insert(t.end(), tail.begin(), tail.end());
      return g.add_constant(tag + "/target", i64s(t));
    }
    return g.add("concat", tag + "/target", {dim_of(x, 0, tag + "/b"), dim_of(x, 1, tag + "/s"), g.add_constant(tag + "/tail", i64s(tail))},
                 {{"axis", int64_t{0}}});
  };
  auto dense = [&](const std::string& name, ValueId in) {
    const ValueId w = g.add_constant(name + ".w", random_f32({hidden, hidden}, rng, -0.3f, 0.3f));
    const ValueId mm = g.add("matmul", name, {in, w});
    return g.add("binary", name + "/bias", {g.add_constant(name + ".b", random_f32({hidden}, rng, -0.3f, 0.3f)), mm},
                 {{"kind", std::string("add")}});
  };
  auto transpose = [&](const std::string& name, ValueId in, std::vector<int64_t> perm) {
    return g.add("transpose", name, {in}, {{"perm", perm}});
  };
  const ValueId q = transpose("q4", g.add("reshape", "q_r", {dense("query", x), target("q", {-1, D})}), {0, 2, 1, 3});
  const int64_t kd = var.k_head_dim ? var.k_head_dim : D;
  const ValueId kr = g.add("reshape", "k_r", {dense("key", x), target("k", {-1, kd})});
  const ValueId k = var.two_k_transposes ? transpose("k4b", transpose("k4a", kr, {0, 2, 1, 3}), {0, 1, 3, 2})
                                         : transpose("k4", kr, {0, 2, 3, 1});
  const ValueId v = transpose("v4", g.add("reshape", "v_r", {dense("value", x), target("v", {-1, D})}), {0, 2, 1, 3});
  ValueId s = g.add("matmul", "qk", {q, k});
  if (var.div_scale) {
    s = g.add("binary", "scale", {s, g.add_constant("sqrt_d", Tensor::from_f32({}, {float(std::sqrt(double(D)))}))}, {{"kind", std::string("div")}});
  } else {
    s = g.add("binary", "scale", {s, g.add_constant("inv_sqrt_d", Tensor::from_f32({}, {float(1.0 / std::sqrt(double(D)))}))}, {{"kind", std::string("mul")}});
  }
  if (mask != kNoValue) s = g.add("binary", "add_mask", {s, mask}, {{"kind", std::string("add")}});
  const ValueId p = g.add("softmax", "softmax", {s}, {{"axis", int64_t{-1}}});
  const ValueId ctx = transpose("ctx_t", g.add("matmul", "pv", {p, v}), var.out_perm);
  const ValueId merged = g.add("reshape", "merge", {ctx, target("o", {-1})});
  g.mark_output(dense("out", merged));
  return b;
}

const std::vector<passes::Pass> kPipeline = {{"fuse_matmul_bias", passes::fuse_matmul_bias},
                                             {"fuse_encoder_attention", passes::fuse_encoder_attention}};

}  // namespace

TEST_CASE("fuse_encoder_attention turns the BERT export's attention into attention_nc", "[encoder]") {
  std::vector<Variant> variants(5);
  variants[1].div_scale = true;
  variants[2].two_k_transposes = true;
  variants[3].with_mask = false;
  variants[4].const_targets = true;
  int vi = 0;
  for (const Variant& var : variants) {
    CAPTURE(vi++);
    std::mt19937 rng(21);
    Built b = build_bert_attention(rng, 64, 4, var);
    const int64_t B = 2, S = 9;
    std::map<std::string, Tensor> in = {{"x", random_f32({B, S, 64}, rng)}};
    if (var.with_mask) in["mask"] = make_mask(B, S, 1, rng);
    const std::vector<float> before = run(b.g, in);
    const int nodes_before = live_nodes(b.g);
    const passes::PassReport r = passes::run_passes(b.g, kPipeline);
    CHECK(r.rewrites("fuse_encoder_attention") == 1);
    CHECK(live(b.g, "attention_nc") == 1);
    CHECK(live(b.g, "softmax") == 0);
    CHECK(live(b.g, "transpose") == 0);
    CHECK(live(b.g, "reshape") == 0);
    CHECK(live(b.g, "matmul") == 4);  // q, k, v, out
    CHECK(live_nodes(b.g) < nodes_before - 10);
    const std::vector<float> after = run(b.g, in);
    REQUIRE(after.size() == before.size());
    for (size_t i = 0; i < after.size(); ++i) CHECK(std::abs(after[i] - before[i]) <= 1e-5 * (1 + std::abs(before[i])));
  }
}

TEST_CASE("fuse_encoder_attention leaves look-alikes alone", "[encoder]") {
  SECTION("the heads are not transposed back") {
    Variant var;
    var.out_perm = {0, 1, 2, 3};
    std::mt19937 rng(3);
    Built b = build_bert_attention(rng, 64, 4, var);
    CHECK(passes::run_passes(b.g, kPipeline).rewrites("fuse_encoder_attention") == 0);
    CHECK(live(b.g, "softmax") == 1);
  }
  SECTION("k is split into other heads than q") {
    Variant var;
    var.k_head_dim = 32;
    std::mt19937 rng(3);
    Built b = build_bert_attention(rng, 64, 4, var);
    CHECK(passes::run_passes(b.g, kPipeline).rewrites("fuse_encoder_attention") == 0);
  }
  SECTION("an intermediate has a second reader") {
    std::mt19937 rng(3);
    Built b = build_bert_attention(rng, 64, 4, Variant{});
    for (const Node& n : b.g.nodes()) {
      if (n.name == "softmax") b.g.mark_output(n.outputs[0]);
    }
    CHECK(passes::run_passes(b.g, kPipeline).rewrites("fuse_encoder_attention") == 0);
  }
}

TEST_CASE("add_layer_norm matches a double reference, broadcast or not", "[encoder]") {
  std::mt19937 rng(7);
  for (bool broadcast : {false, true}) {
    for (int64_t n : {1, 7, 64, 768}) {
      CAPTURE(broadcast, n);
      const int64_t B = 2, S = 13;
      Graph g;
      const ValueId a = g.add_input("a", DType::kF32, {Dim::fixed(B), Dim::fixed(S), Dim::fixed(n)});
      const ValueId b = g.add_input("b", DType::kF32, {Dim::fixed(broadcast ? 1 : B), Dim::fixed(S), Dim::fixed(n)});
      const Tensor scale = random_f32({n}, rng), bias = random_f32({n}, rng);
      const ValueId sum = g.add("binary", "add", {a, b}, {{"kind", std::string("add")}});
      g.mark_output(g.add("layer_norm", "ln", {sum, g.add_constant("scale", scale), g.add_constant("bias", bias)},
                          {{"axis", int64_t{-1}}, {"eps", 1e-12}}));
      const Tensor ta = random_f32({B, S, n}, rng, -3.0f, 5.0f), tb = random_f32({broadcast ? 1 : B, S, n}, rng);
      const std::vector<float> before = run(g, {{"a", ta}, {"b", tb}});
      CHECK(passes::fuse_add_layer_norm(g) == 1);
      g.compact();
      CHECK(passes::op_histogram(g) == passes::OpHistogram{{"add_layer_norm", 1}});
      const std::vector<float> got = run(g, {{"a", ta}, {"b", tb}});
      for (int64_t r = 0; r < B * S; ++r) {
        const int64_t rb = broadcast ? r % S : r;
        std::vector<double> x(static_cast<size_t>(n));
        double mean = 0, var = 0;
        for (int64_t j = 0; j < n; ++j) mean += x[size_t(j)] = double(ta.data<float>()[r * n + j] + tb.data<float>()[rb * n + j]);
        mean /= double(n);
        for (double v : x) var += (v - mean) * (v - mean);
        var /= double(n);
        for (int64_t j = 0; j < n; ++j) {
          const double want = (x[size_t(j)] - mean) / std::sqrt(var + 1e-12) * scale.data<float>()[j] + bias.data<float>()[j];
          const size_t i = size_t(r * n + j);
          CHECK(std::abs(got[i] - want) <= 2e-5 * (1 + std::abs(want)));
          CHECK(got[i] == Approx(before[i]).margin(1e-5));
        }
      }
    }
  }
}

TEST_CASE("fuse_add_layer_norm keeps a sum read elsewhere or made with a constant", "[encoder]") {
  Graph g;
  const ValueId a = g.add_input("a", DType::kF32, {Dim::fixed(2), Dim::fixed(8)});
  const ValueId b = g.add_input("b", DType::kF32, {Dim::fixed(2), Dim::fixed(8)});
  const ValueId sum = g.add("binary", "add", {a, b}, {{"kind", std::string("add")}});
  g.mark_output(g.add("layer_norm", "ln", {sum}, {{"axis", int64_t{-1}}}));
  g.mark_output(sum);
  const ValueId c = g.add("binary", "addc", {a, g.add_constant("c", Tensor::from_f32({8}, std::vector<float>(8, 1.0f)))},
                          {{"kind", std::string("add")}});
  g.mark_output(g.add("layer_norm", "ln2", {c}, {{"axis", int64_t{-1}}}));
  const ValueId d = g.add("binary", "add2", {a, b}, {{"kind", std::string("add")}});
  g.mark_output(g.add("layer_norm", "ln3", {d}, {{"axis", int64_t{0}}}));
  CHECK(passes::fuse_add_layer_norm(g) == 0);
}
