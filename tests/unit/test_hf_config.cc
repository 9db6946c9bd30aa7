// hf_config: the checked-in config.json samples of real checkpoints (tests/data/configs), the
// defaults and per-architecture rules (biases, sliding window, rope variants), and every
// malformed-config case, asserting the one-line message names the file and the key.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/loaders/hf_config.h"
#include "tests/unit/loader_test_util.h"

using namespace sampan;
namespace fs = std::filesystem;
using nlohmann::json;
using namespace sampan::test;

namespace {

const std::string kConfigDir = std::string(SAMPAN_SOURCE_DIR) + "/tests/data/configs/";

// A small valid Llama config to mutate in the error cases.
json tiny_llama() {
  return json{{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"vocab_size", 1000},
              {"hidden_size", 64},
              {"intermediate_size", 172},
              {"num_hidden_layers", 4},
              {"num_attention_heads", 8},
              {"num_key_value_heads", 2},
              {"max_position_embeddings", 2048},
              {"rms_norm_eps", 1e-6},
              {"hidden_act", "silu"}};
}

HfConfig parse(const json& j, const std::string& source = "cfg.json") {
  return parse_hf_config(j.dump(), source);
}

std::vector<bool> all(int64_t n, bool v) { return std::vector<bool>(static_cast<size_t>(n), v); }

}  // namespace

TEST_CASE("hf_config: Llama 3.1 8B") {
  const std::string path = kConfigDir + "llama-3.1-8b-instruct.json";
  const HfConfig c = load_hf_config(path);
  CHECK(c.source == path);
  CHECK(c.arch == ModelArch::kLlama);
  CHECK(std::string(model_arch_name(c.arch)) == "LlamaForCausalLM");
  CHECK(c.model_type == "llama");
  CHECK(c.vocab_size == 128256);
  CHECK(c.hidden_size == 4096);
  CHECK(c.intermediate_size == 14336);
  CHECK(c.n_layer == 32);
  CHECK(c.n_head == 32);
  CHECK(c.n_head_kv == 8);
  CHECK(c.head_dim == 128);
  CHECK(c.q_dim() == 4096);
  CHECK(c.kv_dim() == 1024);
  CHECK(c.max_position_embeddings == 131072);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK(c.rope.type == RopeType::kLlama3);
  CHECK(c.rope.theta == 500000.0);
  CHECK(c.rope.factor == 8.0);
  CHECK(c.rope.low_freq_factor == 1.0);
  CHECK(c.rope.high_freq_factor == 4.0);
  CHECK(c.rope.original_max_position_embeddings == 8192);
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK_FALSE((c.bias_q || c.bias_k || c.bias_v || c.bias_o || c.bias_mlp));
  CHECK_FALSE(c.sliding_window.has_value());
  CHECK(c.layer_sliding == all(32, false));
  CHECK_FALSE(c.layer_is_sliding(31));
  REQUIRE(c.bos_token_id.has_value());
  CHECK(*c.bos_token_id == 128000);
  CHECK(c.eos_token_ids == std::vector<int64_t>{128001, 128008, 128009});
  CHECK(c.dtype == DType::kBF16);
}

TEST_CASE("hf_config: Mistral Nemo has an explicit head_dim and no window") {
  const HfConfig c = load_hf_config(kConfigDir + "mistral-nemo-instruct-2407.json");
  CHECK(c.arch == ModelArch::kMistral);
  CHECK(c.hidden_size == 5120);
  CHECK(c.n_head == 32);
  CHECK(c.head_dim == 128);  // not 5120 / 32 = 160
  CHECK(c.q_dim() == 4096);
  CHECK(c.kv_dim() == 1024);
  CHECK(c.n_layer == 40);
  CHECK(c.rope.type == RopeType::kDefault);
  CHECK(c.rope.theta == 1000000.0);
  CHECK_FALSE(c.sliding_window.has_value());  // "sliding_window": null
  CHECK(c.layer_sliding == all(40, false));
  CHECK_FALSE((c.bias_q || c.bias_k || c.bias_v || c.bias_o || c.bias_mlp));
  CHECK(c.eos_token_ids == std::vector<int64_t>{2});
  CHECK(c.bos_token_id == 1);
}

TEST_CASE("hf_config: Mistral 7B v0.1 slides every layer") {
  const HfConfig c = load_hf_config(kConfigDir + "mistral-7b-v0.1.json");
  CHECK(c.arch == ModelArch::kMistral);
  REQUIRE(c.sliding_window.has_value());
  CHECK(*c.sliding_window == 4096);
  CHECK(c.layer_sliding == all(32, true));
  CHECK(c.layer_is_sliding(0));
  CHECK(c.head_dim == 128);
  CHECK(c.rope.theta == 10000.0);
}

TEST_CASE("hf_config: Qwen2.5 biases q, k, v and ignores a disabled window") {
  const HfConfig c = load_hf_config(kConfigDir + "qwen2.5-7b-instruct.json");
  CHECK(c.arch == ModelArch::kQwen2);
  CHECK(c.hidden_size == 3584);
  CHECK(c.n_head == 28);
  CHECK(c.n_head_kv == 4);
  CHECK(c.head_dim == 128);
  CHECK(c.vocab_size == 152064);
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK((c.bias_q && c.bias_k && c.bias_v));
  CHECK_FALSE(c.bias_o);
  CHECK_FALSE(c.bias_mlp);
  CHECK_FALSE(c.sliding_window.has_value());  // use_sliding_window: false
  CHECK(c.layer_sliding == all(28, false));
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.eos_token_ids == std::vector<int64_t>{151645});

  const HfConfig small = load_hf_config(kConfigDir + "qwen2.5-0.5b-instruct.json");
  CHECK(small.tie_word_embeddings);
  CHECK(small.head_dim == 64);
  CHECK(small.n_head_kv == 2);
}

TEST_CASE("hf_config: load from a directory") {
  const TempDir tmp("cfg");
  const fs::path dir = tmp.path;
  fs::copy_file(kConfigDir + "qwen2.5-0.5b-instruct.json", dir / "config.json");
  const HfConfig c = load_hf_config(dir.string());
  CHECK(c.source == (dir / "config.json").string());
  CHECK(c.arch == ModelArch::kQwen2);
  fs::remove(dir / "config.json");
  expect_error([&] { load_hf_config(dir.string()); }, ErrorCode::kNotFound,
               {(dir / "config.json").string()});
}

TEST_CASE("hf_config: defaults and per-architecture rules") {
  SECTION("defaults") {
    json j = tiny_llama();
    j.erase("num_key_value_heads");
    j.erase("hidden_act");
    const HfConfig c = parse(j);
    CHECK(c.n_head_kv == 8);
    CHECK(c.head_dim == 8);
    CHECK(c.rope.type == RopeType::kDefault);
    CHECK(c.rope.theta == 10000.0);
    CHECK_FALSE(c.tie_word_embeddings);
    CHECK_FALSE(c.bos_token_id.has_value());
    CHECK(c.eos_token_ids.empty());
    CHECK_FALSE(c.dtype.has_value());
    CHECK_FALSE(c.sliding_window.has_value());
  }
  SECTION("null means default") {
    json j = tiny_llama();
    j["num_key_value_heads"] = nullptr;
    j["head_dim"] = nullptr;
    j["rope_scaling"] = nullptr;
    j["eos_token_id"] = nullptr;
    const HfConfig c = parse(j);
    CHECK(c.n_head_kv == 8);
    CHECK(c.head_dim == 8);
    CHECK(c.rope.type == RopeType::kDefault);
    CHECK(c.eos_token_ids.empty());
  }
  SECTION("model_type when architectures is absent") {
    for (const auto& [type, arch] : std::vector<std::pair<std::string, ModelArch>>{
             {"llama", ModelArch::kLlama}, {"mistral", ModelArch::kMistral},
             {"qwen2", ModelArch::kQwen2}}) {
      json j = tiny_llama();
      j.erase("architectures");
      j["model_type"] = type;
      CHECK(parse(j).arch == arch);
    }
  }
  SECTION("Llama attention_bias covers q, k, v, o; mlp_bias the MLP") {
    json j = tiny_llama();
    j["attention_bias"] = true;
    HfConfig c = parse(j);
    CHECK((c.bias_q && c.bias_k && c.bias_v && c.bias_o));
    CHECK_FALSE(c.bias_mlp);
    j["attention_bias"] = false;
    j["mlp_bias"] = true;
    c = parse(j);
    CHECK_FALSE((c.bias_q || c.bias_k || c.bias_v || c.bias_o));
    CHECK(c.bias_mlp);
  }
  SECTION("Mistral ignores Llama's bias keys; an absent window means 4096") {
    json j = tiny_llama();
    j["architectures"] = {"MistralForCausalLM"};
    j["attention_bias"] = true;
    const HfConfig c = parse(j);
    CHECK_FALSE((c.bias_q || c.bias_k || c.bias_v || c.bias_o || c.bias_mlp));
    REQUIRE(c.sliding_window.has_value());
    CHECK(*c.sliding_window == 4096);
    CHECK(c.layer_sliding == all(4, true));
  }
  SECTION("Qwen2 sliding window: layers from max_window_layers on") {
    json j = tiny_llama();
    j["architectures"] = {"Qwen2ForCausalLM"};
    j["num_hidden_layers"] = 5;
    j["use_sliding_window"] = true;
    j["sliding_window"] = 256;
    j["max_window_layers"] = 2;
    HfConfig c = parse(j);
    REQUIRE(c.sliding_window.has_value());
    CHECK(*c.sliding_window == 256);
    CHECK(c.layer_sliding == std::vector<bool>{false, false, true, true, true});
    CHECK_FALSE(c.layer_is_sliding(1));
    CHECK(c.layer_is_sliding(2));

    j["max_window_layers"] = 5;  // every layer full attention: no window at all
    c = parse(j);
    CHECK_FALSE(c.sliding_window.has_value());
    CHECK(c.layer_sliding == all(5, false));

    j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention",
                        "full_attention", "full_attention"};
    c = parse(j);
    CHECK(c.sliding_window == 256);
    CHECK(c.layer_sliding == std::vector<bool>{true, false, true, false, false});

    j["layer_types"] = {"sliding_attention"};
    expect_error([&] { parse(j); }, ErrorCode::kInvalidModel, {"cfg.json", "'layer_types'"});

    j.erase("layer_types");
    j["use_sliding_window"] = false;
    CHECK_FALSE(parse(j).sliding_window.has_value());
  }
  SECTION("rope: legacy 'type', linear") {
    json j = tiny_llama();
    j["rope_theta"] = 20000.0;
    j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.5}};
    const HfConfig c = parse(j);
    CHECK(c.rope.type == RopeType::kLinear);
    CHECK(c.rope.factor == 2.5);
    CHECK(c.rope.theta == 20000.0);
  }
  SECTION("rope: rope_parameters carries rope_theta, which wins") {
    json j = tiny_llama();
    j["rope_theta"] = 10000.0;
    j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 32.0},
                            {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0}};
    const HfConfig c = parse(j);
    CHECK(c.rope.type == RopeType::kLlama3);
    CHECK(c.rope.theta == 500000.0);
    CHECK(c.rope.factor == 32.0);
    // original_max_position_embeddings defaults to max_position_embeddings, as in transformers.
    CHECK(c.rope.original_max_position_embeddings == 2048);
  }
  SECTION("rope: rope_parameters of type default") {
    json j = tiny_llama();
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
    const HfConfig c = parse(j);
    CHECK(c.rope.type == RopeType::kDefault);
    CHECK(c.rope.theta == 1e6);
  }
  SECTION("dtype spellings") {
    json j = tiny_llama();
    j["torch_dtype"] = "float16";
    CHECK(parse(j).dtype == DType::kF16);
    j["dtype"] = "float32";  // newer transformers' key wins
    CHECK(parse(j).dtype == DType::kF32);
  }
}

TEST_CASE("hf_config: unsupported input") {
  json j = tiny_llama();
  SECTION("unknown architecture, the message spelled out") {
    j["architectures"] = {"GPT2LMHeadModel"};
    const std::string msg = expect_error([&] { parse(j, "models/gpt2/config.json"); },
                                         ErrorCode::kUnsupported, {"models/gpt2/config.json"});
    CHECK(msg ==
          "models/gpt2/config.json: unknown architecture 'GPT2LMHeadModel' (supported: "
          "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM)");
  }
  SECTION("unknown model_type") {
    j.erase("architectures");
    j["model_type"] = "gpt2";
    expect_error([&] { parse(j); }, ErrorCode::kUnsupported, {"cfg.json", "'gpt2'"});
  }
  SECTION("hidden_act") {
    j["hidden_act"] = "gelu";
    expect_error([&] { parse(j); }, ErrorCode::kUnsupported, {"cfg.json", "hidden_act", "gelu"});
  }
  SECTION("rope types") {
    for (const std::string type : {"yarn", "dynamic", "longrope", "su"}) {
      j["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}};
      expect_error([&] { parse(j); }, ErrorCode::kUnsupported,
                   {"cfg.json", "'" + type + "'", "rope_scaling.rope_type"});
    }
    j.erase("rope_scaling");
    j["rope_parameters"] = {{"type", "yarn"}, {"factor", 4.0}};
    expect_error([&] { parse(j); }, ErrorCode::kUnsupported,
                 {"cfg.json", "'yarn'", "rope_parameters.type"});
  }
  SECTION("partial rotary and per-layer rope") {
    j["partial_rotary_factor"] = 0.5;
    expect_error([&] { parse(j); }, ErrorCode::kUnsupported, {"cfg.json", "partial_rotary_factor"});
    j.erase("partial_rotary_factor");
    j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}}};
    expect_error([&] { parse(j); }, ErrorCode::kUnsupported,
                 {"cfg.json", "rope_parameters.full_attention"});
  }
  SECTION("dtype") {
    j["torch_dtype"] = "float64";
    expect_error([&] { parse(j); }, ErrorCode::kUnsupported,
                 {"cfg.json", "torch_dtype", "float64"});
  }
}

TEST_CASE("hf_config: malformed configs name the file and key") {
  const std::string src = "/models/x/config.json";
  auto fails = [&](const json& j, const std::vector<std::string>& needles) {
    std::vector<std::string> n = needles;
    n.push_back(src);
    return expect_error([&] { parse(j, src); }, ErrorCode::kInvalidModel, n);
  };

  SECTION("each required key missing") {
    for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "max_position_embeddings", "rms_norm_eps"}) {
      INFO(key);
      json j = tiny_llama();
      j.erase(key);
      const std::string msg = fails(j, {});
      CHECK(msg == src + ": key '" + key + "' is missing");
      j[key] = nullptr;  // null is as good as absent for a required key
      fails(j, {std::string("'") + key + "' is missing"});
    }
  }
  SECTION("neither architectures nor model_type") {
    json j = tiny_llama();
    j.erase("architectures");
    j.erase("model_type");
    fails(j, {"'architectures'"});
  }
  SECTION("wrong types") {
    json j = tiny_llama();
    j["hidden_size"] = "64";
    fails(j, {"'hidden_size'", "a string", "expected an integer"});
    j = tiny_llama();
    j["num_hidden_layers"] = 4.5;
    fails(j, {"'num_hidden_layers'"});
    j = tiny_llama();
    j["rms_norm_eps"] = "1e-6";
    fails(j, {"'rms_norm_eps'", "expected a number"});
    j = tiny_llama();
    j["tie_word_embeddings"] = 1;
    fails(j, {"'tie_word_embeddings'", "true or false"});
    j = tiny_llama();
    j["architectures"] = "LlamaForCausalLM";
    fails(j, {"'architectures'"});
    j = tiny_llama();
    j["eos_token_id"] = {1, "two"};
    fails(j, {"'eos_token_id'"});
    j = tiny_llama();
    j["bos_token_id"] = -1;
    fails(j, {"'bos_token_id'"});
    j = tiny_llama();
    j["rope_scaling"] = "llama3";
    fails(j, {"'rope_scaling'", "expected an object"});
    j = tiny_llama();
    j["vocab_size"] = 1e12;  // a float, and far too large
    fails(j, {"'vocab_size'"});
    j = tiny_llama();
    j["vocab_size"] = int64_t(1) << 40;
    fails(j, {"'vocab_size'", "at most"});
  }
  SECTION("non-positive sizes") {
    for (const char* key : {"vocab_size", "hidden_size", "num_attention_heads",
                            "num_key_value_heads", "head_dim"}) {
      INFO(key);
      json j = tiny_llama();
      j[key] = 0;
      fails(j, {std::string("'") + key + "'", "positive"});
      j[key] = -8;
      fails(j, {std::string("'") + key + "'", "positive"});
    }
    json j = tiny_llama();
    j["rms_norm_eps"] = 0.0;
    fails(j, {"'rms_norm_eps'", "positive"});
    j = tiny_llama();
    j["rope_theta"] = -1.0;
    fails(j, {"'rope_theta'", "positive"});
  }
  SECTION("heads that do not divide") {
    json j = tiny_llama();
    j["num_key_value_heads"] = 3;
    fails(j, {"'num_attention_heads' (8)", "'num_key_value_heads' (3)"});
    j = tiny_llama();
    j["num_attention_heads"] = 6;
    j["num_key_value_heads"] = 6;
    fails(j, {"'hidden_size' (64)", "'num_attention_heads' (6)"});
    j["head_dim"] = 10;  // an explicit head_dim need not divide hidden_size
    CHECK(parse(j).head_dim == 10);
    j["head_dim"] = 9;
    fails(j, {"'head_dim'", "even"});
  }
  SECTION("rope parameters") {
    json j = tiny_llama();
    j["rope_scaling"] = {{"rope_type", "linear"}};
    fails(j, {"'rope_scaling.factor' is missing"});
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 0}};
    fails(j, {"'rope_scaling.factor'", "positive"});
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}};
    fails(j, {"'rope_scaling.high_freq_factor' is missing"});
    j["rope_scaling"]["high_freq_factor"] = 1.0;
    fails(j, {"'rope_scaling.high_freq_factor'", "'rope_scaling.low_freq_factor'"});
    j["rope_scaling"]["high_freq_factor"] = 4.0;
    j["rope_scaling"]["original_max_position_embeddings"] = "8192";
    fails(j, {"'rope_scaling.original_max_position_embeddings'"});
    j["rope_scaling"] = {{"rope_type", 3}};
    fails(j, {"'rope_scaling.rope_type'"});
  }
  SECTION("sliding window values") {
    json j = tiny_llama();
    j["architectures"] = {"MistralForCausalLM"};
    j["sliding_window"] = 0;
    fails(j, {"'sliding_window'", "positive"});
    j["architectures"] = {"Qwen2ForCausalLM"};
    j["sliding_window"] = 128;
    j["use_sliding_window"] = true;
    j["max_window_layers"] = -1;
    fails(j, {"'max_window_layers'"});
  }
  SECTION("not JSON, not an object") {
    expect_error([&] { parse_hf_config("{\"vocab_size\": ", src); }, ErrorCode::kInvalidModel,
                 {src, "not valid JSON"});
    expect_error([&] { parse_hf_config("[1]", src); }, ErrorCode::kInvalidModel,
                 {src, "expected an object"});
    expect_error([&] { parse_hf_config("", src); }, ErrorCode::kInvalidModel,
                 {src, "not valid JSON"});
  }
}

TEST_CASE("a pre-quantised checkpoint is refused with the method named", "[loaders]") {
  const std::string text = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10,
    "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
    "num_attention_heads": 2, "max_position_embeddings": 32, "rms_norm_eps": 1e-5,
    "quantization_config": {"quant_method": "gptq", "bits": 4}})";
  try {
    sampan::parse_hf_config(text, "q/config.json");
    FAIL("expected an error");
  } catch (const sampan::Error& e) {
    CHECK(e.code() == sampan::ErrorCode::kUnsupported);
    CHECK(std::string(e.what()) ==
          "q/config.json: key 'quantization_config' (quant_method 'gptq'): pre-quantised "
          "checkpoints are not supported yet; load the unquantised model");
  }
}
