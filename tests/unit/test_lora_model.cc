// LoRA adapters (models/lora_adapter.h) and the graphs that serve them: peft's own fixtures
// (tests/data/lora, made by tests/reference/make_lora_goldens.py) load, fit their base and
// reproduce peft's logits; a saved adapter has peft's names, shapes and config keys; several
// adapters of different ranks share one graph and `lora_ids` picks one per token, with or
// without the fusion passes.
#include <catch2/catch.hpp>

#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/error.h"
#include "engine/core/npy.h"
#include "engine/graph/executor.h"
#include "engine/loaders/safetensors.h"
#include "engine/models/lora_adapter.h"
#include "engine/models/model.h"
#include "engine/runtime/causal_lm.h"
#include "engine/runtime/engine.h"
#include "kernels/common/half.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/cpu/isa.h"
#include "loader_test_util.h"

using namespace sampan;
using models::LoraAdapter;

namespace {

std::string source(const std::string& rel) { return std::string(SAMPAN_SOURCE_DIR) + "/" + rel; }
std::string tiny_model(const std::string& name) { return source("tests/data/models/" + name); }
std::string fixture(const std::string& name) { return source("tests/data/lora/" + name); }

std::shared_ptr<const LoraAdapter> shared(LoraAdapter a) {
  return std::make_shared<const LoraAdapter>(std::move(a));
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

std::vector<int32_t> golden_ids(const std::string& name) {
  return read_json(fixture(name + ".json"))["ids"].get<std::vector<int32_t>>();
}

// Max |a - b| over two [n, vocab] f32 tensors of equal shape.
double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double d = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    d = std::max(d, static_cast<double>(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  }
  return d;
}

// All logits of `ids` through a CausalLm over `build`, running adapter `index`.
Tensor run_lm(const std::string& model, const models::ModelBuildOptions& build, int index,
              const std::vector<int32_t>& ids, bool optimize = true) {
  runtime::CausalLmOptions o;
  o.threads = 2;
  o.max_context = 64;
  o.build = build;
  o.lora_adapter = index;
  o.optimize = optimize;
  auto lm = runtime::CausalLm::load(model, o);
  return lm->forward(ids, true);
}

// An adapter made in memory with random B (make_lora_adapter leaves B zero, a no-op).
LoraAdapter random_adapter(const HfConfig& c, int64_t rank, std::vector<std::string> targets,
                           uint64_t seed) {
  models::LoraConfig lc;
  lc.rank = rank;
  lc.alpha = 3.0;
  lc.targets = std::move(targets);
  LoraAdapter a = models::make_lora_adapter(lc, c, seed);
  a.name = "random";
  uint64_t s = seed * 2654435761u + 1;
  for (auto& layer : a.layers) {
    for (models::LoraPair& p : layer) {
      if (!p.defined()) continue;
      for (int64_t i = 0; i < p.b.numel(); ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p.b.data<float>()[i] = (static_cast<float>(s >> 40) / 16777216.0f - 0.5f) * 0.4f;
      }
    }
  }
  return a;
}

}  // namespace

TEST_CASE("load_lora_adapter reads peft's fixtures", "[lora]") {
  const LoraAdapter all = models::load_lora_adapter(fixture("llama3_all"));
  CHECK(all.config.rank == 4);
  CHECK(all.config.alpha == 8.0);
  CHECK(all.config.scale() == 2.0);
  models::LoraConfig rs = all.config;
  rs.use_rslora = true;  // rank-stabilised: alpha / sqrt(r)
  CHECK(rs.scale() == 4.0);
  CHECK(all.config.targets.size() == 7);
  CHECK(all.config.base_model == "tests/data/models/tiny_llama3");
  REQUIRE(all.layers.size() == 3);
  const HfConfig llama = load_hf_config(tiny_model("tiny_llama3"));
  for (int m = 0; m < models::kLoraModuleCount; ++m) {
    const auto [in, out] = models::lora_module_shape(llama, m);
    CHECK(all.layers[2][static_cast<size_t>(m)].a.shape() == (Shape{4, in}));
    CHECK(all.layers[2][static_cast<size_t>(m)].b.shape() == (Shape{out, 4}));
  }
  models::check_lora_adapter(all, llama);

  // Stored as bf16 (q/v only) and f16: converted to f32 on load.
  const LoraAdapter qv = models::load_lora_adapter(fixture("llama3_qv"));
  CHECK(qv.layers[1][0].defined());
  CHECK_FALSE(qv.layers[1][1].defined());
  CHECK(qv.layers[1][2].defined());
  CHECK(qv.layers[1][2].a.dtype() == DType::kF32);
  models::check_lora_adapter(qv, llama);
  const SafetensorsFile raw = SafetensorsFile::open(fixture("llama3_qv/adapter_model.safetensors"));
  const std::string name = models::lora_tensor_name(1, 2, 'B');
  const Tensor stored = raw.get(name);
  REQUIRE(stored.dtype() == DType::kBF16);
  for (int64_t i = 0; i < stored.numel(); ++i) {
    CHECK(qv.layers[1][2].b.data<float>()[i] == bf16_to_f32(stored.data<uint16_t>()[i]));
  }
  models::check_lora_adapter(models::load_lora_adapter(fixture("qwen2_all")),
                             load_hf_config(tiny_model("tiny_qwen2")));
}

TEST_CASE("check_lora_adapter names the tensor and both shapes", "[lora]") {
  const LoraAdapter all = models::load_lora_adapter(fixture("llama3_all"));
  const HfConfig qwen = load_hf_config(tiny_model("tiny_qwen2"));
  test::expect_error([&] { models::check_lora_adapter(all, qwen); }, ErrorCode::kInvalidArgument,
                     {fixture("llama3_all"), models::lora_tensor_name(0, 0, 'A'), "[4, 96]",
                      "[4, 128]"});
  // Fewer layers than the base: the first missing tensor is named.
  LoraAdapter short_one = all;
  short_one.layers.pop_back();
  const HfConfig llama = load_hf_config(tiny_model("tiny_llama3"));
  test::expect_error([&] { models::check_lora_adapter(short_one, llama); },
                     ErrorCode::kInvalidArgument,
                     {"base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight", "missing"});
}

TEST_CASE("save_lora_adapter writes what peft writes and round-trips", "[lora]") {
  test::TempDir tmp("lora_save");
  for (const char* name : {"llama3_all", "llama3_qv"}) {
    INFO(name);
    const LoraAdapter a = models::load_lora_adapter(fixture(name));
    const std::string out = tmp.file(name);
    models::save_lora_adapter(a, out);
    const LoraAdapter back = models::load_lora_adapter(out);
    REQUIRE(back.layers.size() == a.layers.size());
    for (size_t l = 0; l < a.layers.size(); ++l) {
      for (size_t m = 0; m < a.layers[l].size(); ++m) {
        const models::LoraPair& p = a.layers[l][m];
        const models::LoraPair& q = back.layers[l][m];
        REQUIRE(p.defined() == q.defined());
        if (!p.defined()) continue;
        CHECK(max_abs_diff(p.a, q.a) == 0.0);
        CHECK(max_abs_diff(p.b, q.b) == 0.0);
      }
    }
    // peft's tensor names and shapes exactly; f32 whatever the source stored.
    const SafetensorsFile peft =
        SafetensorsFile::open(fixture(std::string(name) + "/adapter_model.safetensors"));
    const SafetensorsFile ours = SafetensorsFile::open(out + "/adapter_model.safetensors");
    const std::set<std::string> peft_names(peft.names().begin(), peft.names().end());
    const std::set<std::string> our_names(ours.names().begin(), ours.names().end());
    CHECK(peft_names == our_names);
    for (const std::string& t : ours.names()) {
      CHECK(ours.info(t).shape == peft.info(t).shape);
      CHECK(ours.info(t).dtype == DType::kF32);
    }
    // Every config key we write is one peft writes, with the same value where it matters.
    const nlohmann::json pc = read_json(fixture(std::string(name) + "/adapter_config.json"));
    const nlohmann::json oc = read_json(out + "/adapter_config.json");
    for (const auto& [key, value] : oc.items()) {
      INFO(key);
      CHECK(pc.contains(key));
    }
    for (const char* key :
         {"peft_type", "r", "lora_alpha", "lora_dropout", "bias", "task_type", "use_rslora",
          "use_dora", "base_model_name_or_path", "fan_in_fan_out"}) {
      INFO(key);
      CHECK(oc.at(key) == pc.at(key));
    }
    const auto targets = [](const nlohmann::json& j) {
      return j.at("target_modules").get<std::set<std::string>>();
    };
    CHECK(targets(oc) == targets(pc));
    CHECK_FALSE(std::filesystem::exists(out + "/adapter_config.json.tmp"));
  }
}

TEST_CASE("make_lora_adapter initialises as peft does", "[lora]") {
  const HfConfig c = load_hf_config(tiny_model("tiny_qwen2"));
  models::LoraConfig lc;
  lc.rank = 8;
  lc.targets = {"q_proj", "down_proj"};
  const LoraAdapter a = models::make_lora_adapter(lc, c, 7);
  REQUIRE(a.layers.size() == static_cast<size_t>(c.n_layer));
  for (int m : {0, 6}) {
    const models::LoraPair& p = a.layers[1][static_cast<size_t>(m)];
    REQUIRE(p.defined());
    const double bound = 1.0 / std::sqrt(static_cast<double>(p.a.dim(1)));
    double lo = 0, hi = 0, sum = 0;
    for (int64_t i = 0; i < p.a.numel(); ++i) {
      const double v = p.a.data<float>()[i];
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      sum += v;
    }
    // U(-bound, bound) over >= 1024 draws: the extremes come within 2 % of the bound and the
    // mean within 4 standard errors (bound / sqrt(3 n)) of 0.
    CHECK(hi <= bound);
    CHECK(lo >= -bound);
    CHECK(hi > 0.98 * bound);
    CHECK(lo < -0.98 * bound);
    const double n = static_cast<double>(p.a.numel());
    CHECK(std::fabs(sum / n) < 4 * bound / std::sqrt(3 * n));
    for (int64_t i = 0; i < p.b.numel(); ++i) CHECK(p.b.data<float>()[i] == 0.0f);
  }
  CHECK_FALSE(a.layers[0][1].defined());
  const LoraAdapter same = models::make_lora_adapter(lc, c, 7);
  const LoraAdapter other = models::make_lora_adapter(lc, c, 8);
  CHECK(max_abs_diff(a.layers[0][0].a, same.layers[0][0].a) == 0.0);
  CHECK(max_abs_diff(a.layers[0][0].a, other.layers[0][0].a) > 0.0);
  lc.targets = {"q_proj", "lm_head"};
  test::expect_error([&] { models::make_lora_adapter(lc, c, 1); }, ErrorCode::kInvalidArgument,
                     {"lm_head"});
}

TEST_CASE("merge_lora_weight adds scale·B·A, rounded once to the weight's dtype", "[lora]") {
  const LoraAdapter a = models::load_lora_adapter(fixture("llama3_all"));
  const models::LoraPair& p = a.layers[0][6];  // down_proj: A [4, 172], B [96, 4]
  const int64_t out = p.b.dim(0), in = p.a.dim(1);
  std::vector<float> w(static_cast<size_t>(out * in));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37 * static_cast<double>(i));
  const Tensor wf = Tensor::from_f32({out, in}, w);
  Tensor wb = Tensor::empty({out, in}, DType::kBF16);
  for (size_t i = 0; i < w.size(); ++i) wb.data<uint16_t>()[i] = f32_to_bf16(w[i]);
  const double s = a.config.scale();
  const Tensor mf = models::merge_lora_weight(wf, p, s, "down");
  const Tensor mb = models::merge_lora_weight(wb, p, s, "down");
  REQUIRE(mb.dtype() == DType::kBF16);
  double worst_f32 = 0;
  int64_t bf16_off = 0;
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      double d = 0, mag = 0;
      for (int64_t j = 0; j < 4; ++j) {
        const double t = s * p.b.data<float>()[o * 4 + j] * p.a.data<float>()[j * in + i];
        d += t;
        mag += std::fabs(t);
      }
      const double want = w[static_cast<size_t>(o * in + i)] + d;
      // f32: five roundings of terms at most |w| + mag.
      const double err = std::fabs(mf.data<float>()[o * in + i] - want);
      const double allowed = (std::fabs(w[static_cast<size_t>(o * in + i)]) + mag) * 0x1p-21;
      worst_f32 = std::max(worst_f32, err / allowed);
      // bf16: the f32 sum of the bf16 weight and the delta, rounded once.
      const double want_b = bf16_to_f32(wb.data<uint16_t>()[o * in + i]) + d;
      const float got_b = bf16_to_f32(mb.data<uint16_t>()[o * in + i]);
      bf16_off += std::fabs(got_b - want_b) > std::fabs(want_b) * 0x1p-8 + 1e-30;
    }
  }
  CHECK(worst_f32 <= 1.0);
  CHECK(bf16_off == 0);
  const Tensor int_weight = Tensor::zeros({3, 3}, DType::kI8);
  test::expect_error([&] { models::merge_lora_weight(int_weight, p, s, "x.weight"); },
                     ErrorCode::kInvalidArgument, {"x.weight", "i8"});
}

TEST_CASE("a LoRA graph reproduces peft and picks the adapter per token", "[lora][model]") {
  const std::string model = tiny_model("tiny_llama3");
  const HfConfig c = load_hf_config(model);
  auto all = shared(models::load_lora_adapter(fixture("llama3_all")));
  auto qv = shared(models::load_lora_adapter(fixture("llama3_qv")));
  // Rank 2 next to the fixtures' rank 4: stacked zero-padded in one graph.
  auto r2 = shared(random_adapter(c, 2, {"k_proj", "o_proj", "down_proj"}, 5));
  models::ModelBuildOptions multi;
  multi.lora = {all, qv, r2};

  // Each adapter of the multi-adapter graph against peft's logits (and the in-memory adapter
  // against a graph that holds it alone). Logits are O(10); transformers' f32 and ours differ
  // by f32 rounding in different summation orders, measured ~2e-5; 1e-3 leaves a wide margin
  // while a wrong scale or a dropped projection moves logits by whole units.
  const std::vector<std::pair<int, std::string>> fixtures = {{0, "llama3_all"}, {1, "llama3_qv"}};
  for (const auto& [index, name] : fixtures) {
    INFO(name);
    const std::vector<int32_t> ids = golden_ids(name);
    const Tensor golden = read_npy(fixture(name + ".npy"));
    CHECK(max_abs_diff(run_lm(model, multi, index, ids), golden) < 1e-3);
    CHECK(max_abs_diff(run_lm(model, multi, index, ids, /*optimize=*/false), golden) < 1e-3);
  }
  const std::vector<int32_t> ids = golden_ids("llama3_all");
  models::ModelBuildOptions alone;
  alone.lora = {r2};
  Tensor r2_alone;
  {
    // The same adapter stacked (zero-padded to rank 4) or alone: the LoRA products sum in
    // another order, f32 ulps apart. On AMX CPUs the default GEMM's hi + lo bf16 split of x
    // turns those into 2^-16-relative differences per layer (measured 1.07e-4 on Emerald
    // Rapids, see below), so both run every GEMM exact in f32, where selecting the adapter per
    // token is what this measures (the peft checks above cover the AMX default).
    cpu::ScopedGemmPrecision exact(cpu::GemmPrecision::kF32);
    r2_alone = run_lm(model, alone, 0, ids);
    CHECK(max_abs_diff(run_lm(model, multi, 2, ids), r2_alone) < 1e-4);
  }
  // -1: the base model, as built without adapters. The two graphs differ in fusion (the base
  // fuses Q/K/V and gate/up, the LoRA graph reads slices), so GEMM inputs differ by f32 ulps;
  // on the FMA path that stays ~1e-6 on these O(10) logits. On AMX CPUs the default GEMM
  // splits x into two bf16 parts (16 significant bits, cpu::GemmPrecision), a rounding that
  // turns ulp-level input differences into up to 2^-16-relative ones per layer: measured
  // 1.01e-4 here, so 1e-3 there (still 100x below an adapter's effect, checked next).
  const double same_model_tol = cpu::has_amx() ? 1e-3 : 1e-4;
  const Tensor base = run_lm(model, {}, 0, ids);
  CHECK(max_abs_diff(run_lm(model, multi, -1, ids), base) < same_model_tol);
  CHECK(max_abs_diff(r2_alone, base) > 0.1);  // the random adapter does change the logits

  // The passes keep every lora node, fuse Q/K/V (the lora nodes then read the split's slices)
  // and leave gate/up unfused where their outputs go through lora nodes.
  models::LoadOptions lo;
  lo.build = multi;
  const auto m = models::load_model(model, lo);
  int n_lora = 0, n_qkv = 0, n_silu_epilogue = 0;
  for (const graph::Node& n : m->graph.nodes()) {
    if (n.dead) continue;
    n_lora += n.op == "lora";
    n_qkv += n.op == "linear" && n.attrs.get_int("n_blocks", 1) == 3;
    n_silu_epilogue += n.op == "linear" && n.attrs.get_string("epilogue", "store") == "silu_mul";
  }
  CHECK(n_lora == 7 * c.n_layer);
  CHECK(n_qkv == c.n_layer);
  CHECK(n_silu_epilogue == 0);
  const models::TensorSpec* lora_ids = m->signature.find_input(models::TensorRole::kLoraIds);
  REQUIRE(lora_ids != nullptr);
  CHECK(lora_ids->dtype == DType::kI32);
  const auto plain = models::load_model(model, {});
  CHECK(plain->signature.find_input(models::TensorRole::kLoraIds) == nullptr);

  // One batch of three sequences on three adapters (r2, base, all), in one executor run.
  const models::DecoderBindings bind = models::DecoderBindings::from(m->signature, model);
  REQUIRE_FALSE(bind.lora_ids.empty());
  const int64_t len = static_cast<int64_t>(ids.size());
  const std::vector<int32_t> adapters = {2, -1, 0};
  ThreadPool pool(2);
  graph::Executor ex(m->graph, pool);
  const models::KvPools kv = m->allocate_kv_pools(3, len, Device::cpu(), true, "test");
  std::map<std::string, Tensor> in;
  m->bind_kv_pools(kv, in);
  std::vector<int32_t> tok, pos, seq, lids, rows;
  for (int32_t s = 0; s < 3; ++s) {
    for (int64_t t = 0; t < len; ++t) {
      tok.push_back(ids[static_cast<size_t>(t)]);
      pos.push_back(static_cast<int32_t>(t));
      seq.push_back(s);
      lids.push_back(adapters[static_cast<size_t>(s)]);
      rows.push_back(static_cast<int32_t>(rows.size()));
    }
  }
  const int64_t n = 3 * len;
  in[bind.ids] = Tensor::from_i32({n}, tok);
  in[bind.positions] = Tensor::from_i32({n}, pos);
  in[bind.seq_ids] = Tensor::from_i32({n}, seq);
  in[bind.block_tables] = Tensor::from_i32({3, 1}, {0, 1, 2});
  in[bind.logit_rows] = Tensor::from_i32({n}, rows);
  in[bind.lora_ids] = Tensor::from_i32({n}, lids);
  const Tensor batch = ex.run(in)[bind.logits_output].clone();
  const Tensor golden_all = read_npy(fixture("llama3_all.npy"));
  const Tensor expected[] = {r2_alone, base, golden_all};
  for (int64_t s = 0; s < 3; ++s) {
    INFO("sequence " << s << " adapter " << adapters[static_cast<size_t>(s)]);
    CHECK(max_abs_diff(batch.slice(0, s * len, (s + 1) * len).contiguous(), expected[s]) < 1e-3);
  }

  // An adapter index the graph does not have is refused by name before anything is computed.
  in[bind.lora_ids] = Tensor::from_i32({n}, std::vector<int32_t>(static_cast<size_t>(n), 3));
  test::expect_error([&] { ex.run(in); }, ErrorCode::kInvalidArgument, {"lora", "adapter 3"});
}

TEST_CASE("a LoRA build checks its adapters and the runtime's index", "[lora][model]") {
  models::ModelBuildOptions b;
  b.lora = {shared(models::load_lora_adapter(fixture("qwen2_all")))};
  test::expect_error([&] { run_lm(tiny_model("tiny_llama3"), b, 0, {1, 2}); },
                     ErrorCode::kInvalidArgument,
                     {"self_attn.q_proj.lora_A.weight", "[4, 128]", "[4, 96]"});
  test::expect_error([&] { run_lm(tiny_model("tiny_qwen2"), b, 1, {1, 2}); },
                     ErrorCode::kInvalidArgument, {"LoRA adapter 1"});
}

TEST_CASE("every adapter load error is kInvalidArgument naming the file", "[lora]") {
  test::TempDir tmp("lora_bad");
  const std::string dir = tmp.file("a");
  std::filesystem::copy(fixture("llama3_qv"), dir);
  const std::string config = dir + "/adapter_config.json";
  const std::string weights = dir + "/adapter_model.safetensors";
  std::string json_text;
  {
    std::ifstream in(config);
    json_text.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(config, std::ios::trunc) << json_text.substr(0, json_text.size() / 2);
  test::expect_error([&] { models::load_lora_adapter(dir); }, ErrorCode::kInvalidArgument,
                     {config, "JSON"});
  std::ofstream(config, std::ios::trunc) << json_text;
  std::filesystem::resize_file(weights, std::filesystem::file_size(weights) / 2);
  test::expect_error([&] { models::load_lora_adapter(dir); }, ErrorCode::kInvalidArgument,
                     {weights});
}

namespace {

// Greedy tokens of each prompt through an Engine over `options` (all requests at once).
std::vector<std::vector<int32_t>> engine_tokens(const std::string& model,
                                                const runtime::EngineOptions& options,
                                                const std::vector<std::vector<int32_t>>& prompts) {
  auto engine = runtime::Engine::load(model, options);
  struct Out {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int32_t> tokens;
    bool done = false;
  };
  std::vector<std::unique_ptr<Out>> outs;
  for (const auto& p : prompts) {
    outs.push_back(std::make_unique<Out>());
    Out* o = outs.back().get();
    runtime::EngineRequest r;
    r.prompt = p;
    r.max_tokens = 8;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    engine->submit(r, [o](const runtime::EngineEvent& ev) {
      std::lock_guard<std::mutex> lock(o->mu);
      if (ev.token >= 0) o->tokens.push_back(ev.token);
      if (ev.finished) {
        o->done = true;
        o->cv.notify_all();
      }
    });
  }
  std::vector<std::vector<int32_t>> tokens;
  for (auto& o : outs) {
    std::unique_lock<std::mutex> lock(o->mu);
    REQUIRE(o->cv.wait_for(lock, std::chrono::seconds(120), [&] { return o->done; }));
    tokens.push_back(o->tokens);
  }
  return tokens;
}

}  // namespace

TEST_CASE("the engine binds lora_ids: requests without an adapter run the base", "[lora][engine]") {
  const std::string model = std::string(SAMPAN_BINARY_DIR) + "/test_lora_engine_model";
  const std::string cmd = "python3 " + source("tests/reference/make_serve_model.py") + " --out " +
                          model + " > /dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const HfConfig c = load_hf_config(model);
  const std::vector<std::vector<int32_t>> prompts = {{1, 500, 20, 7}, {1, 9}, {1, 3000, 41, 41, 8}};
  runtime::EngineOptions o;
  o.threads = 2;
  o.max_model_len = 64;
  o.num_kv_blocks = 32;
  const auto base = engine_tokens(model, o, prompts);
  o.build.lora = {shared(random_adapter(c, 4, {"q_proj", "v_proj", "down_proj"}, 9))};
  // Decode steps padded to fixed shapes fill lora_ids on their own path (model_runner.cc).
  for (bool padded : {false, true}) {
    INFO("padded decode steps " << padded);
    o.pad_decode_steps = padded;
    CHECK(engine_tokens(model, o, prompts) == base);
  }
}
