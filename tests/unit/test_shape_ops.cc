// The shape and data-movement ops of classic models (docs/CLASSIC_OPS.md): shape, reshape,
// flatten, squeeze, unsqueeze, identity, transpose, concat, slice, split, expand,
// constant_of_shape, range. Each runs through a graph::Executor and is checked against numpy's
// semantics written here as plain index loops; the known values of TensorDesc::value are checked
// by calling each schema's inference directly; every error is one line naming the node.
#include <catch2/catch.hpp>

#include <limits>
#include <numeric>

#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/transpose_cpu.h"

using namespace sampan;
using namespace sampan::graph;
using ops::TensorDesc;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// f32 0, 1, 2, ... in `shape`.
Tensor iota_f32(const Shape& shape, float first = 0.0f) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  std::iota(v.begin(), v.end(), first);
  return Tensor::from_f32(shape, v);
}

Tensor i64(const Shape& shape, const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty(shape, DType::kI64);
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

Tensor i64_vec(const std::vector<int64_t>& values) {
  return i64({static_cast<int64_t>(values.size())}, values);
}

std::vector<float> floats(const Tensor& t) {
  const Tensor c = t.contiguous();
  return {c.data<float>(), c.data<float>() + c.numel()};
}

std::vector<int64_t> ints(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<int64_t> v(static_cast<size_t>(c.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = c.dtype() == DType::kI64 ? c.data<int64_t>()[i]
           : c.dtype() == DType::kI32 ? c.data<int32_t>()[i]
                                      : c.data<uint8_t>()[i];
  }
  return v;
}

// Row-major index of element `i` of `shape` read through `strides` (elements).
int64_t strided_offset(int64_t i, const Shape& shape, const Shape& strides) {
  int64_t off = 0;
  for (size_t d = shape.size(); d-- > 0;) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

// Runs one node: input 0 is a graph input bound to inputs[0] (so view outputs alias it), the
// others are constants (their values are known at inference, as an importer's are).
// With all_constant, input 0 is a constant too (ops that need every input's value).
std::vector<Tensor> run_op(const std::string& op, const Attributes& attrs,
                           const std::vector<Tensor>& inputs, int n_outputs = 1,
                           bool all_constant = false) {
  static ThreadPool pool(2);
  Graph g;
  std::vector<ValueId> ids;
  std::vector<Dim> dims;
  for (int64_t d : inputs[0].shape()) dims.push_back(Dim::fixed(d));
  ids.push_back(all_constant ? g.add_constant("c0", inputs[0])
                             : g.add_input("x", inputs[0].dtype(), dims));
  for (size_t i = 1; i < inputs.size(); ++i) {
    ids.push_back(g.add_constant(fmt::format("c{}", i), inputs[i]));
  }
  for (ValueId v : g.add_node(op, fmt::format("{}_node", op), ids, attrs, n_outputs)) g.mark_output(v);
  Executor ex(g, pool);
  if (all_constant) return ex.run({});
  return ex.run({{"x", inputs[0]}});
}

// A node for calling a schema's inference directly.
Node make_node(const std::string& op, const Attributes& attrs = {}, int n_outputs = 1) {
  Node n;
  n.op = op;
  n.name = fmt::format("{}_node", op);
  n.attrs = attrs;
  n.outputs.resize(static_cast<size_t>(n_outputs));
  return n;
}

std::vector<TensorDesc> infer(const std::string& op, const std::vector<TensorDesc>& in,
                              const Attributes& attrs = {}, int n_outputs = 1) {
  return ops::OpRegistry::instance().schema(op).infer(make_node(op, attrs, n_outputs), in);
}

TensorDesc valued(const std::vector<int64_t>& v) {
  return {{static_cast<int64_t>(v.size())}, DType::kI64, true, v};
}

// The one-line message of what `fn` throws.
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void check_one_line(const std::string& msg, const std::string& want) {
  CHECK_THAT(msg, Catch::Contains(want));
  CHECK(msg.find('\n') == std::string::npos);
}

}  // namespace

TEST_CASE("shape reports the dims start..end, clamped, with its value known", "[shape_ops]") {
  const Tensor x = iota_f32({2, 3, 4});
  CHECK(ints(run_op("shape", {}, {x})[0]) == std::vector<int64_t>{2, 3, 4});
  CHECK(ints(run_op("shape", {{"start", int64_t{1}}}, {x})[0]) == std::vector<int64_t>{3, 4});
  CHECK(ints(run_op("shape", {{"start", int64_t{-2}}, {"end", int64_t{-1}}}, {x})[0]) ==
        std::vector<int64_t>{3});
  CHECK(ints(run_op("shape", {{"start", int64_t{-9}}, {"end", int64_t{9}}}, {x})[0]) ==
        std::vector<int64_t>{2, 3, 4});
  CHECK(run_op("shape", {{"start", int64_t{2}}, {"end", int64_t{1}}}, {x})[0].shape() ==
        Shape{0});
  const auto out = infer("shape", {{{5, 7}, DType::kF32}});
  CHECK(out[0].shape == Shape{2});
  CHECK(out[0].dtype == DType::kI64);
  CHECK(out[0].value == std::vector<int64_t>{5, 7});
}

TEST_CASE("reshape follows ONNX (0 copies, -1 infers, allowzero) and views its input",
          "[shape_ops]") {
  const Tensor x = iota_f32({2, 3, 4});
  const Tensor a = run_op("reshape", {}, {x, i64_vec({0, -1})})[0];
  CHECK(a.shape() == Shape{2, 12});
  CHECK(a.raw() == x.raw());  // a view of the bound input, not a copy
  CHECK(floats(a) == floats(x));
  CHECK(run_op("reshape", {}, {x, i64_vec({4, 0, -1})})[0].shape() == Shape{4, 3, 2});
  CHECK(run_op("reshape", {}, {x, i64_vec({-1})})[0].shape() == Shape{24});
  // allowzero: a 0 is a real 0, which only an empty input can take.
  const Tensor empty = Tensor::empty({0, 3}, DType::kF32);
  CHECK(run_op("reshape", {{"allowzero", int64_t{1}}}, {empty, i64_vec({3, 0})})[0].shape() ==
        Shape{3, 0});
  // Without allowzero the 0 copies dim 1 (3): [3, 3] has 9 elements, not 0.
  CHECK_THROWS_WITH(run_op("reshape", {}, {empty, i64_vec({3, 0})}),
                    Catch::Contains("cannot reshape [0, 3] (0 elements) to [3, 0]"));
  // Known values pass through in the new shape.
  const auto out = infer("reshape", {{{2, 2}, DType::kI64, true, std::vector<int64_t>{1, 2, 3, 4}},
                                     valued({4})});
  CHECK(out[0].shape == Shape{4});
  CHECK(out[0].value == std::vector<int64_t>{1, 2, 3, 4});
}

TEST_CASE("reshape, flatten and (un)squeeze of a strided split output copy it on the CPU",
          "[shape_ops]") {
  ThreadPool pool(2);
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("n"), Dim::fixed(6)});
  const auto parts = g.add_node("split", "qkv", {x}, {{"sizes", std::vector<int64_t>{2, 4}}}, 2);
  const ValueId target = g.add_constant("target", i64_vec({-1}));
  g.mark_output(g.add("reshape", "r", {parts[1], target}));
  g.mark_output(g.add("flatten", "f", {parts[0]}, {{"axis", int64_t{0}}}));
  g.mark_output(g.add("unsqueeze", "u", {parts[0]}, {{"axes", std::vector<int64_t>{1}}}));
  Executor ex(g, pool);
  for (int64_t n : {3, 1, 5}) {
    const Tensor xt = iota_f32({n, 6});
    const auto out = ex.run({{"x", xt}});
    std::vector<float> want1, want0;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < 6; ++c) (c < 2 ? want0 : want1).push_back(static_cast<float>(r * 6 + c));
    }
    CHECK(out[0].shape() == Shape{4 * n});
    CHECK(floats(out[0]) == want1);
    CHECK(out[1].shape() == Shape{1, 2 * n});
    CHECK(floats(out[1]) == want0);
    CHECK(out[2].shape() == Shape{n, 1, 2});
    CHECK(floats(out[2]) == want0);
  }
}

TEST_CASE("flatten, squeeze, unsqueeze and identity reshape without copying", "[shape_ops]") {
  const Tensor x = iota_f32({2, 3, 4, 5});
  for (auto [axis, want] : std::vector<std::pair<int64_t, Shape>>{
           {1, {2, 60}}, {2, {6, 20}}, {0, {1, 120}}, {-1, {24, 5}}, {4, {120, 1}}}) {
    const Tensor y = run_op("flatten", {{"axis", axis}}, {x})[0];
    CHECK(y.shape() == want);
    CHECK(y.raw() == x.raw());
  }
  const Tensor ones = iota_f32({1, 3, 1, 2});
  CHECK(run_op("squeeze", {}, {ones})[0].shape() == Shape{3, 2});
  CHECK(run_op("squeeze", {{"axes", std::vector<int64_t>{-2}}}, {ones})[0].shape() ==
        Shape{1, 3, 2});
  const Tensor u = run_op("unsqueeze", {{"axes", std::vector<int64_t>{0, 2}}}, {iota_f32({3, 2})})[0];
  CHECK(u.shape() == Shape{1, 3, 1, 2});
  CHECK(run_op("unsqueeze", {{"axes", std::vector<int64_t>{3, 0}}}, {iota_f32({3, 2})})[0].shape() ==
        Shape{1, 3, 2, 1});
  CHECK(floats(u) == floats(iota_f32({6})));
  CHECK(run_op("unsqueeze", {{"axes", std::vector<int64_t>{-1}}}, {iota_f32({3, 2})})[0].shape() ==
        Shape{3, 2, 1});
  const Tensor id = run_op("identity", {}, {x})[0];
  CHECK(id.raw() == x.raw());
  CHECK(id.shape() == x.shape());

  // Values: a gathered scalar dim becomes a [1] piece and back.
  const TensorDesc scalar{{}, DType::kI64, true, std::vector<int64_t>{7}};
  const auto un = infer("unsqueeze", {scalar}, {{"axes", std::vector<int64_t>{0}}});
  CHECK(un[0].shape == Shape{1});
  CHECK(un[0].value == std::vector<int64_t>{7});
  const auto sq = infer("squeeze", {un[0]});
  CHECK(sq[0].shape == Shape{});
  CHECK(sq[0].value == std::vector<int64_t>{7});
  CHECK(infer("identity", {valued({3, 4})})[0].value == std::vector<int64_t>{3, 4});
  CHECK(infer("flatten", {valued({3, 4})}, {{"axis", int64_t{0}}})[0].value ==
        std::vector<int64_t>{3, 4});
}

namespace {

// numpy's x.transpose(perm) for a contiguous x, as f32.
std::vector<float> ref_transpose(const Tensor& x, const std::vector<int>& perm) {
  Shape out, strides;
  const Shape xs = contiguous_strides(x.shape());
  for (int p : perm) {
    out.push_back(x.dim(p));
    strides.push_back(xs[static_cast<size_t>(p)]);
  }
  const std::vector<float> v = floats(x);
  std::vector<float> r;
  for (int64_t i = 0; i < shape_numel(out); ++i) r.push_back(v[static_cast<size_t>(strided_offset(i, out, strides))]);
  return r;
}

}  // namespace

TEST_CASE("transpose matches numpy for BERT's permutations and others, any dtype",
          "[shape_ops]") {
  // Awkward sizes (not multiples of the 32-wide tiles), and one large enough to be split
  // over the pool's workers.
  for (const Shape& shape : {Shape{2, 5, 3, 7}, Shape{2, 37, 4, 33}, Shape{2, 4, 70, 64}}) {
    const Tensor x = iota_f32(shape);
    for (const std::vector<int>& perm : std::vector<std::vector<int>>{
             {0, 2, 1, 3}, {0, 1, 3, 2}, {3, 1, 0, 2}, {0, 1, 2, 3}, {3, 2, 1, 0}}) {
      const std::vector<int64_t> p(perm.begin(), perm.end());
      const Tensor y = run_op("transpose", {{"perm", p}}, {x})[0];
      INFO("shape " << shape_str(shape) << " perm " << shape_str(p));
      CHECK(y.shape() == Shape{shape[perm[0]], shape[perm[1]], shape[perm[2]], shape[perm[3]]});
      CHECK(floats(y) == ref_transpose(x, perm));
    }
  }
  // No perm: reverse. i64 and bool elements move as whole words of their size.
  const Tensor y = run_op("transpose", {}, {iota_f32({3, 4, 5})})[0];
  CHECK(floats(y) == ref_transpose(iota_f32({3, 4, 5}), {2, 1, 0}));
  std::vector<int64_t> seq(24);
  std::iota(seq.begin(), seq.end(), int64_t{1} << 40);
  const Tensor yi = run_op("transpose", {{"perm", std::vector<int64_t>{1, 0, 2}}}, {i64({2, 3, 4}, seq)})[0];
  for (int64_t i = 0; i < 24; ++i) {
    CHECK(ints(yi)[static_cast<size_t>(i)] ==
          seq[static_cast<size_t>(strided_offset(i, {3, 2, 4}, {4, 12, 1}))]);
  }
  Tensor b = Tensor::empty({2, 3}, DType::kBool);
  for (int i = 0; i < 6; ++i) b.data<uint8_t>()[i] = static_cast<uint8_t>(i % 2);
  const Tensor yb = run_op("transpose", {}, {b})[0];
  CHECK(yb.dtype() == DType::kBool);
  CHECK(ints(yb) == std::vector<int64_t>{0, 1, 1, 0, 0, 1});
  // The kernel's contiguous entry point.
  const Tensor x = iota_f32({3, 40, 50});
  std::vector<float> out(static_cast<size_t>(x.numel()));
  const int perm[] = {0, 2, 1};
  cpu::SerialRunner serial;
  cpu::transpose(3, x.shape().data(), perm, x.raw(), out.data(), 4, serial);
  CHECK(out == ref_transpose(x, {0, 2, 1}));
  // copy_strided writing through strides (the tiled path with strided stores): y = x^T laid
  // out column-major, i.e. y[i + 41 * j] = x[i][j] for x [41, 50].
  const Tensor x2 = iota_f32({41, 50});
  std::vector<float> y2(41 * 50, -1.0f);
  const int64_t shape2[] = {41, 50}, xs2[] = {50, 1}, ys2[] = {1, 41};
  ThreadPool pool(2);
  cpu::copy_strided(2, shape2, x2.raw(), xs2, y2.data(), ys2, 4, pool);
  CHECK(y2 == ref_transpose(x2, {1, 0}));
  // Values fold.
  const TensorDesc m{{2, 3}, DType::kI64, true, std::vector<int64_t>{1, 2, 3, 4, 5, 6}};
  CHECK(infer("transpose", {m})[0].value == std::vector<int64_t>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("transpose reads a strided input through its strides", "[shape_ops]") {
  ThreadPool pool(2);
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::fixed(4), Dim::fixed(10)});
  const auto parts = g.add_node("split", "s", {x}, {{"sizes", std::vector<int64_t>{3, 7}}}, 2);
  g.mark_output(g.add("transpose", "t", {parts[1]}));
  Executor ex(g, pool);
  const auto out = ex.run({{"x", iota_f32({4, 10})}});
  CHECK(out[0].shape() == Shape{7, 4});
  for (int64_t i = 0; i < 7; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      CHECK(floats(out[0])[static_cast<size_t>(i * 4 + j)] == static_cast<float>(j * 10 + 3 + i));
    }
  }
}

TEST_CASE("concat joins any dtype along any axis and folds known values", "[shape_ops]") {
  const Tensor a = iota_f32({2, 3}), b = iota_f32({2, 1}, 100.0f), c = iota_f32({2, 2}, 200.0f);
  const Tensor y = run_op("concat", {{"axis", int64_t{1}}}, {a, b, c})[0];
  CHECK(y.shape() == Shape{2, 6});
  CHECK(floats(y) == std::vector<float>{0, 1, 2, 100, 200, 201, 3, 4, 5, 101, 202, 203});
  const Tensor y0 = run_op("concat", {{"axis", int64_t{-2}}}, {a, iota_f32({1, 3}, 50.0f)})[0];
  CHECK(floats(y0) == std::vector<float>{0, 1, 2, 3, 4, 5, 50, 51, 52});
  // Rank 3 along the middle, i64.
  const Tensor p = i64({2, 1, 2}, {1, 2, 3, 4}), q = i64({2, 2, 2}, {5, 6, 7, 8, 9, 10, 11, 12});
  const Tensor yi = run_op("concat", {{"axis", int64_t{1}}}, {p, q})[0];
  CHECK(yi.shape() == Shape{2, 3, 2});
  CHECK(ints(yi) == std::vector<int64_t>{1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12});
  const auto v = infer("concat", {valued({2}), valued({}), valued({-1, 4})}, {{"axis", int64_t{0}}});
  CHECK(v[0].shape == Shape{3});
  CHECK(v[0].value == std::vector<int64_t>{2, -1, 4});
  // One unknown piece: the result is unknown.
  CHECK_FALSE(infer("concat", {valued({2}), {{1}, DType::kI64}}, {{"axis", int64_t{0}}})[0].value);
}

namespace {

// Python's slice(start, stop, step).indices(d): the reference for ONNX Slice's clamping.
std::vector<int64_t> py_slice_indices(int64_t d, int64_t start, int64_t stop, int64_t step) {
  auto adjust = [&](int64_t i, int64_t lo, int64_t hi) {
    if (i < 0) {
      i = i < -d ? lo : i + d;  // written to avoid overflow at INT64_MIN
      return i < lo ? lo : i;
    }
    return i > hi ? hi : i;
  };
  const int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? d - 1 : d;
  start = adjust(start, lo, hi);
  stop = adjust(stop, lo, hi);
  std::vector<int64_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(i);
  return idx;
}

}  // namespace

TEST_CASE("slice follows ONNX clamping, negative steps and omitted axes", "[shape_ops]") {
  const Tensor x = iota_f32({5, 6});
  struct Case {
    std::vector<int64_t> starts, ends, axes, steps;
  };
  const std::vector<Case> cases = {
      {{1, 0}, {4, 6}, {}, {}},
      {{1, -1}, {4, kMin}, {0, 1}, {2, -2}},
      {{-1}, {kMin}, {0}, {-1}},
      {{2}, {kMax}, {-1}, {3}},
      {{-100, 100}, {100, -100}, {0, 1}, {1, -1}},
      {{3}, {1}, {1}, {1}},  // empty
      {{4}, {2}, {0}, {-3}},
      {{10}, {-10}, {1}, {-4}},
  };
  for (const Case& c : cases) {
    std::vector<Tensor> in = {x, i64_vec(c.starts), i64_vec(c.ends)};
    if (!c.axes.empty()) in.push_back(i64_vec(c.axes));
    if (!c.steps.empty()) in.push_back(i64_vec(c.steps));
    const Tensor y = run_op("slice", {}, in)[0];
    // Reference: per-axis index lists, then their product.
    std::vector<std::vector<int64_t>> idx = {{0, 1, 2, 3, 4}, {0, 1, 2, 3, 4, 5}};
    for (size_t i = 0; i < c.starts.size(); ++i) {
      int64_t axis = c.axes.empty() ? static_cast<int64_t>(i) : c.axes[i];
      if (axis < 0) axis += 2;
      idx[static_cast<size_t>(axis)] =
          py_slice_indices(x.dim(static_cast<int>(axis)), c.starts[i], c.ends[i],
                           c.steps.empty() ? 1 : c.steps[i]);
    }
    std::vector<float> want;
    for (int64_t r : idx[0]) {
      for (int64_t col : idx[1]) want.push_back(static_cast<float>(r * 6 + col));
    }
    INFO("starts " << shape_str(c.starts) << " ends " << shape_str(c.ends) << " steps "
                   << shape_str(c.steps));
    CHECK(y.shape() == Shape{static_cast<int64_t>(idx[0].size()), static_cast<int64_t>(idx[1].size())});
    CHECK(floats(y) == want);
  }
  // i32 parameters and a strided input (a split output) read in place.
  {
    ThreadPool pool(2);
    Graph g;
    const ValueId xi = g.add_input("x", DType::kF32, {Dim::fixed(5), Dim::fixed(6)});
    const auto parts = g.add_node("split", "s", {xi}, {{"sizes", std::vector<int64_t>{2, 4}}}, 2);
    const ValueId st = g.add_constant("st", Tensor::from_i32({1}, {-1}));
    const ValueId en = g.add_constant("en", Tensor::from_i32({1}, {0}));
    const ValueId ax = g.add_constant("ax", Tensor::from_i32({1}, {1}));
    const ValueId sp = g.add_constant("sp", Tensor::from_i32({1}, {-2}));
    g.mark_output(g.add("slice", "sl", {parts[1], st, en, ax, sp}));
    Executor ex(g, pool);
    const Tensor y = ex.run({{"x", x}})[0];
    CHECK(y.shape() == Shape{5, 2});
    CHECK(floats(y) == std::vector<float>{5, 3, 11, 9, 17, 15, 23, 21, 29, 27});
  }
  // Values: the seq piece of a shape vector.
  const auto v = infer("slice", {valued({2, 3, 8}), valued({1}), valued({2})});
  CHECK(v[0].shape == Shape{1});
  CHECK(v[0].value == std::vector<int64_t>{3});
  CHECK(infer("slice", {valued({2, 3, 8}), valued({-1}), valued({kMin}), valued({0}), valued({-1})})[0]
            .value == std::vector<int64_t>{8, 3, 2});
}

TEST_CASE("split views any axis of any rank; the LLM's rank-2 last-axis use is unchanged",
          "[shape_ops]") {
  const Tensor x = iota_f32({2, 6});
  const auto parts = run_op("split", {{"sizes", std::vector<int64_t>{2, 4}}}, {x}, 2);
  CHECK(parts[0].shape() == Shape{2, 2});
  CHECK(parts[1].shape() == Shape{2, 4});
  CHECK(parts[0].raw() == x.raw());  // views
  CHECK(parts[1].stride(0) == 6);
  CHECK(floats(parts[1]) == std::vector<float>{2, 3, 4, 5, 8, 9, 10, 11});
  const Tensor x3 = iota_f32({2, 5, 3});
  const auto p3 = run_op("split", {{"sizes", std::vector<int64_t>{1, 0, 4}}, {"axis", int64_t{1}}},
                         {x3}, 3);
  CHECK(p3[0].shape() == Shape{2, 1, 3});
  CHECK(p3[1].shape() == Shape{2, 0, 3});
  CHECK(p3[2].shape() == Shape{2, 4, 3});
  CHECK(floats(p3[0]) == std::vector<float>{0, 1, 2, 15, 16, 17});
  CHECK(floats(p3[2])[0] == 3.0f);
  CHECK(floats(p3[2])[12] == 18.0f);
  const auto v = infer("split", {valued({2, 3, 8})}, {{"sizes", std::vector<int64_t>{1, 2}}}, 2);
  CHECK(v[0].value == std::vector<int64_t>{2});
  CHECK(v[1].value == std::vector<int64_t>{3, 8});
}

TEST_CASE("expand broadcasts numpy-style and folds values", "[shape_ops]") {
  const Tensor x = iota_f32({3, 1});
  const Tensor y = run_op("expand", {}, {x, i64_vec({2, 1, 4})})[0];
  CHECK(y.shape() == Shape{2, 3, 4});
  std::vector<float> want;
  for (int b = 0; b < 2; ++b) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 4; ++j) want.push_back(static_cast<float>(i));
    }
  }
  CHECK(floats(y) == want);
  CHECK(run_op("expand", {}, {iota_f32({2, 3}), i64_vec({3})})[0].shape() == Shape{2, 3});
  const auto v = infer("expand", {valued({5, 6}), valued({2, 1})});
  CHECK(v[0].shape == Shape{2, 2});
  CHECK(v[0].value == std::vector<int64_t>{5, 6, 5, 6});
}

TEST_CASE("constant_of_shape and range build tensors from known values", "[shape_ops]") {
  const Tensor c = run_op("constant_of_shape", {{"value", 1.5}}, {i64_vec({2, 3})}, 1, true)[0];
  CHECK(c.shape() == Shape{2, 3});
  CHECK(floats(c) == std::vector<float>(6, 1.5f));
  const Tensor ci = run_op("constant_of_shape", {{"value", int64_t{7}}, {"dtype", std::string("i64")}},
                           {i64_vec({2})}, 1, true)[0];
  CHECK(ints(ci) == std::vector<int64_t>{7, 7});
  const auto cv = infer("constant_of_shape", {valued({3})}, {{"value", 1.0}, {"dtype", std::string("bool")}});
  CHECK(cv[0].dtype == DType::kBool);
  CHECK(cv[0].value == std::vector<int64_t>{1, 1, 1});
  CHECK(run_op("constant_of_shape", {}, {i64_vec({})}, 1, true)[0].shape() == Shape{});

  auto range = [](int64_t s, int64_t l, int64_t d) {
    return ints(run_op("range", {}, {i64({}, {s}), i64({}, {l}), i64({}, {d})}, 1, true)[0]);
  };
  CHECK(range(1, 10, 3) == std::vector<int64_t>{1, 4, 7});
  CHECK(range(10, 1, -3) == std::vector<int64_t>{10, 7, 4});
  CHECK(range(0, 0, 1).empty());
  CHECK(range(0, 5, -1).empty());
  const Tensor r32 = run_op("range", {}, {Tensor::from_i32({}, {-2}), Tensor::from_i32({}, {2}),
                                          Tensor::from_i32({}, {1})}, 1, true)[0];
  CHECK(r32.dtype() == DType::kI32);
  CHECK(ints(r32) == std::vector<int64_t>{-2, -1, 0, 1});
  const TensorDesc s{{}, DType::kI64, true, std::vector<int64_t>{0}};
  const TensorDesc l{{}, DType::kI64, true, std::vector<int64_t>{4}};
  const TensorDesc d{{}, DType::kI64, true, std::vector<int64_t>{1}};
  CHECK(infer("range", {s, l, d})[0].value == std::vector<int64_t>{0, 1, 2, 3});
}

namespace {

// x [batch, seq, 8] -> reshape(x, concat(unsqueeze(gather(shape(x), 0)), slice(shape(x), 1, 2),
// [2, 4])) -> [batch, seq, 2, 4] -> transpose to [batch, 2, seq, 4]: what ONNX exporters write
// for a head split with dynamic dims.
void build_dynamic_reshape(Graph& g) {
  const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("batch"), Dim::sym("seq"), Dim::fixed(8)});
  const ValueId sh = g.add("shape", "shape", {x});
  const ValueId zero = g.add_constant("zero", i64({}, {0}));
  const ValueId batch = g.add("gather", "gather", {sh, zero}, {{"axis", int64_t{0}}});
  const ValueId batch1 = g.add("unsqueeze", "unsqueeze", {batch}, {{"axes", std::vector<int64_t>{0}}});
  const ValueId seq1 = g.add("slice", "slice", {sh, g.add_constant("one", i64_vec({1})),
                                                g.add_constant("two", i64_vec({2}))});
  const ValueId heads = g.add_constant("heads", i64_vec({2, 4}));
  const ValueId target = g.add("concat", "concat", {batch1, seq1, heads}, {{"axis", int64_t{0}}});
  const ValueId r = g.add("reshape", "reshape", {x, target});
  g.mark_output(r);
  g.mark_output(g.add("transpose", "transpose", {r}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}}));
}

}  // namespace

TEST_CASE("the ONNX dynamic-reshape chain folds at plan time for each input shape",
          "[shape_ops]") {
  ThreadPool pool(2);
  Graph g;
  build_dynamic_reshape(g);
  Executor ex(g, pool);
  for (const Shape& shape : {Shape{2, 3, 8}, Shape{1, 5, 8}, Shape{2, 3, 8}}) {
    const Tensor x = iota_f32(shape);
    const auto out = ex.run({{"x", x}});
    const int64_t b = shape[0], s = shape[1];
    CHECK(out[0].shape() == Shape{b, s, 2, 4});
    CHECK(out[0].raw() == x.raw());  // the reshape is a view of the input
    CHECK(floats(out[0]) == floats(x));
    CHECK(out[1].shape() == Shape{b, 2, s, 4});
    CHECK(floats(out[1]) == ref_transpose(x.reshape({b, s, 2, 4}), {0, 2, 1, 3}));
  }
  CHECK(ex.inferences() == 3);

  // The same chain through the schemas: every value is known at inference.
  const TensorDesc x{{4, 7, 8}, DType::kF32};
  const auto sh = infer("shape", {x});
  REQUIRE(sh[0].value == std::vector<int64_t>{4, 7, 8});
  const auto batch = infer("gather", {sh[0], {{}, DType::kI64, true, std::vector<int64_t>{0}}},
                           {{"axis", int64_t{0}}});
  REQUIRE(batch[0].value == std::vector<int64_t>{4});
  const auto batch1 = infer("unsqueeze", {batch[0]}, {{"axes", std::vector<int64_t>{0}}});
  const auto seq1 = infer("slice", {sh[0], valued({1}), valued({2})});
  const auto target = infer("concat", {batch1[0], seq1[0], valued({2, 4})}, {{"axis", int64_t{0}}});
  REQUIRE(target[0].value == std::vector<int64_t>{4, 7, 2, 4});
  const auto r = infer("reshape", {x, target[0]});
  CHECK(r[0].shape == Shape{4, 7, 2, 4});
  CHECK(r[0].dtype == DType::kF32);
  CHECK_FALSE(r[0].value);  // f32 contents are never tracked
}

TEST_CASE("bad shape-op nodes are refused in one line naming the node", "[shape_ops]") {
  const TensorDesc x{{2, 3, 4}, DType::kF32};
  check_one_line(error_of([&] { infer("transpose", {x}, {{"perm", std::vector<int64_t>{0, 0, 1}}}); }),
                 "node 'transpose_node' (transpose): perm [0, 0, 1] is not a permutation of 3 dims");
  check_one_line(error_of([&] { infer("transpose", {x}, {{"perm", std::vector<int64_t>{1, 0}}}); }),
                 "perm [1, 0] is not a permutation of 3 dims");
  check_one_line(error_of([&] { infer("reshape", {x, valued({-1, 2, -1})}); }),
                 "node 'reshape_node' (reshape): the target shape [-1, 2, -1] has two -1 dims");
  check_one_line(error_of([&] { infer("reshape", {x, valued({5, -1})}); }),
                 "node 'reshape_node' (reshape): cannot reshape [2, 3, 4] (24 elements) to [5, -1]");
  check_one_line(error_of([&] { infer("reshape", {x, valued({5, 5})}); }),
                 "cannot reshape [2, 3, 4] (24 elements) to [5, 5]");
  check_one_line(error_of([&] { infer("reshape", {x, valued({0, -3})}); }),
                 "the target shape [0, -3] has dim 1 = -3");
  check_one_line(error_of([&] { infer("reshape", {x, {{2}, DType::kI64}}); }),
                 "node 'reshape_node' (reshape): the target shape is computed at run time; only "
                 "shapes known before the run are supported");
  check_one_line(error_of([&] { infer("slice", {x, valued({0}), valued({1}), valued({0}), valued({0})}); }),
                 "node 'slice_node' (slice): step 0 on axis 0");
  check_one_line(error_of([&] { infer("slice", {x, {{1}, DType::kI64}, valued({1})}); }),
                 "node 'slice_node' (slice): the starts input is computed at run time");
  check_one_line(error_of([&] { infer("concat", {x, {{2, 3}, DType::kF32}}, {{"axis", int64_t{0}}}); }),
                 "node 'concat_node' (concat): input 1 has shape [2, 3], input 0 has shape [2, 3, 4] (rank 3)");
  check_one_line(error_of([&] { infer("concat", {x, {{2, 5, 4}, DType::kF32}}, {{"axis", int64_t{0}}}); }),
                 "input 1 has shape [2, 5, 4], input 0 has shape [2, 3, 4]: only dim 0 may differ");
  check_one_line(error_of([&] { infer("concat", {x, {{2, 3, 4}, DType::kI64}}, {{"axis", int64_t{0}}}); }),
                 "node 'concat_node' (concat): input 1 is i64, input 0 is f32");
  check_one_line(error_of([&] { infer("concat", {x}, {{"axis", int64_t{3}}}); }),
                 "node 'concat_node' (concat): axis 3 is out of range for rank 3");
  check_one_line(error_of([&] { infer("squeeze", {x}, {{"axes", std::vector<int64_t>{1}}}); }),
                 "node 'squeeze_node' (squeeze): dim 1 of [2, 3, 4] is not 1");
  check_one_line(error_of([&] { infer("unsqueeze", {x}, {{"axes", std::vector<int64_t>{1, -4}}}); }),
                 "node 'unsqueeze_node' (unsqueeze): axis -4 is repeated");
  check_one_line(error_of([&] { infer("flatten", {x}, {{"axis", int64_t{4}}}); }),
                 "node 'flatten_node' (flatten): axis 4 is out of range for rank 3 (-3..3)");
  check_one_line(error_of([&] { infer("expand", {x, valued({3, 2})}); }),
                 "node 'expand_node' (expand): shapes [2, 3, 4] and [3, 2] do not broadcast");
  check_one_line(error_of([&] { infer("expand", {x, {{2}, DType::kI64}}); }),
                 "node 'expand_node' (expand): the target shape is computed at run time");
  check_one_line(error_of([&] { infer("constant_of_shape", {{{2}, DType::kI64}}); }),
                 "node 'constant_of_shape_node' (constant_of_shape): the output shape is computed at run time");
  check_one_line(error_of([&] { infer("split", {x}, {{"sizes", std::vector<int64_t>{1, 2}}, {"axis", int64_t{2}}}, 2); }),
                 "node 'split_node' (split): input 0 has shape [2, 3, 4], expected dim 2 = 3");
  const TensorDesc zero{{}, DType::kI64, true, std::vector<int64_t>{0}};
  check_one_line(error_of([&] { infer("range", {zero, zero, zero}); }), "node 'range_node' (range): delta is 0");
  check_one_line(error_of([&] { infer("range", {zero, {{}, DType::kI64}, zero}); }),
                 "node 'range_node' (range): the limit input is computed at run time");
  check_one_line(error_of([&] { infer("range", {{{}, DType::kF32}, {{}, DType::kF32}, {{}, DType::kF32}}); }),
                 "node 'range_node' (range): input 0 is f32, expected i32 or i64");

  // Through an executor: a target shape bound at run time is refused before anything runs.
  ThreadPool pool(1);
  Graph g;
  const ValueId xi = g.add_input("x", DType::kF32, {Dim::fixed(2), Dim::fixed(3)});
  const ValueId t = g.add_input("t", DType::kI64, {Dim::fixed(1)});
  g.mark_output(g.add("reshape", "dyn", {xi, t}));
  Executor ex(g, pool);
  check_one_line(error_of([&] { ex.run({{"x", iota_f32({2, 3})}, {"t", i64_vec({6})}}); }),
                 "node 'dyn' (reshape): the target shape is computed at run time; only shapes "
                 "known before the run are supported");
}
