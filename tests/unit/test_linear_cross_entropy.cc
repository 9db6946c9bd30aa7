// linear_cross_entropy (engine/ops/linear_cross_entropy.cc), training's fused LM head: against
// the unfused linear -> cross_entropy graph and its autograd backward (cross_entropy_grad, then
// linear_grad_input), for weight formats with and without scales, asymmetric int4 (zero points),
// a bias, ignored rows, chunks of rows that do not divide the batch, and the bf16 attributes
// against explicit rounding nodes; then its errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/models/weight_quant.h"
#include "engine/train/autograd.h"
#include "kernels/common/half.h"
#include "kernels/cpu/gemm_cpu.h"

using namespace sampan;
using graph::Dim;
using graph::kNoValue;
using graph::ValueId;

namespace {

std::vector<float> random_floats(size_t n, std::mt19937& rng, double scale) {
  std::normal_distribution<double> d(0.0, scale);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(rng));
  return v;
}

// ||a - b|| / ||b||.
double rel(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  REQUIRE(x.numel() == y.numel());
  double d = 0, n = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double e = x.data<float>()[i] - y.data<float>()[i];
    d += e * e;
    n += static_cast<double>(y.data<float>()[i]) * y.data<float>()[i];
  }
  return std::sqrt(d / n);
}

struct Head {
  Tensor weight, bias, scales, zeros;
  graph::Attributes attrs;  // linear's, for the weight's format
};

// A [v, k] weight in `format`: "f32", "bf16", "f16", "fp8" (scales), "int4" (group 32, scales),
// "int4_asym" (scales and zero points); "bias" adds an f32 bias to f32 weights.
Head make_head(const std::string& format, int64_t v, int64_t k, std::mt19937& rng) {
  const std::vector<float> w = random_floats(static_cast<size_t>(v * k), rng, 0.5);
  Head h;
  const Tensor f32 = Tensor::from_f32({v, k}, w);
  if (format == "f32" || format == "bias") {
    h.weight = f32;
    if (format == "bias") h.bias = Tensor::from_f32({v}, random_floats(v, rng, 1.0));
  } else if (format == "bf16" || format == "f16") {
    h.weight = Tensor::empty({v, k}, format == "bf16" ? DType::kBF16 : DType::kF16);
    for (int64_t i = 0; i < v * k; ++i) {
      h.weight.data<uint16_t>()[i] = format == "bf16" ? f32_to_bf16(w[i]) : f32_to_f16(w[i]);
    }
  } else {
    QuantScheme s;
    s.format = format == "fp8" ? WeightFormat::kFp8 : WeightFormat::kInt4;
    s.group_size = 32;
    s.symmetric = format != "int4_asym";
    const models::QuantizedMatrix q = models::quantize_matrix(f32, s, "lm_head");
    h.weight = q.data;
    h.scales = q.scales;
    h.zeros = q.zeros;
    if (s.format == WeightFormat::kInt4) h.attrs.set("group_size", int64_t{32});
  }
  return h;
}

struct Run {
  Tensor loss, dx;
};

// How `run` rounds, as bf16 training does: kNodes a round_bf16 on x (its gradient rule rounds
// dx) and, unfused, a round_grad_bf16 on the logits (fused: round_dy_bf16); kAttr the fused op's
// round_x_bf16 instead of the node on x (what folding makes of it in the forward).
enum class Round { kNone, kNodes, kAttr };

// loss = cross_entropy(linear(x, head), targets) and dx = d(loss)/dx through autograd, either as
// the two ops (fused false) or as linear_cross_entropy with chunk_rows `chunk`. `grad` false:
// the forward alone (eval).
Run run(const Head& h, const Tensor& x, const Tensor& targets, bool fused, int64_t chunk,
        Round round, bool grad, cpu::TaskRunner& pool) {
  graph::Graph g;
  const int64_t n = x.dim(0), k = x.dim(1);
  const ValueId xv = g.add_input("x", DType::kF32, {Dim::fixed(n), Dim::fixed(k)});
  const ValueId tv = g.add_input("targets", DType::kI32, {Dim::fixed(n)});
  auto constant = [&](const char* name, const Tensor& t) {
    return t.defined() ? g.add_constant(name, t) : kNoValue;
  };
  std::vector<ValueId> slots = {xv, constant("w", h.weight), constant("b", h.bias),
                                constant("s", h.scales), constant("z", h.zeros)};
  graph::Attributes attrs = h.attrs;
  ValueId loss;
  if (round == Round::kNodes) slots[0] = g.add("round_bf16", "x16", {xv});
  if (fused) {
    slots.push_back(tv);
    attrs.set("with_grad", int64_t{grad ? 1 : 0});
    attrs.set("chunk_rows", chunk);
    if (round != Round::kNone) attrs.set("round_dy_bf16", int64_t{1});
    if (round == Round::kAttr) attrs.set("round_x_bf16", int64_t{1});
    loss = g.add_node("linear_cross_entropy", "loss", slots, attrs, 3)[0];
  } else {
    REQUIRE(round != Round::kAttr);
    while (slots.back() == kNoValue) slots.pop_back();
    ValueId logits = g.add("linear", "lm_head", slots, attrs);
    if (round == Round::kNodes) logits = g.add("round_grad_bf16", "y16", {logits});
    loss = g.add_node("cross_entropy", "loss", {logits, tv}, {}, 2)[0];
  }
  g.mark_output(loss);
  if (grad) train::build_backward(g, loss, {xv});
  g.validate();
  graph::Executor ex(g, pool);
  const std::vector<Tensor> out = ex.run({{"x", x}, {"targets", targets}});
  return {out[0].contiguous(), grad ? out[1].contiguous() : Tensor()};
}

}  // namespace

TEST_CASE("linear_cross_entropy: loss and dx as the unfused linear + cross_entropy graph",
          "[ops]") {
  std::mt19937 rng(21);
  ThreadPool pool(2);
  const cpu::ScopedGemmPrecision exact(cpu::GemmPrecision::kF32);
  const int64_t n = 23, k = 64, v = 37;
  const Tensor x = Tensor::from_f32({n, k}, random_floats(static_cast<size_t>(n * k), rng, 1.0));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((7 * i + 3) % v);
  t[4] = t[11] = t[22] = -100;  // ignored rows, one in the last chunk
  const Tensor targets = Tensor::from_i32({n}, t);
  for (const std::string format : {"f32", "bias", "bf16", "f16", "fp8", "int4", "int4_asym"}) {
    const Head h = make_head(format, v, k, rng);
    const Run want = run(h, x, targets, false, 0, Round::kNone, true, pool);
    for (int64_t chunk : {int64_t{5}, int64_t{23}, int64_t{0}}) {
      INFO(format << ", chunk_rows " << chunk);
      const Run got = run(h, x, targets, true, chunk, Round::kNone, true, pool);
      // The same products per row; a GEMM over 5 rows may sum them in another order. With
      // int4 weights a GEMM of at most 16 rows takes the decode kernels, which round x to 16
      // bits per group even at kF32 (kernels/cpu/gemm_quant.h: about 2^-16 of the group's
      // largest |x|), where the 23 rows of the unfused graph multiply exactly in f32.
      const double bound = format.starts_with("int4") && chunk == 5 ? 1e-4 : 1e-6;
      CHECK(rel(got.loss, want.loss) <= bound);
      CHECK(rel(got.dx, want.dx) <= bound);
      const Run eval = run(h, x, targets, true, chunk, Round::kNone, false, pool);
      CHECK(rel(eval.loss, want.loss) <= bound);
    }
  }
}

TEST_CASE("linear_cross_entropy: round_x_bf16 and round_dy_bf16 as bf16 training's nodes",
          "[ops]") {
  std::mt19937 rng(22);
  ThreadPool pool(2);
  const cpu::ScopedGemmPrecision exact(cpu::GemmPrecision::kF32);
  const int64_t n = 19, k = 32, v = 41;
  const Tensor x = Tensor::from_f32({n, k}, random_floats(static_cast<size_t>(n * k), rng, 1.0));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((5 * i + 1) % v);
  const Tensor targets = Tensor::from_i32({n}, t);
  for (const char* format : {"f32", "bf16"}) {
    INFO(format);
    const Head h = make_head(format, v, k, rng);
    const Run want = run(h, x, targets, false, 0, Round::kNodes, true, pool);
    const Run got = run(h, x, targets, true, 6, Round::kNodes, true, pool);
    CHECK(rel(got.loss, want.loss) <= 1e-6);
    CHECK(rel(got.dx, want.dx) <= 1e-6);
    // round_x_bf16 rounds x for the product as the node does (the loss); the node's gradient
    // rule, which rounds dx, is then absent.
    const Run attr = run(h, x, targets, true, 6, Round::kAttr, true, pool);
    CHECK(rel(attr.loss, want.loss) <= 1e-6);
    // The roundings happened: without them loss and dx move by about bf16's step.
    const Run plain = run(h, x, targets, true, 6, Round::kNone, true, pool);
    CHECK(rel(plain.loss, want.loss) > 1e-5);
    CHECK(rel(plain.dx, want.dx) > 1e-4);
  }
}

TEST_CASE("linear_cross_entropy: bad targets, attributes and slots are one-line errors", "[ops]") {
  std::mt19937 rng(23);
  ThreadPool pool(1);
  const int64_t n = 4, k = 8, v = 5;
  const Head h = make_head("f32", v, k, rng);
  const Tensor x = Tensor::from_f32({n, k}, random_floats(static_cast<size_t>(n * k), rng, 1.0));
  CHECK_THROWS_WITH(run(h, x, Tensor::from_i32({n}, {0, 1, 5, 2}), true, 0, Round::kNone, true, pool),
                    Catch::Contains(
                        "node 'loss' (linear_cross_entropy): target 5 of row 2 is outside [0, 5)"));
  CHECK_THROWS_WITH(run(h, x, Tensor::from_i32({n}, {0, 1, -1, 2}), true, 0, Round::kNone, true, pool),
                    Catch::Contains("target -1 of row 2"));
  auto build = [&](const graph::Attributes& attrs, size_t n_inputs) {
    graph::Graph g;
    const ValueId xv = g.add_input("x", DType::kF32, {Dim::fixed(n), Dim::fixed(k)});
    const ValueId tv = g.add_input("targets", DType::kI32, {Dim::fixed(n)});
    std::vector<ValueId> in = {xv, g.add_constant("w", h.weight), kNoValue, kNoValue, kNoValue,
                               tv};
    in.resize(n_inputs, kNoValue);
    g.mark_output(g.add_node("linear_cross_entropy", "lce", in, attrs, 3)[0]);
    graph::Executor ex(g, pool);
    ex.run({{"x", x}, {"targets", Tensor::from_i32({n}, {0, 1, 2, 3})}});
  };
  CHECK_THROWS_WITH(build({{"with_grad", int64_t{2}}}, 6),
                    Catch::Contains("with_grad = 2 is not 0 or 1"));
  CHECK_THROWS_WITH(build({{"chunk_rows", int64_t{-3}}}, 6),
                    Catch::Contains("chunk_rows = -3 is negative"));
  CHECK_THROWS_WITH(build({}, 5), Catch::Contains("takes 6..6 inputs, got 5"));
  CHECK_THROWS_WITH(build({{"n_blocks", int64_t{2}}}, 6),
                    Catch::Contains("node 'lce'"));
}
