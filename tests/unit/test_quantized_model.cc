// Quantized weights through the model stack: the linear op's schema, the fusion passes, the
// loader of `sampan quantize` directories (and its errors), and the quantized linear op against
// the same op over the dequantized (reference) weights.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "engine/graph/passes/passes.h"
#include "engine/loaders/hf_config.h"
#include "engine/loaders/safetensors_writer.h"
#include "engine/loaders/weight_store.h"
#include "engine/models/blocks.h"
#include "engine/models/llama.h"
#include "loader_test_util.h"
#include "engine/models/weight_quant.h"

using namespace sampan;
using graph::Dim;
using graph::Graph;
using graph::ValueId;
using models::Linear;
using models::QuantScheme;
using models::WeightFormat;

namespace {

Tensor random_f32(const Shape& shape, uint32_t seed, float scale = 0.1f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = d(rng);
  return Tensor::from_f32(shape, v);
}

QuantScheme scheme(WeightFormat f, int64_t g = 32, bool sym = true, DType sd = DType::kF16) {
  QuantScheme s;
  s.format = f;
  s.group_size = g;
  s.symmetric = sym;
  s.scale_dtype = sd;
  return s;
}

Linear quantized_linear(const Tensor& w, const QuantScheme& s) {
  models::QuantizedMatrix q = models::quantize_matrix(w, s, "w");
  Linear l;
  l.weight = q.data;
  l.scales = q.scales;
  l.zeros = q.zeros;
  l.group_size = s.format == WeightFormat::kInt4 ? s.group_size : 0;
  return l;
}

template <typename Fn>
void expect_error(Fn fn, ErrorCode code, const std::vector<std::string>& needles) {
  try {
    fn();
    FAIL("expected an error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.code() == code);
    for (const auto& n : needles) CHECK_THAT(e.what(), Catch::Contains(n));
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
}

std::vector<ops::TensorDesc> infer(const Graph& g, const graph::Node& n) {
  std::vector<ops::TensorDesc> in;
  for (ValueId v : n.inputs) {
    if (v == graph::kNoValue) {
      in.push_back({{}, DType::kF32, false});
    } else {
      const graph::Value& val = g.value(v);
      Shape s;
      if (val.kind == graph::ValueKind::kConstant) {
        s = val.constant.shape();
      } else if (val.kind == graph::ValueKind::kInput) {
        for (const Dim& d : val.shape) s.push_back(d.symbolic() ? 5 : d.size);
      } else {
        s = {5, 64};  // every intermediate of these graphs is [n, 64]
      }
      in.push_back({s, val.dtype, true});
    }
  }
  return ops::OpRegistry::instance().schema(n.op).infer(n, in);
}

// ---- a one-layer Llama model directory written here -------------------------------------

constexpr int64_t kVocab = 40, kHidden = 64, kFfn = 80, kHeads = 4, kKvHeads = 2;

struct ModelFiles {
  nlohmann::json config;
  std::map<std::string, Tensor> tensors;
};

ModelFiles float_model() {
  ModelFiles m;
  m.config = {{"architectures", {"LlamaForCausalLM"}}, {"vocab_size", kVocab},
              {"hidden_size", kHidden}, {"intermediate_size", kFfn}, {"num_hidden_layers", 1},
              {"num_attention_heads", kHeads}, {"num_key_value_heads", kKvHeads},
              {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5},
              {"tie_word_embeddings", false}};
  const int64_t hd = kHidden / kHeads;
  uint32_t seed = 1;
  auto mat = [&](const std::string& name, int64_t out, int64_t in) {
    m.tensors[name] = random_f32({out, in}, seed++);
  };
  mat("model.embed_tokens.weight", kVocab, kHidden);
  const std::string p = "model.layers.0.";
  mat(p + "self_attn.q_proj.weight", kHeads * hd, kHidden);
  mat(p + "self_attn.k_proj.weight", kKvHeads * hd, kHidden);
  mat(p + "self_attn.v_proj.weight", kKvHeads * hd, kHidden);
  mat(p + "self_attn.o_proj.weight", kHidden, kHeads * hd);
  mat(p + "mlp.gate_proj.weight", kFfn, kHidden);
  mat(p + "mlp.up_proj.weight", kFfn, kHidden);
  mat(p + "mlp.down_proj.weight", kHidden, kFfn);
  mat("lm_head.weight", kVocab, kHidden);
  for (const char* n : {"model.layers.0.input_layernorm.weight",
                        "model.layers.0.post_attention_layernorm.weight", "model.norm.weight"}) {
    m.tensors[n] = Tensor::from_f32({kHidden}, std::vector<float>(kHidden, 1.0f));
  }
  return m;
}

const char* kLinears[] = {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
                          "model.layers.0.self_attn.v_proj", "model.layers.0.self_attn.o_proj",
                          "model.layers.0.mlp.gate_proj",    "model.layers.0.mlp.up_proj",
                          "model.layers.0.mlp.down_proj",    "lm_head"};

// The float model with every linear quantized the way `sampan quantize` stores it.
ModelFiles quantized_model(const QuantScheme& s) {
  ModelFiles m = float_model();
  for (const char* name : kLinears) {
    const std::string w = std::string(name) + ".weight";
    if (s.format == WeightFormat::kInt4 && m.tensors[w].dim(1) % s.group_size != 0) continue;
    models::QuantizedMatrix q = models::quantize_matrix(m.tensors[w], s, w);
    m.tensors[w] = q.data;
    m.tensors[std::string(name) + ".weight_scale"] = q.scales;
    if (q.zeros.defined() && q.zeros.numel() > 0) m.tensors[std::string(name) + ".weight_zero"] = q.zeros;
  }
  nlohmann::json section = {{"quant_method", "sampan"}, {"format", models::weight_format_name(s.format)}};
  if (s.format == WeightFormat::kInt4) {
    section["group_size"] = s.group_size;
    section["symmetric"] = s.symmetric;
    section["scale_dtype"] = s.scale_dtype == DType::kBF16 ? "bf16" : "f16";
  }
  m.config["quantization_config"] = section;
  return m;
}

void write_model(const std::string& dir, const ModelFiles& m) {
  std::vector<NamedTensor> list;
  for (const auto& [n, t] : m.tensors) list.push_back({n, t});
  write_safetensors(dir + "/model.safetensors", list);
  std::ofstream(dir + "/config.json") << m.config.dump(2);
}

models::LlamaWeights load(const std::string& dir, const models::ModelBuildOptions& o = {}) {
  const HfConfig c = load_hf_config(dir);
  const WeightStore store = WeightStore::open(dir);
  return models::load_llama_weights(c, store, o);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.nbytes())) == 0;
}

}  // namespace

TEST_CASE("linear schema: quantized inputs are checked with one-line errors", "[quant]") {
  Graph g;
  const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("n"), Dim::fixed(64)});
  const Tensor w = random_f32({8, 64}, 1);
  const Linear q4 = quantized_linear(w, scheme(WeightFormat::kInt4, 32, false));
  const Linear q8 = quantized_linear(w, scheme(WeightFormat::kFp8));
  auto c = [&](const Tensor& t) { return g.add_constant("c", t); };
  auto node = [&](std::vector<ValueId> in, graph::Attributes a) {
    graph::Node n;
    n.op = "linear";
    n.name = "blk.proj";
    n.inputs = std::move(in);
    n.attrs = std::move(a);
    return n;
  };
  const ValueId no = graph::kNoValue;

  // Well-formed: int4 asymmetric (all slots) and fp8 (no zeros slot).
  CHECK(infer(g, node({x, c(q4.weight), no, c(q4.scales), c(q4.zeros)}, {{"group_size", int64_t{32}}}))[0].shape ==
        Shape{5, 8});
  CHECK(infer(g, node({x, c(q8.weight), no, c(q8.scales)}, {}))[0].shape == Shape{5, 8});

  expect_error([&] { infer(g, node({x, c(q8.weight)}, {})); }, ErrorCode::kInvalidArgument,
               {"node 'blk.proj' (linear)", "scales_0", "missing"});
  expect_error([&] { infer(g, node({x, c(q4.weight), no, c(q4.scales)}, {})); },
               ErrorCode::kInvalidArgument, {"node 'blk.proj'", "group_size"});
  expect_error([&] { infer(g, node({x, c(q4.weight), no, c(q4.scales)}, {{"group_size", int64_t{64}}})); },
               ErrorCode::kInvalidArgument, {"node 'blk.proj'", "input 3 (scales_0) is f16[8, 2], expected f16[8, 1]"});
  expect_error([&] { infer(g, node({x, c(q4.weight), no, c(q4.zeros)}, {{"group_size", int64_t{32}}})); },
               ErrorCode::kInvalidArgument, {"node 'blk.proj'", "input 3 (scales_0) is i8"});
  expect_error([&] { infer(g, node({x, c(q4.weight), no, c(q4.scales), c(q8.scales)}, {{"group_size", int64_t{32}}})); },
               ErrorCode::kInvalidArgument, {"input 4 (zeros_0) is f32[8], expected i8[8, 2]"});
  expect_error([&] { infer(g, node({x, c(w), no, c(q8.scales)}, {})); }, ErrorCode::kInvalidArgument,
               {"input 3 (scales_0) is given but float weights take none"});
  expect_error([&] { infer(g, node({x, c(q8.weight), no, c(q4.scales)}, {})); },
               ErrorCode::kInvalidArgument, {"input 3 (scales_0) is f16[8, 2], expected f32[8]"});
  expect_error([&] { infer(g, node({x, c(q8.weight), c(w), no, no, c(q8.scales), no}, {{"n_blocks", int64_t{2}}})); },
               ErrorCode::kInvalidArgument, {"weight blocks mix f8_e4m3 and f32"});
}

TEST_CASE("fusion passes fuse quantized linears of one format and never mix formats", "[quant]") {
  const Tensor w = random_f32({64, 64}, 2);
  auto build = [&](const QuantScheme& gate_s, const QuantScheme& up_s, const QuantScheme& v_s) {
    Graph g;
    const ValueId x = g.add_input("x", DType::kF32, {Dim::sym("n"), Dim::fixed(64)});
    const ValueId q = models::linear(g, "q", x, quantized_linear(w, gate_s));
    const ValueId k = models::linear(g, "k", x, quantized_linear(w, gate_s));
    const ValueId v = models::linear(g, "v", x, quantized_linear(w, v_s));
    const ValueId qk = g.add("add", "qk", {q, k});
    const ValueId a = g.add("add", "a", {qk, v});
    const ValueId gt = models::linear(g, "gate", a, quantized_linear(w, gate_s));
    const ValueId up = models::linear(g, "up", a, quantized_linear(w, up_s));
    g.mark_output(g.add("silu_mul", "act", {gt, up}));
    return g;
  };
  const QuantScheme s4 = scheme(WeightFormat::kInt4, 32, false);
  {
    Graph g = build(s4, s4, s4);
    const graph::passes::PassReport r = graph::passes::optimize(g);
    CHECK(r.gate_up_silu == 1);
    CHECK(r.sibling_linears == 1);
    for (const auto& n : g.nodes()) {
      if (n.op != "linear") continue;
      const int64_t b = n.attrs.get_int("n_blocks", 1);
      // Fixed slots: x, weights, biases, scales, zeros.
      CHECK(n.inputs.size() == static_cast<size_t>(1 + 4 * b));
      for (int64_t i = 0; i < b; ++i) {
        CHECK(g.value(n.inputs[static_cast<size_t>(1 + 2 * b + i)]).dtype == DType::kF16);
        CHECK(g.value(n.inputs[static_cast<size_t>(1 + 3 * b + i)]).dtype == DType::kI8);
      }
      CHECK(n.attrs.get_int("group_size") == 32);
      CHECK_NOTHROW(infer(g, n));
    }
  }
  // Different formats (or group sizes, or scale types) stay apart.
  for (const QuantScheme& other :
       {scheme(WeightFormat::kFp8), scheme(WeightFormat::kInt4, 64, false),
        scheme(WeightFormat::kInt4, 32, false, DType::kBF16)}) {
    Graph g = build(s4, other, other);
    const graph::passes::PassReport r = graph::passes::optimize(g);
    CHECK(r.gate_up_silu == 0);
    CHECK(r.sibling_linears == 1);  // q and k only
    int linears = 0;
    for (const auto& n : g.nodes()) {
      if (n.op != "linear") continue;
      ++linears;
      CHECK_NOTHROW(infer(g, n));
    }
    CHECK(linears == 4);  // q+k fused, v, gate, up
  }
}

TEST_CASE("quantized model directories load as stored; bad ones name the file and tensor", "[quant]") {
  test::TempDir tmp("qmodel");
  const QuantScheme s4 = scheme(WeightFormat::kInt4, 32, false, DType::kBF16);
  const std::string good = tmp.file("good");
  std::filesystem::create_directories(good);
  write_model(good, quantized_model(s4));
  const std::string flt = tmp.file("float");
  std::filesystem::create_directories(flt);
  write_model(flt, float_model());

  // The stored model holds exactly what on-load quantization of the float model computes.
  models::ModelBuildOptions on_load;
  on_load.quantization = s4;
  const models::LlamaWeights a = load(good), b = load(flt, on_load);
  CHECK(a.layers[0].gate.weight.dtype() == DType::kI4);
  CHECK(a.layers[0].gate.group_size == 32);
  CHECK(same_bytes(a.layers[0].gate.weight, b.layers[0].gate.weight));
  CHECK(same_bytes(a.layers[0].gate.scales, b.layers[0].gate.scales));
  CHECK(same_bytes(a.layers[0].gate.zeros, b.layers[0].gate.zeros));
  CHECK(same_bytes(a.output.weight, b.output.weight));
  // down_proj reads 80 columns, not a multiple of the group size: it keeps float weights both
  // when stored and when quantized on load.
  CHECK(a.layers[0].down.weight.dtype() == DType::kF32);
  CHECK(b.layers[0].down.weight.dtype() == DType::kF32);
  CHECK(same_bytes(a.layers[0].down.weight, b.layers[0].down.weight));

  // Re-quantizing or rotating a quantized model on load is refused.
  expect_error([&] { load(good, on_load); }, ErrorCode::kInvalidArgument, {"already quantized"});
  models::ModelBuildOptions rot;
  rot.hadamard.enabled = true;
  expect_error([&] { load(good, rot); }, ErrorCode::kInvalidArgument, {"already quantized"});

  struct Case {
    const char* what;
    std::function<void(ModelFiles&)> corrupt;
    ErrorCode code;
    std::vector<std::string> needles;
  };
  const std::string gate = "model.layers.0.mlp.gate_proj";
  const std::vector<Case> cases = {
      {"missing scale", [&](ModelFiles& m) { m.tensors.erase(gate + ".weight_scale"); },
       ErrorCode::kInvalidModel, {"model.safetensors: tensor '" + gate + ".weight_scale' is missing"}},
      {"missing zero point", [&](ModelFiles& m) { m.tensors.erase(gate + ".weight_zero"); },
       ErrorCode::kInvalidModel, {"tensor '" + gate + ".weight_zero' is missing"}},
      {"wrong group count",
       [&](ModelFiles& m) { m.tensors[gate + ".weight_scale"] = Tensor::zeros({kFfn, 1}, DType::kBF16); },
       ErrorCode::kInvalidModel, {"tensor '" + gate + ".weight_scale' is BF16[80, 1], expected BF16[80, 2]", "group size 32"}},
      {"wrong scale dtype",
       [&](ModelFiles& m) { m.tensors[gate + ".weight_scale"] = Tensor::zeros({kFfn, 2}, DType::kF16); },
       ErrorCode::kInvalidModel, {"tensor '" + gate + ".weight_scale' is F16[80, 2], expected BF16[80, 2]"}},
      {"weight shape mismatch",
       [&](ModelFiles& m) { m.tensors[gate + ".weight"] = Tensor::zeros({kFfn, 64}, DType::kI8); },
       ErrorCode::kInvalidModel, {"tensor '" + gate + ".weight' is I8[80, 64], expected I8[80, 32]"}},
      {"float weight where int4 expected",
       [&](ModelFiles& m) { m.tensors[gate + ".weight"] = random_f32({kFfn, kHidden}, 3); },
       ErrorCode::kInvalidModel, {"tensor '" + gate + ".weight' is F32[80, 64]"}},
      {"unknown format",
       [&](ModelFiles& m) { m.config["quantization_config"]["format"] = "int3"; },
       ErrorCode::kInvalidModel, {"config.json: key 'quantization_config.format' is 'int3'"}},
      {"bad group size",
       [&](ModelFiles& m) { m.config["quantization_config"]["group_size"] = 48; },
       ErrorCode::kInvalidModel, {"key 'quantization_config.group_size' is 48"}},
      {"group size of another model",
       [&](ModelFiles& m) { m.config["quantization_config"]["group_size"] = 64; },
       ErrorCode::kInvalidModel,
       {"tensor 'model.layers.0.self_attn.q_proj.weight_scale' is BF16[64, 2], expected BF16[64, 1]",
        "int4 group size 64"}},
      {"missing scale dtype",
       [&](ModelFiles& m) { m.config["quantization_config"].erase("scale_dtype"); },
       ErrorCode::kInvalidModel, {"key 'quantization_config.scale_dtype' is missing"}},
      {"format missing",
       [&](ModelFiles& m) { m.config["quantization_config"] = {{"quant_method", "sampan"}, {"rotation", 3}}; },
       ErrorCode::kInvalidModel, {"quantization_config.format' is missing"}},
      {"bad rotation block",
       [&](ModelFiles& m) {
         m.config["quantization_config"]["rotation"] = {{"method", "hadamard"}, {"seed", 1}, {"down_proj_block", 24}};
       },
       ErrorCode::kInvalidModel, {"key 'quantization_config.rotation.down_proj_block' is 24"}},
  };
  for (const Case& c : cases) {
    SECTION(c.what) {
      ModelFiles m = quantized_model(s4);
      c.corrupt(m);
      const std::string dir = tmp.file("bad");
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
      write_model(dir, m);
      expect_error([&] { load(dir); }, c.code, c.needles);
    }
  }

  SECTION("fp8: missing and misshapen scales") {
    ModelFiles m = quantized_model(scheme(WeightFormat::kFp8));
    const std::string dir = tmp.file("fp8");
    std::filesystem::create_directories(dir);
    m.tensors[gate + ".weight_scale"] = Tensor::zeros({kFfn, 1}, DType::kF32);
    write_model(dir, m);
    expect_error([&] { load(dir); }, ErrorCode::kInvalidModel,
                 {"tensor '" + gate + ".weight_scale' is F32[80, 1], expected F32[80]"});
    m.tensors.erase(gate + ".weight_scale");
    std::filesystem::remove(dir + "/model.safetensors");
    write_model(dir, m);
    expect_error([&] { load(dir); }, ErrorCode::kInvalidModel,
                 {"tensor '" + gate + ".weight_scale' is missing (the scale of the f8_e4m3 weight"});
  }
}

// Needs the quantized GEMM kernels (kernels/cpu/gemm_cpu.h): the op over fp8/int4 weights
// against the same op over the reference dequantization of those weights, in f32, unfused and
// through both fusion passes (two-block GEMM + split, gate/up with the silu_mul epilogue).
TEST_CASE("quantized linear op equals the float op over the dequantized weights", "[quant]") {
  ThreadPool pool(2);
  struct Form {
    QuantScheme s;
    const char* name;
  };
  const std::vector<Form> forms = {
      {scheme(WeightFormat::kFp8), "fp8"},
      {scheme(WeightFormat::kInt4, 32, true, DType::kF16), "int4 g32 sym f16"},
      {scheme(WeightFormat::kInt4, 64, false, DType::kBF16), "int4 g64 asym bf16"},
      {scheme(WeightFormat::kInt4, 128, false, DType::kF16), "int4 g128 asym f16"},
  };
  const int64_t k = 256, n = 17;
  const Tensor w_gate = random_f32({n, k}, 10), w_up = random_f32({n, k}, 11);
  const Tensor bias = random_f32({n}, 12);
  for (const Form& f : forms) {
    const Linear lg = quantized_linear(w_gate, f.s), lu = quantized_linear(w_up, f.s);
    const Tensor dg = models::dequantize_matrix({lg.weight, lg.scales, lg.zeros}, f.s, "gate");
    const Tensor du = models::dequantize_matrix({lu.weight, lu.scales, lu.zeros}, f.s, "up");
    for (int64_t m : {1, 7, 33}) {
      const Tensor x = random_f32({m, k}, 13, 1.0f);
      // sum_c |x[r, c]| |w[j, c]| per output: the scale of f32 summation error.
      auto mag = [&](const Tensor& w, int64_t r, int64_t j) {
        double s = 0;
        for (int64_t c = 0; c < k; ++c) {
          s += std::fabs(x.data<float>()[r * k + c]) * std::fabs(w.data<float>()[j * k + c]);
        }
        return s;
      };
      for (const char* mode : {"store", "store fused", "silu_mul fused"}) {
        CAPTURE(f.name, m, mode);
        const bool silu = std::string(mode) == "silu_mul fused";
        Graph gq, gf;
        for (Graph* g : {&gq, &gf}) {
          const ValueId xv = g->add_input("x", DType::kF32, {Dim::sym("n"), Dim::fixed(k)});
          Linear a = g == &gq ? lg : Linear{}, b = g == &gq ? lu : Linear{};
          if (g == &gf) {
            a.weight = dg;
            b.weight = du;
          }
          a.bias = bias;
          const ValueId av = models::linear(*g, "gate", xv, a), bv = models::linear(*g, "up", xv, b);
          if (silu) {
            g->mark_output(g->add("silu_mul", "act", {av, bv}));
          } else {
            g->mark_output(av);
            g->mark_output(bv);
          }
          if (std::string(mode) != "store") graph::passes::optimize(*g);
        }
        int64_t linears = 0;
        for (const auto& node : gq.nodes()) linears += node.op == "linear";
        CHECK(linears == (std::string(mode) == "store" ? 2 : 1));
        graph::Executor eq(gq, pool), ef(gf, pool);
        const std::vector<Tensor> yq = eq.run({{"x", x}}), yf = ef.run({{"x", x}});
        REQUIRE(yq.size() == yf.size());
        // Both sides multiply the same weight values. Decode-sized m streams the weights
        // through the FMA path in f32: ~1e-6 of sum |x||w| (gemm_cpu.h), so 1e-4 bounds it.
        // Prefill-sized m may run the quantized weights through bf16 tiles (the dequantized
        // w = q * scale rounded to bf16, measured ~6e-4 of sum |x||w|): 2^-8 of sum |x||w|, the
        // contract's bf16 bound. A wrong scale, nibble or group is off by 10 % or more. For
        // silu(a) * b the errors of a and b are weighted by |b| (silu' <= 1.1) and |silu(a)|
        // <= |a|.
        const double rel = m < 6 ? 1e-4 : 0x1p-8;
        int64_t bad = 0;
        double worst = 0;
        for (size_t o = 0; o < yq.size(); ++o) {
          const Tensor q = yq[o].contiguous(), r = yf[o].contiguous();
          REQUIRE(q.shape() == r.shape());
          for (int64_t row = 0; row < m; ++row) {
            for (int64_t j = 0; j < n; ++j) {
              const float got = q.data<float>()[row * n + j], want = r.data<float>()[row * n + j];
              double tol = rel * mag(o == 0 ? dg : du, row, j);
              if (silu) {
                double av = bias.data<float>()[j], bv = 0;
                for (int64_t c = 0; c < k; ++c) {
                  av += x.data<float>()[row * k + c] * dg.data<float>()[j * k + c];
                  bv += x.data<float>()[row * k + c] * du.data<float>()[j * k + c];
                }
                tol = rel * (1.1 * std::fabs(bv) * mag(dg, row, j) + std::fabs(av) * mag(du, row, j));
              }
              if (!(std::fabs(got - want) <= tol + 1e-7)) ++bad;
              worst = std::max(worst, std::fabs(got - want) / (tol + 1e-7));
            }
          }
        }
        CAPTURE(worst);  // largest error as a fraction of its tolerance
        CHECK(bad == 0);
      }
    }
  }
}
