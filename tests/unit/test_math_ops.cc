// The math ops for classic models (docs/CLASSIC_OPS.md): binary, where, matmul, layer_norm,
// softmax, reduce, cast, gather. Each runs through a graph::Executor on awkward shapes and is
// compared with a plain double-precision reference written here; value propagation is checked
// by calling the schemas' inference directly, and every error path by its one-line message.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>

#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/ops/op_registry.h"

using namespace sampan;
using namespace sampan::graph;

namespace {

// ---- tensors -----------------------------------------------------------------------------

// Contents of any supported dtype as doubles (bool/u8 as 0/1/byte values).
std::vector<double> values_of(const Tensor& t0) {
  const Tensor t = t0.contiguous();
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype()) {
      case DType::kF32: v[i] = t.data<float>()[i]; break;
      case DType::kI32: v[i] = t.data<int32_t>()[i]; break;
      case DType::kI64: v[i] = static_cast<double>(t.data<int64_t>()[i]); break;
      default: v[i] = t.data<uint8_t>()[i]; break;
    }
  }
  return v;
}

Tensor make(const Shape& shape, DType dtype, const std::vector<double>& v) {
  Tensor t = Tensor::empty(shape, dtype);
  REQUIRE(static_cast<int64_t>(v.size()) == t.numel());
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case DType::kF32: t.data<float>()[i] = static_cast<float>(v[i]); break;
      case DType::kI32: t.data<int32_t>()[i] = static_cast<int32_t>(v[i]); break;
      case DType::kI64: t.data<int64_t>()[i] = static_cast<int64_t>(v[i]); break;
      default: t.data<uint8_t>()[i] = static_cast<uint8_t>(v[i]); break;
    }
  }
  return t;
}

Tensor make_i64(const Shape& shape, const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty(shape, DType::kI64);
  std::memcpy(t.raw(), v.data(), v.size() * 8);
  return t;
}

std::vector<double> random_values(int64_t n, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = static_cast<float>(d(rng));  // exactly representable in f32
  return v;
}

Tensor random_f32(const Shape& shape, std::mt19937& rng, double lo = -2.0, double hi = 2.0) {
  return make(shape, DType::kF32, random_values(shape_numel(shape), rng, lo, hi));
}

Tensor random_int(const Shape& shape, DType dtype, std::mt19937& rng, int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = d(rng);
  return make(shape, dtype, v);
}

// ---- running one op ----------------------------------------------------------------------

// An undefined Tensor marks an absent optional input; `constants` lists inputs that become
// graph constants (the rest are graph inputs bound at run time).
Tensor run_op(const std::string& op, Attributes attrs, const std::vector<Tensor>& inputs,
              std::vector<int> constants = {}, int threads = 2) {
  ThreadPool pool(threads);
  Graph g;
  std::vector<ValueId> ids;
  std::map<std::string, Tensor> bound;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    if (!inputs[i].defined()) {
      ids.push_back(kNoValue);
    } else if (std::find(constants.begin(), constants.end(), static_cast<int>(i)) !=
               constants.end()) {
      ids.push_back(g.add_constant(name, inputs[i]));
    } else {
      std::vector<Dim> dims;
      for (int64_t d : inputs[i].shape()) dims.push_back(Dim::fixed(d));
      ids.push_back(g.add_input(name, inputs[i].dtype(), dims));
      bound[name] = inputs[i];
    }
  }
  g.mark_output(g.add(op, "n1", ids, std::move(attrs)));
  Executor ex(g, pool);
  return ex.run(bound)[0].clone();
}

// The message of the Error(kInvalidArgument) f throws ("" if none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

// Shape inference called directly, with known contents on the inputs.
std::vector<ops::TensorDesc> infer(const std::string& op, Attributes attrs,
                                   const std::vector<ops::TensorDesc>& in) {
  Node node;
  node.op = op;
  node.name = "n1";
  node.attrs = std::move(attrs);
  return ops::OpRegistry::instance().schema(op).infer(node, in);
}

ops::TensorDesc known(const Shape& shape, DType dtype, std::vector<int64_t> v) {
  return {shape, dtype, true, std::move(v)};
}

// ---- reference broadcasting --------------------------------------------------------------

Shape bshape(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i + a.size() >= r ? a[i + a.size() - r] : 1;
    const int64_t db = i + b.size() >= r ? b[i + b.size() - r] : 1;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Flat index into a tensor of `shape` for output multi-index `idx` (of rank >= shape's).
int64_t bindex(const Shape& shape, const Shape& idx) {
  int64_t flat = 0;
  const size_t shift = idx.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) {
    flat = flat * shape[i] + (shape[i] == 1 ? 0 : idx[shift + i]);
  }
  return flat;
}

Shape unflatten(int64_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    idx[i] = flat % shape[i];
    flat /= shape[i];
  }
  return idx;
}

std::vector<double> ref_binary(const Tensor& a, const Tensor& b,
                               const std::function<double(double, double)>& f) {
  const Shape out = bshape(a.shape(), b.shape());
  const std::vector<double> va = values_of(a), vb = values_of(b);
  std::vector<double> r(static_cast<size_t>(shape_numel(out)));
  for (size_t i = 0; i < r.size(); ++i) {
    const Shape idx = unflatten(static_cast<int64_t>(i), out);
    r[i] = f(va[static_cast<size_t>(bindex(a.shape(), idx))],
             va.empty() ? 0 : vb[static_cast<size_t>(bindex(b.shape(), idx))]);
  }
  return r;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want[i])) {
      CHECK(got[i] == want[i]);
    } else {
      INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
      CHECK(std::abs(got[i] - want[i]) <= tol * (1.0 + std::abs(want[i])));
    }
  }
}

double floor_mod(double x, double y) {
  const double r = std::fmod(x, y);
  return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
}

const std::vector<std::pair<Shape, Shape>> kBroadcastCases = {
    {{2, 1, 3}, {4, 1}}, {{}, {3, 5}},     {{5}, {}}, {{7, 33}, {7, 33}},       {{4, 37}, {37}},
    {{1}, {2, 3, 1}},    {{3, 1}, {1, 4}}, {{}, {}},  {{300, 257}, {300, 257}}, {{0, 3}, {3}},
};

}  // namespace

// ---- binary ------------------------------------------------------------------------------

TEST_CASE("binary f32 arithmetic broadcasts like numpy", "[math_ops]") {
  std::mt19937 rng(1);
  const std::vector<std::pair<std::string, std::function<double(double, double)>>> kinds = {
      {"add", [](double x, double y) { return x + y; }},
      {"sub", [](double x, double y) { return x - y; }},
      {"mul", [](double x, double y) { return x * y; }},
      {"div", [](double x, double y) { return x / y; }},
      {"max", [](double x, double y) { return std::max(x, y); }},
      {"min", [](double x, double y) { return std::min(x, y); }},
      {"mod", floor_mod},
      {"fmod", [](double x, double y) { return std::fmod(x, y); }},
      {"pow", [](double x, double y) { return std::pow(x, y); }},
  };
  for (const auto& [sa, sb] : kBroadcastCases) {
    for (const auto& [kind, f] : kinds) {
      INFO(kind << " " << shape_str(sa) << " x " << shape_str(sb));
      // pow on positive bases only (a negative base to a fractional power is NaN).
      const Tensor a = kind == "pow" ? random_f32(sa, rng, 0.1, 3.0) : random_f32(sa, rng);
      Tensor b = random_f32(sb, rng, 0.25, 2.0);
      if (kind != "pow") {  // both signs, away from zero (div, mod)
        std::vector<double> v = values_of(b);
        for (size_t i = 0; i < v.size(); i += 2) v[i] = -v[i];
        b = make(sb, DType::kF32, v);
      }
      const Tensor y = run_op("binary", {{"kind", kind}}, {a, b});
      CHECK(y.shape() == bshape(sa, sb));
      CHECK(y.dtype() == DType::kF32);
      check_close(values_of(y), ref_binary(a, b, f), kind == "mod" || kind == "fmod" ? 1e-5 : 2e-6);
    }
  }
}

TEST_CASE("binary on strided inputs and with a constant operand", "[math_ops]") {
  std::mt19937 rng(2);
  const Tensor base = random_f32({6, 10}, rng);
  const Tensor view = base.slice(1, 2, 7);  // [6, 5], row stride 10
  const Tensor bias = random_f32({5}, rng);
  const Tensor y = run_op("binary", {{"kind", std::string("add")}}, {view, bias}, {1});
  check_close(values_of(y), ref_binary(view, bias, std::plus<double>()), 1e-7);
}

TEST_CASE("binary integer kinds wrap, truncate and take the divisor's sign", "[math_ops]") {
  for (DType t : {DType::kI32, DType::kI64}) {
    INFO(dtype_name(t));
    const Tensor a = make({6}, t, {-7, 7, -7, 7, 9, -1});
    const Tensor b = make({6}, t, {2, 2, -2, -2, 3, 5});
    auto run = [&](const std::string& k) {
      return values_of(run_op("binary", {{"kind", k}}, {a, b}));
    };
    CHECK(run("div") == std::vector<double>{-3, 3, 3, -3, 3, 0});
    CHECK(run("mod") == std::vector<double>{1, 1, -1, -1, 0, 4});
    CHECK(run("fmod") == std::vector<double>{-1, 1, -1, 1, 0, -1});
    CHECK(run("add") == std::vector<double>{-5, 9, -9, 5, 12, 4});
    CHECK(run("sub") == std::vector<double>{-9, 5, -5, 9, 6, -6});
    CHECK(run("mul") == std::vector<double>{-14, 14, 14, -14, 27, -5});
    CHECK(run("max") == std::vector<double>{2, 7, -2, 7, 9, 5});
    CHECK(run("min") == std::vector<double>{-7, 2, -7, -2, 3, -1});
    CHECK(run("pow") == std::vector<double>{49, 49, 0, 0, 729, -1});
    CHECK(run_op("binary", {{"kind", std::string("add")}}, {a, b}).dtype() == t);
  }
  // Broadcast integer arithmetic against a reference, and INT_MIN / -1 wrapping (no trap).
  std::mt19937 rng(3);
  const Tensor a = random_int({2, 1, 3}, DType::kI64, rng, -50, 50);
  const Tensor b = random_int({4, 1}, DType::kI64, rng, 1, 9);
  check_close(values_of(run_op("binary", {{"kind", std::string("div")}}, {a, b})),
              ref_binary(a, b, [](double x, double y) { return std::trunc(x / y); }), 0);
  const Tensor lo = make({2}, DType::kI32, {-2147483648.0, 5});
  const Tensor m1 = make({}, DType::kI32, {-1});
  CHECK(values_of(run_op("binary", {{"kind", std::string("div")}}, {lo, m1})) ==
        std::vector<double>{-2147483648.0, -5});
  CHECK(values_of(run_op("binary", {{"kind", std::string("add")}},
                         {make({1}, DType::kI32, {2147483647.0}), make({1}, DType::kI32, {1})})) ==
        std::vector<double>{-2147483648.0});
}

TEST_CASE("binary comparisons give bool; and/or/xor take bool", "[math_ops]") {
  std::mt19937 rng(4);
  const std::vector<std::pair<std::string, std::function<double(double, double)>>> cmps = {
      {"equal", [](double x, double y) { return x == y ? 1.0 : 0.0; }},
      {"less", [](double x, double y) { return x < y ? 1.0 : 0.0; }},
      {"less_equal", [](double x, double y) { return x <= y ? 1.0 : 0.0; }},
      {"greater", [](double x, double y) { return x > y ? 1.0 : 0.0; }},
      {"greater_equal", [](double x, double y) { return x >= y ? 1.0 : 0.0; }},
  };
  for (DType t : {DType::kF32, DType::kI32, DType::kI64}) {
    const Tensor a = random_int({2, 1, 3}, t, rng, -2, 2);
    const Tensor b = random_int({4, 1}, t, rng, -2, 2);
    for (const auto& [kind, f] : cmps) {
      INFO(kind << " " << dtype_name(t));
      const Tensor y = run_op("binary", {{"kind", kind}}, {a, b});
      CHECK(y.dtype() == DType::kBool);
      CHECK(values_of(y) == ref_binary(a, b, f));
    }
  }
  const Tensor p = make({4}, DType::kBool, {0, 0, 1, 1});
  const Tensor q = make({4}, DType::kBool, {0, 1, 0, 1});
  auto run = [&](const std::string& k) {
    return values_of(run_op("binary", {{"kind", k}}, {p, q}));
  };
  CHECK(run("and") == std::vector<double>{0, 0, 0, 1});
  CHECK(run("or") == std::vector<double>{0, 1, 1, 1});
  CHECK(run("xor") == std::vector<double>{0, 1, 1, 0});
  CHECK(run("equal") == std::vector<double>{1, 0, 0, 1});
  CHECK(values_of(run_op("binary", {{"kind", std::string("and")}},
                         {p, make({}, DType::kBool, {1})})) == std::vector<double>{0, 0, 1, 1});
}

TEST_CASE("binary refuses bad kinds, dtypes, shapes and zero divisors by name", "[math_ops]") {
  const Tensor f = Tensor::zeros({2, 3}, DType::kF32);
  CHECK(error_of([&] {
          run_op("binary", {{"kind", std::string("plus")}}, {f, f});
        }) == "node 'n1' (binary): unknown kind 'plus'");
  CHECK(error_of([&] {
          run_op("binary", {{"kind", std::string("add")}}, {f, Tensor::zeros({2, 3}, DType::kI32)});
        }) == "node 'n1' (binary): inputs are f32 and i32, expected one dtype");
  CHECK(error_of([&] {
          run_op("binary", {{"kind", std::string("and")}}, {f, f});
        }) == "node 'n1' (binary): kind 'and' does not take f32 inputs");
  CHECK(error_of([&] {
          run_op("binary", {{"kind", std::string("add")}}, {f, Tensor::zeros({4}, DType::kF32)});
        }) == "node 'n1' (binary): shapes [2, 3] and [4] do not broadcast");
  CHECK_THAT(error_of([&] {
               run_op("binary", {}, {f, f});
             }),
             Catch::Contains("node 'n1' (binary): missing attribute 'kind'"));
  const Tensor i = make({3}, DType::kI64, {4, 5, 6});
  CHECK(error_of([&] {
          run_op("binary", {{"kind", std::string("div")}}, {i, make({3}, DType::kI64, {1, 0, 2})});
        }) == "node 'n1' (binary): integer div by zero");
  CHECK(error_of([&] {
          run_op("binary", {{"kind", std::string("mod")}}, {i, make({}, DType::kI64, {0})});
        }) == "node 'n1' (binary): integer mod by zero");
  CHECK(error_of([&] {
          run_op("binary", {{"kind", std::string("fmod")}}, {i, make({3}, DType::kI64, {3, 2, 0})});
        }) == "node 'n1' (binary): integer fmod by zero");
  // f32 division by zero is IEEE, not an error.
  CHECK(
      std::isinf(values_of(run_op("binary", {{"kind", std::string("div")}},
                                  {make({1}, DType::kF32, {1}), make({1}, DType::kF32, {0})}))[0]));
}

// ---- where -------------------------------------------------------------------------------

TEST_CASE("where broadcasts condition and both branches", "[math_ops]") {
  std::mt19937 rng(5);
  const Tensor c = random_int({2, 1, 3}, DType::kBool, rng, 0, 1);
  for (DType t : {DType::kF32, DType::kI64, DType::kI32}) {
    const Tensor a = random_int({4, 1}, t, rng, -100, 100);
    const Tensor b = make({}, t, {7});
    const Tensor y = run_op("where", {}, {c, a, b});
    CHECK(y.shape() == Shape{2, 4, 3});
    CHECK(y.dtype() == t);
    const std::vector<double> vc = values_of(c), va = values_of(a), got = values_of(y);
    for (int64_t i = 0; i < 24; ++i) {
      const Shape idx = unflatten(i, {2, 4, 3});
      const double want = vc[static_cast<size_t>(bindex(c.shape(), idx))] != 0
                              ? va[static_cast<size_t>(bindex(a.shape(), idx))]
                              : 7.0;
      CHECK(got[static_cast<size_t>(i)] == want);
    }
  }
  CHECK(error_of([&] {
          run_op("where", {},
                 {Tensor::zeros({2}, DType::kF32), Tensor::zeros({2}, DType::kF32),
                  Tensor::zeros({2}, DType::kF32)});
        }) == "node 'n1' (where): input 0 is f32, expected bool");
  CHECK(error_of([&] {
          run_op("where", {},
                 {Tensor::zeros({2}, DType::kBool), Tensor::zeros({2}, DType::kF32),
                  Tensor::zeros({2}, DType::kI64)});
        }) == "node 'n1' (where): inputs 1 and 2 are f32 and i64, expected one dtype");
  CHECK(error_of([&] {
          run_op("where", {},
                 {Tensor::zeros({3}, DType::kBool), Tensor::zeros({2}, DType::kF32),
                  Tensor::zeros({2}, DType::kF32)});
        }) == "node 'n1' (where): shapes [3] and [2] do not broadcast");
}

// ---- matmul ------------------------------------------------------------------------------

namespace {

double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// numpy matmul in double, with the op's alpha / bias / activation.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, bool trans_b, double alpha,
                               const Tensor* bias, const std::string& act, Shape* out_shape) {
  Shape sa = a.shape(), sb = b.shape();
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), 1);
  if (b1) sb.push_back(1);
  const int64_t m = sa[sa.size() - 2], k = sa.back();
  const int64_t n = trans_b ? sb[0] : sb.back();
  const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const Shape batch = bshape(ba, bb);
  const std::vector<double> va = values_of(a), vb = values_of(b);
  const std::vector<double> vbias = bias ? values_of(*bias) : std::vector<double>();
  const int64_t items = shape_numel(batch);
  std::vector<double> y(static_cast<size_t>(items * m * n));
  for (int64_t t = 0; t < items; ++t) {
    const Shape idx = unflatten(t, batch);
    const int64_t ia = bindex(ba, idx), ib = bindex(bb, idx);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double bv = trans_b ? vb[static_cast<size_t>(j * k + p)]
                                    : vb[static_cast<size_t>((ib * k + p) * n + j)];
          s += va[static_cast<size_t>((ia * m + i) * k + p)] * bv;
        }
        s = alpha * s + (bias ? vbias[static_cast<size_t>(j)] : 0.0);
        if (act == "relu") s = std::max(s, 0.0);
        if (act == "gelu") s = gelu(s);
        if (act == "gelu_tanh") s = gelu_tanh(s);
        y[static_cast<size_t>((t * m + i) * n + j)] = s;
      }
    }
  }
  *out_shape = batch;
  if (!a1) out_shape->push_back(m);
  if (!b1) out_shape->push_back(n);
  return y;
}

}  // namespace

TEST_CASE("matmul follows numpy: 1-D promotion, batch broadcast, trans_b, epilogue", "[math_ops]") {
  std::mt19937 rng(6);
  struct Case {
    Shape a, b;
    bool trans_b = false;
    double alpha = 1.0;
    bool bias = false;
    std::string act = "none";
    bool b_const = false;
  };
  const std::vector<Case> cases = {
      {{3, 4}, {4, 5}},
      {{4}, {4, 5}},
      {{3, 4}, {4}},
      {{4}, {4}},
      {{2, 1, 3, 4}, {5, 4, 6}},
      {{5, 4, 6}, {6, 3}},
      {{3, 4}, {2, 4, 6}, false, 0.5},
      {{2, 3, 4}, {6, 4}, true, 1.0, true},
      {{2, 3, 4}, {6, 4}, true, 0.25, true, "relu"},
      {{2, 7, 40}, {40, 33}, false, 1.0, true, "gelu", true},
      {{2, 7, 40}, {40, 33}, false, 0.125, true, "gelu_tanh", true},
      {{37, 50}, {50, 70}, false, 2.0, true, "relu", true},
      {{2, 3, 40, 16}, {2, 3, 16, 40}, false, 0.25},  // attention q·kᵀ shape
      {{2, 3, 40, 40}, {2, 3, 40, 16}},               // attention p·v shape
      {{1, 1, 3}, {1, 3, 1}, false, 1.0, true, "gelu"},
      {{3, 0}, {0, 4}, false, 1.0, true},  // k = 0: y = bias
  };
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      INFO(shape_str(c.a) << " x " << shape_str(c.b) << " trans_b " << c.trans_b << " alpha "
                          << c.alpha << " bias " << c.bias << " " << c.act << " threads "
                          << threads);
      const Tensor a = random_f32(c.a, rng);
      const Tensor b = random_f32(c.b, rng);
      Shape out;
      const int64_t n = c.b.size() == 1 ? 1 : (c.trans_b ? c.b[0] : c.b.back());
      const Tensor bias = c.bias ? random_f32({n}, rng) : Tensor();
      const std::vector<double> want =
          ref_matmul(a, b, c.trans_b, c.alpha, c.bias ? &bias : nullptr, c.act, &out);
      Attributes attrs{{"trans_b", int64_t{c.trans_b}}, {"alpha", c.alpha}, {"activation", c.act}};
      std::vector<Tensor> in = {a, b};
      if (c.bias) in.push_back(bias);
      const Tensor y = run_op("matmul", attrs, in,
                              c.b_const ? std::vector<int>{1} : std::vector<int>{}, threads);
      CHECK(y.shape() == out);
      // f32 accumulation over k <= 50 terms of size <= 4, erf approximation ~2e-7.
      check_close(values_of(y), want, 2e-5);
    }
  }
}

TEST_CASE("matmul sees new contents of a weight rebound in the same memory", "[math_ops]") {
  // A b computed at run time is transposed on every call: contents rewritten in place between
  // runs must be seen.
  std::mt19937 rng(7);
  ThreadPool pool(2);
  Graph g;
  const ValueId a = g.add_input("a", DType::kF32, {Dim::fixed(5), Dim::fixed(8)});
  const ValueId b = g.add_input("b", DType::kF32, {Dim::fixed(8), Dim::fixed(6)});
  g.mark_output(g.add("matmul", "mm", {a, b}));
  Executor ex(g, pool);
  const Tensor ta = random_f32({5, 8}, rng);
  Tensor tb = random_f32({8, 6}, rng);
  for (int round = 0; round < 2; ++round) {
    Shape out;
    const std::vector<double> want = ref_matmul(ta, tb, false, 1.0, nullptr, "none", &out);
    check_close(values_of(ex.run({{"a", ta}, {"b", tb}})[0]), want, 1e-5);
    const Tensor fresh = random_f32({8, 6}, rng);
    std::memcpy(tb.raw(), fresh.raw(), static_cast<size_t>(tb.nbytes()));
  }
}

TEST_CASE("matmul refuses mismatched shapes and bad attributes by name", "[math_ops]") {
  const Tensor a = Tensor::zeros({3, 4}, DType::kF32);
  CHECK(error_of([&] {
          run_op("matmul", {}, {a, Tensor::zeros({5, 6}, DType::kF32)});
        }) == "node 'n1' (matmul): shapes [3, 4] and [5, 6] do not match (k = 4 and 5)");
  CHECK(error_of([&] {
          run_op("matmul", {{"trans_b", int64_t{1}}}, {a, Tensor::zeros({2, 4, 6}, DType::kF32)});
        }) == "node 'n1' (matmul): trans_b needs a 2-D b, got [2, 4, 6]");
  CHECK(error_of([&] {
          run_op("matmul", {{"activation", std::string("swish")}},
                 {a, Tensor::zeros({4, 6}, DType::kF32)});
        }) == "node 'n1' (matmul): unknown activation 'swish' (none, relu, gelu, gelu_tanh)");
  CHECK(error_of([&] {
          run_op("matmul", {},
                 {a, Tensor::zeros({4, 6}, DType::kF32), Tensor::zeros({5}, DType::kF32)});
        }) == "node 'n1' (matmul): input 2 (bias) has shape [5], expected [6]");
  CHECK(error_of([&] {
          run_op("matmul", {},
                 {Tensor::zeros({2, 3, 4}, DType::kF32), Tensor::zeros({3, 4, 6}, DType::kF32)});
        }) == "node 'n1' (matmul): shapes [2] and [3] do not broadcast");
  CHECK(error_of([&] {
          run_op("matmul", {}, {a, Tensor::zeros({4, 6}, DType::kI32)});
        }) == "node 'n1' (matmul): input 1 is i32, expected f32");
}

// ---- layer_norm and softmax --------------------------------------------------------------

namespace {

std::vector<double> ref_layer_norm(const Tensor& x, int64_t axis, const Tensor* scale,
                                   const Tensor* bias, double eps) {
  const std::vector<double> v = values_of(x);
  int64_t rows = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= x.dim(static_cast<int>(d));
  const int64_t n = x.numel() / rows;
  const std::vector<double> s = scale ? values_of(*scale) : std::vector<double>();
  const std::vector<double> b = bias ? values_of(*bias) : std::vector<double>();
  std::vector<double> y(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += v[static_cast<size_t>(r * n + i)];
    mean /= n;
    for (int64_t i = 0; i < n; ++i) var += std::pow(v[static_cast<size_t>(r * n + i)] - mean, 2);
    var /= n;
    for (int64_t i = 0; i < n; ++i) {
      const size_t u = static_cast<size_t>(r * n + i);
      y[u] = (v[u] - mean) / std::sqrt(var + eps) * (scale ? s[static_cast<size_t>(i)] : 1.0) +
             (bias ? b[static_cast<size_t>(i)] : 0.0);
    }
  }
  return y;
}

}  // namespace

TEST_CASE("layer_norm over trailing dims, with and without scale and bias", "[math_ops]") {
  std::mt19937 rng(8);
  {
    const Tensor x = random_f32({3, 5, 37}, rng);
    const Tensor s = random_f32({37}, rng), b = random_f32({37}, rng);
    const Tensor y = run_op("layer_norm", {{"eps", 1e-5}}, {x, s, b}, {1, 2});
    check_close(values_of(y), ref_layer_norm(x, 2, &s, &b, 1e-5), 1e-5);
  }
  {
    const Tensor x = random_f32({2, 3, 4}, rng);
    const Tensor s = random_f32({3, 4}, rng);
    const Tensor y = run_op("layer_norm", {{"axis", int64_t{1}}, {"eps", 1e-3}}, {x, s});
    check_close(values_of(y), ref_layer_norm(x, 1, &s, nullptr, 1e-3), 1e-5);
  }
  {  // bias without scale; a large common offset must not cost precision; 1000-wide rows
    Tensor x = random_f32({4, 1000}, rng, 999.0, 1001.0);
    const Tensor b = random_f32({1000}, rng);
    const Tensor y = run_op("layer_norm", {{"axis", int64_t{-1}}}, {x, Tensor(), b});
    check_close(values_of(y), ref_layer_norm(x, 1, nullptr, &b, 1e-5), 5e-5);
  }
  {  // rows of one element normalise to bias; rank 1
    const Tensor x = random_f32({7}, rng);
    check_close(values_of(run_op("layer_norm", {}, {x})),
                ref_layer_norm(x, 0, nullptr, nullptr, 1e-5), 1e-5);
  }
  const Tensor x = Tensor::zeros({2, 3}, DType::kF32);
  CHECK(error_of([&] {
          run_op("layer_norm", {{"axis", int64_t{2}}}, {x});
        }) == "node 'n1' (layer_norm): axis 2 out of range for rank 2");
  CHECK(error_of([&] {
          run_op("layer_norm", {}, {x, Tensor::zeros({2}, DType::kF32)});
        }) == "node 'n1' (layer_norm): input 1 (scale) has shape [2], expected [3]");
}

TEST_CASE("softmax along any axis is stable and matches exp / sum", "[math_ops]") {
  std::mt19937 rng(9);
  auto ref = [](const Tensor& x, int axis) {
    const std::vector<double> v = values_of(x);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= x.dim(d);
    for (int d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
    const int64_t n = x.dim(axis);
    std::vector<double> y(v.size());
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < n; ++j)
          mx = std::max(mx, v[static_cast<size_t>((o * n + j) * inner + i)]);
        for (int64_t j = 0; j < n; ++j)
          s += std::exp(v[static_cast<size_t>((o * n + j) * inner + i)] - mx);
        for (int64_t j = 0; j < n; ++j) {
          const size_t u = static_cast<size_t>((o * n + j) * inner + i);
          y[u] = std::exp(v[u] - mx) / s;
        }
      }
    }
    return y;
  };
  for (const auto& [shape, axis] : std::vector<std::pair<Shape, int>>{{{3, 37}, -1},
                                                                      {{2, 5, 11}, 1},
                                                                      {{4, 3, 2}, 0},
                                                                      {{5}, 0},
                                                                      {{2, 3, 128}, 2},
                                                                      {{2, 9, 13}, -2}}) {
    INFO(shape_str(shape) << " axis " << axis);
    const Tensor x = random_f32(shape, rng, -5.0, 5.0);
    const int ax = axis < 0 ? axis + static_cast<int>(shape.size()) : axis;
    check_close(values_of(run_op("softmax", {{"axis", int64_t{axis}}}, {x})), ref(x, ax), 2e-6);
  }
  // Large logits and masked (-1e30 and -inf) entries.
  const Tensor x = make({2, 4}, DType::kF32, {1000, 1001, -1e30, 999, -INFINITY, 3, 3, -INFINITY});
  check_close(values_of(run_op("softmax", {}, {x})), ref(x, 1), 1e-6);
  CHECK(error_of([&] {
          run_op("softmax", {{"axis", int64_t{-3}}}, {x});
        }) == "node 'n1' (softmax): axis -3 out of range for rank 2");
  // Far below the row's max (BERT's -10000 padding mask; e^-86.6 and less): 0, never a denormal
  // (each costs a microcode assist); above that, within 1 ulp-ish of e^v / sum. A NaN row stays
  // NaN.
  {
    const std::vector<double> v = {0, -20, -80, -86, -86.5, -86.7, -87, -95, -103, -150, -10000,
                                   -1e30, 0.5, -INFINITY, -3, -86.09, -90};
    const Tensor t = make({1, static_cast<int64_t>(v.size())}, DType::kF32, v);
    const std::vector<double> want = ref(t, 1);
    const std::vector<double> got = values_of(run_op("softmax", {}, {t}));
    const double mx = 0.5;
    for (size_t i = 0; i < v.size(); ++i) {
      INFO("v " << v[i]);
      CHECK(std::fpclassify(got[i]) != FP_SUBNORMAL);
      if (v[i] - mx < -86.6) {
        CHECK(got[i] == 0.0);
      } else {
        CHECK(std::fabs(got[i] - want[i]) <= 4e-7 * want[i]);
      }
    }
    const Tensor nan_row = make({1, 3}, DType::kF32, {1.0f, NAN, 2.0f});
    for (double y : values_of(run_op("softmax", {}, {nan_row}))) CHECK(std::isnan(y));
  }
}

// ---- reduce ------------------------------------------------------------------------------

TEST_CASE("reduce kinds over any axes, keepdims or not", "[math_ops]") {
  std::mt19937 rng(10);
  const Tensor x = random_f32({3, 4, 5, 2}, rng, 0.5, 1.5);
  const std::vector<double> v = values_of(x);
  struct Case {
    std::vector<int64_t> axes;
  };
  for (const std::vector<int64_t>& axes :
       std::vector<std::vector<int64_t>>{{3}, {-1}, {1}, {0, 2}, {}, {1, 2}, {0, 1, 3}, {2, 0}}) {
    std::vector<bool> red(4, axes.empty());
    for (int64_t a : axes) red[static_cast<size_t>(a < 0 ? a + 4 : a)] = true;
    for (const std::string kind : {"sum", "mean", "max", "min", "prod"}) {
      for (int64_t keep : {0, 1}) {
        INFO(kind << " keepdims " << keep << " axes " << shape_str(axes));
        Shape out;
        for (size_t d = 0; d < 4; ++d) {
          if (!red[d])
            out.push_back(x.dim(static_cast<int>(d)));
          else if (keep)
            out.push_back(1);
        }
        // Reference: accumulate by output index.
        Shape kept;
        for (size_t d = 0; d < 4; ++d) kept.push_back(red[d] ? 1 : x.dim(static_cast<int>(d)));
        const int64_t n_out = shape_numel(kept);
        std::vector<double> acc(static_cast<size_t>(n_out), kind == "prod"  ? 1.0
                                                            : kind == "max" ? -INFINITY
                                                            : kind == "min" ? INFINITY
                                                                            : 0.0);
        for (int64_t i = 0; i < x.numel(); ++i) {
          const int64_t o = bindex(kept, unflatten(i, x.shape()));
          double& a = acc[static_cast<size_t>(o)];
          const double e = v[static_cast<size_t>(i)];
          a = kind == "prod"  ? a * e
              : kind == "max" ? std::max(a, e)
              : kind == "min" ? std::min(a, e)
                              : a + e;
        }
        if (kind == "mean") {
          for (double& a : acc) a /= static_cast<double>(x.numel() / n_out);
        }
        Attributes attrs{{"kind", kind}, {"keepdims", keep}};
        if (!axes.empty()) attrs.set("axes", axes);
        const Tensor y = run_op("reduce", attrs, {x});
        CHECK(y.shape() == out);
        check_close(values_of(y), acc, 2e-6);
      }
    }
  }
  // Integer sums and a truncating integer mean.
  const Tensor i = make({2, 3}, DType::kI32, {1, 2, 4, -1, -2, -4});
  CHECK(values_of(run_op("reduce",
                         {{"kind", std::string("mean")},
                          {"axes", std::vector<int64_t>{1}},
                          {"keepdims", int64_t{0}}},
                         {i})) == std::vector<double>{2, -2});
  CHECK(values_of(run_op("reduce", {{"kind", std::string("prod")}}, {i})) ==
        std::vector<double>{-64});
  const Tensor f = Tensor::zeros({2, 3}, DType::kF32);
  CHECK(error_of([&] {
          run_op("reduce", {{"kind", std::string("avg")}}, {f});
        }) == "node 'n1' (reduce): unknown kind 'avg'");
  CHECK(error_of([&] {
          run_op("reduce", {{"kind", std::string("sum")}, {"axes", std::vector<int64_t>{2}}}, {f});
        }) == "node 'n1' (reduce): axis 2 out of range for rank 2");
  CHECK(error_of([&] {
          run_op("reduce", {{"kind", std::string("sum")}, {"axes", std::vector<int64_t>{1, -1}}},
                 {f});
        }) == "node 'n1' (reduce): axis -1 given twice");
  CHECK(error_of([&] {
          run_op("reduce", {{"kind", std::string("sum")}}, {Tensor::zeros({2}, DType::kBool)});
        }) == "node 'n1' (reduce): input 0 is bool, expected f32, i32 or i64");
}

// ---- cast --------------------------------------------------------------------------------

TEST_CASE("cast truncates, saturates, wraps and tests for zero", "[math_ops]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor f = make({7}, DType::kF32, {-2.7, 2.7, 0.0, 3e9, -3e9, nan, 300.5});
  auto cast = [](const Tensor& x, const std::string& to) {
    return run_op("cast", {{"to", to}}, {x});
  };
  CHECK(values_of(cast(f, "i32")) ==
        std::vector<double>{-2, 2, 0, 2147483647.0, -2147483648.0, 0, 300});
  CHECK(values_of(cast(f, "i64")) == std::vector<double>{-2, 2, 0, 3e9, -3e9, 0, 300});
  CHECK(values_of(cast(f, "u8")) == std::vector<double>{0, 2, 0, 255, 0, 0, 255});
  CHECK(values_of(cast(f, "bool")) == std::vector<double>{1, 1, 0, 1, 1, 1, 1});
  CHECK(cast(f, "bool").dtype() == DType::kBool);
  const Tensor i = make_i64({4}, {int64_t{1} << 32 | 5, -1, 256 + 7, 0});
  CHECK(values_of(cast(i, "i32")) == std::vector<double>{5, -1, 263, 0});
  CHECK(values_of(cast(i, "u8")) == std::vector<double>{5, 255, 7, 0});
  CHECK(values_of(cast(i, "f32")) == std::vector<double>{4294967301.0f, -1, 263, 0});
  const Tensor b = make({3}, DType::kBool, {1, 0, 1});
  CHECK(values_of(cast(b, "f32")) == std::vector<double>{1, 0, 1});
  CHECK(values_of(cast(b, "i64")) == std::vector<double>{1, 0, 1});
  CHECK(values_of(cast(make({2}, DType::kU8, {200, 3}), "i32")) == std::vector<double>{200, 3});
  CHECK(error_of([&] { cast(f, "f16"); }) ==
        "node 'n1' (cast): cannot cast to 'f16' (f32, i32, i64, bool or u8)");
  CHECK(error_of([&] { cast(Tensor::zeros({2}, DType::kF16), "f32"); }) ==
        "node 'n1' (cast): cannot cast from f16 (f32, i32, i64, bool or u8)");
}

// ---- gather ------------------------------------------------------------------------------

TEST_CASE("gather rows, any axis, negative indices, and refuses an index out of range",
          "[math_ops]") {
  std::mt19937 rng(11);
  {  // embedding: [vocab, hidden] table, [B, S] ids
    const Tensor table = random_f32({10, 8}, rng);
    const Tensor ids = make_i64({2, 3}, {0, 9, -1, 3, -10, 5});
    const Tensor y = run_op("gather", {}, {table, ids}, {0});
    CHECK(y.shape() == Shape{2, 3, 8});
    const std::vector<double> t = values_of(table), got = values_of(y);
    const int64_t rows[6] = {0, 9, 9, 3, 0, 5};
    for (int64_t r = 0; r < 6; ++r) {
      for (int64_t c = 0; c < 8; ++c) {
        CHECK(got[static_cast<size_t>(r * 8 + c)] == t[static_cast<size_t>(rows[r] * 8 + c)]);
      }
    }
  }
  {  // axis 1 of [3, 5, 2] with i32 indices [2, 2]
    const Tensor data = random_f32({3, 5, 2}, rng);
    const Tensor idx = make({2, 2}, DType::kI32, {4, 0, -2, 1});
    const Tensor y = run_op("gather", {{"axis", int64_t{1}}}, {data, idx});
    CHECK(y.shape() == Shape{3, 2, 2, 2});
    const std::vector<double> d = values_of(data), got = values_of(y);
    const int64_t pick[4] = {4, 0, 3, 1};
    for (int64_t o = 0; o < 3; ++o)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t c = 0; c < 2; ++c)
          CHECK(got[static_cast<size_t>((o * 4 + j) * 2 + c)] ==
                d[static_cast<size_t>((o * 5 + pick[j]) * 2 + c)]);
  }
  {  // a rank-0 index drops the axis; i64 data, last axis
    const Tensor data = make_i64({2, 3}, {1, 2, 3, 4, 5, 6});
    const Tensor y = run_op("gather", {{"axis", int64_t{-1}}}, {data, make_i64({}, {-1})});
    CHECK(y.shape() == Shape{2});
    CHECK(values_of(y) == std::vector<double>{3, 6});
  }
  const Tensor table = random_f32({10, 8}, rng);
  CHECK(error_of([&] {
          run_op("gather", {}, {table, make_i64({3}, {1, 10, 2})});
        }) == "node 'n1' (gather): index 10 out of range for axis of size 10");
  CHECK(error_of([&] {
          run_op("gather", {}, {table, make({2}, DType::kI32, {-11, 0})});
        }) == "node 'n1' (gather): index -11 out of range for axis of size 10");
  CHECK(error_of([&] {
          run_op("gather", {{"axis", int64_t{2}}}, {table, make_i64({1}, {0})});
        }) == "node 'n1' (gather): axis 2 out of range for rank 2");
  CHECK(error_of([&] {
          run_op("gather", {}, {table, Tensor::zeros({1}, DType::kF32)});
        }) == "node 'n1' (gather): input 1 (indices) is f32, expected i32 or i64");
}

// ---- value propagation -------------------------------------------------------------------

TEST_CASE("integer shape arithmetic folds at inference through every op", "[math_ops]") {
  // shape(x) of a [2, 128, 768] input, as the shape op would give it.
  const ops::TensorDesc shape = known({3}, DType::kI64, {2, 128, 768});
  // gather the first two dims: [2, 128]
  const auto g = infer("gather", {}, {shape, known({2}, DType::kI64, {0, -2})});
  REQUIRE(g[0].value);
  CHECK(*g[0].value == std::vector<int64_t>{2, 128});
  // batch * seq, and the hidden size split into 12 heads
  const auto bs =
      infer("reduce", {{"kind", std::string("prod")}, {"keepdims", int64_t{1}}}, {g[0]});
  REQUIRE(bs[0].value);
  CHECK(bs[0].shape == Shape{1});
  CHECK(*bs[0].value == std::vector<int64_t>{256});
  const auto hidden = infer("gather", {}, {shape, known({}, DType::kI64, {2})});
  REQUIRE(hidden[0].value);
  CHECK(hidden[0].shape == Shape{});
  const auto head =
      infer("binary", {{"kind", std::string("div")}}, {hidden[0], known({1}, DType::kI64, {-12})});
  REQUIRE(head[0].value);
  CHECK(*head[0].value == std::vector<int64_t>{-64});
  // [2, 128] * [2, 1] broadcast to [2, 2]; comparison -> bool; where picks; cast narrows
  const auto prod =
      infer("binary", {{"kind", std::string("mul")}}, {g[0], known({2, 1}, DType::kI64, {1, 3})});
  REQUIRE(prod[0].value);
  CHECK(prod[0].shape == Shape{2, 2});
  CHECK(*prod[0].value == std::vector<int64_t>{2, 128, 6, 384});
  const auto big =
      infer("binary", {{"kind", std::string("greater")}}, {prod[0], known({}, DType::kI64, {100})});
  REQUIRE(big[0].value);
  CHECK(big[0].dtype == DType::kBool);
  CHECK(*big[0].value == std::vector<int64_t>{0, 1, 0, 1});
  const auto pick = infer("where", {}, {big[0], prod[0], known({1}, DType::kI64, {-1})});
  REQUIRE(pick[0].value);
  CHECK(*pick[0].value == std::vector<int64_t>{-1, 128, -1, 384});
  const auto c32 = infer("cast", {{"to", std::string("i32")}},
                         {known({2}, DType::kI64, {(int64_t{1} << 32) + 7, -3})});
  REQUIRE(c32[0].value);
  CHECK(c32[0].dtype == DType::kI32);
  CHECK(*c32[0].value == std::vector<int64_t>{7, -3});
  const auto cb =
      infer("cast", {{"to", std::string("bool")}}, {known({3}, DType::kI32, {0, 5, -1})});
  REQUIRE(cb[0].value);
  CHECK(*cb[0].value == std::vector<int64_t>{0, 1, 1});
  const auto sum = infer(
      "reduce",
      {{"kind", std::string("sum")}, {"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t{0}}},
      {pick[0]});
  REQUIRE(sum[0].value);
  CHECK(*sum[0].value == std::vector<int64_t>{-2, 512});
  // i32 arithmetic wraps like the kernel; bool logic folds.
  const auto wrap = infer("binary", {{"kind", std::string("add")}},
                          {known({1}, DType::kI32, {2147483647}), known({1}, DType::kI32, {1})});
  CHECK(*wrap[0].value == std::vector<int64_t>{-2147483648LL});
  const auto land = infer("binary", {{"kind", std::string("and")}},
                          {known({2}, DType::kBool, {1, 1}), known({2}, DType::kBool, {0, 1})});
  CHECK(*land[0].value == std::vector<int64_t>{0, 1});
  // Nothing folds when an input is unknown, f32, or the result too long.
  CHECK_FALSE(
      infer("binary", {{"kind", std::string("add")}}, {ops::TensorDesc{{3}, DType::kI64}, shape})[0]
          .value);
  CHECK_FALSE(
      infer("binary", {{"kind", std::string("add")}},
            {known({65}, DType::kI64, std::vector<int64_t>(65, 1)), known({}, DType::kI64, {1})})[0]
          .value);
  CHECK_FALSE(
      infer("gather", {}, {ops::TensorDesc{{4, 2}, DType::kF32}, known({1}, DType::kI64, {0})})[0]
          .value);
  // Known bad values are refused at inference already.
  CHECK(error_of([&] {
          infer("gather", {}, {shape, known({1}, DType::kI64, {3})});
        }) == "node 'n1' (gather): index 3 out of range for axis of size 3");
  CHECK(error_of([&] {
          infer("binary", {{"kind", std::string("div")}}, {shape, known({1}, DType::kI64, {0})});
        }) == "node 'n1' (binary): integer div by zero");
}
