#include "server/serve_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string_view>
#include <variant>

#include "engine/core/error.h"
#include "engine/runtime/device_select.h"
#include "server/tool_parser.h"

namespace sampan::server {

namespace {

namespace fs = std::filesystem;

// Which C++ field a key writes, typed so one table drives flags, YAML and the flag-over-file copy.
using StrField = std::string& (*)(ServeConfig&);
using IntField = int& (*)(ServeConfig&);
using I64Field = int64_t& (*)(ServeConfig&);
using DblField = double& (*)(ServeConfig&);
using BoolField = bool& (*)(ServeConfig&);
using ListField = std::vector<std::string>& (*)(ServeConfig&);
using Field = std::variant<StrField, IntField, I64Field, DblField, BoolField, ListField>;

enum class Parse {
  kPlain,    // the field's own type
  kSize,     // int64 bytes with an optional K/M/G/T suffix
  kNegated,  // a bool flag that clears the field when given (--no-prefix-cache)
  kFlag,     // a bool flag that sets the field when given (--hadamard)
};

struct Key {
  const char* name;   // flag name without "--"; the YAML key with '-' or '_'
  const char* group;  // the YAML group it may also appear under
  Field field;
  Parse parse;
  const char* help;
  // Another flag name for the same setting (flags only, not YAML): --port, what vLLM and
  // llama.cpp users type, for --http-port.
  const char* alias = nullptr;
};

// The one list of settings. configs/serve.yaml documents the same keys in the same groups.
const std::vector<Key>& keys() {
  static const std::vector<Key> k = {
      {"model", "engine", +[](ServeConfig& c) -> std::string& { return c.model; }, Parse::kPlain,
       "model directory (config.json, safetensors, tokenizer.json), .gguf file or classic model; required"},
      {"served-model-name", "engine", +[](ServeConfig& c) -> std::string& { return c.served_model_name; },
       Parse::kPlain, "model name clients use (default: the model directory's name)"},
      {"threads", "engine", +[](ServeConfig& c) -> int& { return c.engine.threads; }, Parse::kPlain,
       "compute threads (0: one per core)"},
      {"max-model-len", "engine", +[](ServeConfig& c) -> int64_t& { return c.engine.max_model_len; },
       Parse::kPlain, "tokens per sequence, prompt + generated (0: the model's, capped at 8192)"},
      {"block-size", "engine", +[](ServeConfig& c) -> int64_t& { return c.engine.block_size; }, Parse::kPlain,
       "tokens per KV cache block"},
      {"num-kv-blocks", "engine", +[](ServeConfig& c) -> int64_t& { return c.engine.num_kv_blocks; },
       Parse::kPlain, "exactly this many KV blocks (0: size the cache by --kv-cache-bytes)"},
      {"kv-cache-bytes", "engine", +[](ServeConfig& c) -> int64_t& { return c.engine.kv_cache_bytes; },
       Parse::kSize, "KV cache size when --num-kv-blocks is 0 (e.g. 512M, 2G)"},
      {"quantization", "engine", +[](ServeConfig& c) -> std::string& { return c.quantization; },
       Parse::kPlain, "quantize float weights on load: none|fp8|int4"},
      {"group-size", "engine", +[](ServeConfig& c) -> int64_t& { return c.engine.build.quantization.group_size; },
       Parse::kPlain, "int4 group size: 32|64|128"},
      {"asymmetric", "engine", +[](ServeConfig& c) -> bool& { return c.asymmetric; }, Parse::kFlag,
       "int4 with a per-group zero point"},
      {"scale-dtype", "engine", +[](ServeConfig& c) -> std::string& { return c.scale_dtype; },
       Parse::kPlain, "int4 scale type: f16|bf16"},
      {"hadamard", "engine", +[](ServeConfig& c) -> bool& { return c.engine.build.hadamard.enabled; },
       Parse::kFlag, "rotate the weights on load (QuaRot-style Hadamard), before quantization"},
      {"hadamard-seed", "engine", +[](ServeConfig& c) -> int64_t& { return c.hadamard_seed; },
       Parse::kPlain, "seed of the rotation's random signs"},
      {"kv-cache-dtype", "engine", +[](ServeConfig& c) -> std::string& { return c.kv_cache_dtype; },
       Parse::kPlain, "KV cache format: f32|bf16|fp8|int8|int4"},
      {"kv-hadamard", "engine", +[](ServeConfig& c) -> bool& { return c.engine.build.kv_hadamard; },
       Parse::kFlag, "Walsh-Hadamard on Q/K heads so K is cached in a rotated basis"},
      {"precision", "engine", +[](ServeConfig& c) -> std::string& { return c.precision; },
       Parse::kPlain,
       "classic models: f32, or bf16 (convs and matmuls by constant weights on bf16-rounded "
       "inputs, f32 sums; as `infer --precision bf16`)"},
      {"device", "engine", +[](ServeConfig& c) -> std::string& { return c.device; }, Parse::kPlain,
       "where the model runs: cpu|cuda|cuda:N"},
      {"no-cuda-graphs", "engine", +[](ServeConfig& c) -> bool& { return c.engine.cuda_graphs; },
       Parse::kNegated, "on a GPU, run decode steps node by node instead of replaying CUDA graphs"},
      {"no-device-sampling", "engine", +[](ServeConfig& c) -> bool& { return c.engine.device_sampling; },
       Parse::kNegated, "on a GPU, copy every logit row to the host and sample there"},
      {"lora", "engine", +[](ServeConfig& c) -> std::vector<std::string>& { return c.lora; },
       Parse::kPlain, "LoRA adapter NAME=DIR served as model NAME (DIR alone: named after the directory; repeatable)"},
      {"no-prefix-cache", "engine", +[](ServeConfig& c) -> bool& { return c.engine.prefix_cache; },
       Parse::kNegated, "do not share cached prompt prefixes between requests"},
      {"host", "server", +[](ServeConfig& c) -> std::string& { return c.host; }, Parse::kPlain,
       "address to listen on"},
      {"http-port", "server", +[](ServeConfig& c) -> int& { return c.http_port; }, Parse::kPlain,
       "HTTP port (0: pick a free one)", "port"},
      {"grpc-port", "server", +[](ServeConfig& c) -> int& { return c.grpc_port; }, Parse::kPlain,
       "gRPC port (0: pick a free one, -1: no gRPC)"},
      {"http-threads", "server", +[](ServeConfig& c) -> int& { return c.http_threads; }, Parse::kPlain,
       "I/O threads of the HTTP server"},
      {"max-connections", "server", +[](ServeConfig& c) -> int64_t& { return c.max_connections; },
       Parse::kPlain, "open connections beyond which new ones are closed"},
      {"idle-timeout", "server", +[](ServeConfig& c) -> double& { return c.idle_timeout_s; }, Parse::kPlain,
       "seconds a keep-alive connection may wait for its next request"},
      {"shutdown-grace", "server", +[](ServeConfig& c) -> double& { return c.shutdown_grace_s; },
       Parse::kPlain, "seconds SIGTERM waits for in-flight requests"},
      {"log-format", "server", +[](ServeConfig& c) -> std::string& { return c.log_format; }, Parse::kPlain,
       "text or json"},
      {"max-running", "limits", +[](ServeConfig& c) -> int& { return c.engine.max_running; }, Parse::kPlain,
       "sequences in one engine step"},
      {"max-batched-tokens", "limits", +[](ServeConfig& c) -> int64_t& { return c.engine.max_batched_tokens; },
       Parse::kPlain, "tokens in one engine step (chunked-prefill budget)"},
      {"max-waiting", "limits", +[](ServeConfig& c) -> int& { return c.engine.max_waiting; }, Parse::kPlain,
       "queued requests beyond which new ones get 429 / RESOURCE_EXHAUSTED"},
      {"max-batch-size", "limits", +[](ServeConfig& c) -> int& { return c.max_batch_size; }, Parse::kPlain,
       "classic models: merge concurrent requests along the first dimension up to this many rows "
       "(1: off)"},
      {"batch-delay-ms", "limits", +[](ServeConfig& c) -> double& { return c.batch_delay_ms; }, Parse::kPlain,
       "classic models: how long a request waits for others to merge with (milliseconds)"},
      {"request-timeout", "limits", +[](ServeConfig& c) -> double& { return c.engine.request_timeout_s; },
       Parse::kPlain, "seconds a request may take (0: no limit)"},
      {"max-body-bytes", "limits", +[](ServeConfig& c) -> int64_t& { return c.max_body_bytes; }, Parse::kSize,
       "larger request bodies get 413 (e.g. 4M)"},
      {"default-max-tokens", "limits", +[](ServeConfig& c) -> int64_t& { return c.default_max_tokens; },
       Parse::kPlain, "max_tokens of requests that omit it"},
      {"tool-call-parser", "server",
       +[](ServeConfig& c) -> std::string& { return c.tool_call_parser; }, Parse::kPlain,
       "tool calls in chat replies (tool_choice auto): auto (the chat template's format), none, "
       "hermes, llama3_json or mistral"},
      {"tls-cert", "tls", +[](ServeConfig& c) -> std::string& { return c.tls_cert; }, Parse::kPlain,
       "PEM certificate chain (with --tls-key: HTTPS and gRPC over TLS)"},
      {"tls-key", "tls", +[](ServeConfig& c) -> std::string& { return c.tls_key; }, Parse::kPlain,
       "PEM private key"},
      {"api-key", "auth", +[](ServeConfig& c) -> std::vector<std::string>& { return c.api_keys; },
       Parse::kPlain, "accepted API key (repeatable; default: env SAMPAN_API_KEY)"},
  };
  return k;
}

constexpr const char* kGroups[] = {"server", "engine", "limits", "tls", "auth"};
constexpr const char* kApiKeyEnv = "SAMPAN_API_KEY";

const Key* find_key(const std::string& name) {
  for (const Key& k : keys()) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "1048576", "512M", "2G", "1.5G", "64KiB", "4mb": K/M/G/T are powers of 1024. Returns false
// with `why` on malformed or overflowing input.
bool parse_size(std::string_view text, int64_t* out, std::string* why) {
  const std::string s = trim(text);
  size_t i = 0;
  uint64_t whole = 0;
  const uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    whole = whole * 10 + static_cast<uint64_t>(s[i] - '0');
    if (whole > kMax) {
      *why = "too large";
      return false;
    }
    ++i;
  }
  if (i == 0) {
    *why = "expected a byte count like 1048576, 512M or 2G";
    return false;
  }
  uint64_t frac = 0, frac_scale = 1;
  if (i < s.size() && s[i] == '.') {
    ++i;
    const size_t start = i;
    for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) {
      if (frac_scale < 1000000000ULL) {  // 9 digits are plenty: the rest cannot change whole bytes much
        frac = frac * 10 + static_cast<uint64_t>(s[i] - '0');
        frac_scale *= 10;
      }
    }
    if (i == start) {
      *why = "expected digits after '.'";
      return false;
    }
  }
  const std::string suffix = lower(s.substr(i));
  uint64_t mult = 1;
  std::string unit = suffix;
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  if (!unit.empty() && unit.back() == 'i' && unit.size() == 2) unit.pop_back();
  if (unit.empty()) {
    mult = 1;
  } else if (unit == "k") {
    mult = 1ULL << 10;
  } else if (unit == "m") {
    mult = 1ULL << 20;
  } else if (unit == "g") {
    mult = 1ULL << 30;
  } else if (unit == "t") {
    mult = 1ULL << 40;
  } else {
    *why = fmt::format("unknown size suffix '{}' (use K, M, G or T)", s.substr(i));
    return false;
  }
  if (frac_scale > 1 && mult == 1) {
    *why = "a plain byte count must be a whole number";
    return false;
  }
  if (whole > kMax / mult) {
    *why = "too large";
    return false;
  }
  const uint64_t bytes = whole * mult + frac * mult / frac_scale;
  if (bytes > kMax) {
    *why = "too large";
    return false;
  }
  *out = static_cast<int64_t>(bytes);
  return true;
}

template <typename T>
bool parse_integer(const std::string& s, T* out) {
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  auto [p, ec] = std::from_chars(b, e, *out);
  return ec == std::errc() && p == e && b != e;
}

bool parse_double(const std::string& s, double* out) {
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+') ++b;
  auto [p, ec] = std::from_chars(b, e, *out);
  return ec == std::errc() && p == e && b != e && std::isfinite(*out);
}

bool parse_bool(const std::string& s, bool* out) {
  const std::string l = lower(s);
  if (l == "true" || l == "yes" || l == "on") {
    *out = true;
    return true;
  }
  if (l == "false" || l == "no" || l == "off") {
    *out = false;
    return true;
  }
  return false;
}

// Where each value came from, for messages: "FILE:LINE" for YAML, "--flag", or the env name.
struct Origins {
  std::map<std::string, std::string> where;

  // "serve.yaml:7: http-port: ...", "--http-port: ...", "http-port: ..." (a default).
  std::string prefix(const std::string& key) const {
    auto it = where.find(key);
    if (it == where.end()) return key + ": ";
    if (it->second.rfind("--", 0) == 0 || it->second == kApiKeyEnv) return it->second + ": ";
    return it->second + ": " + key + ": ";
  }
  std::string source(const std::string& key) const {
    auto it = where.find(key);
    return it == where.end() ? "default" : it->second;
  }
};

class YamlLoader {
 public:
  YamlLoader(std::string path, ServeConfig& cfg, Origins& origins)
      : path_(std::move(path)), cfg_(cfg), origins_(origins) {}

  void load() {
    std::ifstream in(path_, std::ios::binary);
    SAMPAN_CHECK(in.good() && !fs::is_directory(path_), ErrorCode::kInvalidArgument,
                 "--config: cannot read '{}'", path_);
    std::stringstream ss;
    ss << in.rdbuf();
    YAML::Node root;
    try {
      root = YAML::Load(ss.str());
    } catch (const YAML::Exception& e) {
      fail(ErrorCode::kInvalidArgument, "{}:{}:{}: invalid YAML: {}", path_, e.mark.line + 1, e.mark.column + 1,
           e.msg);
    }
    if (root.IsNull()) return;  // an empty file sets nothing
    SAMPAN_CHECK(root.IsMap(), ErrorCode::kInvalidArgument, "{}: the top level must be a mapping of keys",
                 at(root));
    for (const auto& kv : root) entry(kv.first, kv.second, nullptr);
  }

 private:
  std::string at(const YAML::Node& n) const {
    const YAML::Mark m = n.Mark();
    return m.is_null() ? path_ : fmt::format("{}:{}", path_, m.line + 1);
  }

  void entry(const YAML::Node& key_node, const YAML::Node& value, const char* group) {
    SAMPAN_CHECK(key_node.IsScalar(), ErrorCode::kInvalidArgument, "{}: keys must be plain names", at(key_node));
    std::string name = key_node.Scalar();
    for (char& c : name) c = c == '_' ? '-' : c;
    const std::string shown = group ? fmt::format("{}.{}", group, key_node.Scalar()) : key_node.Scalar();
    if (!group) {
      for (const char* g : kGroups) {
        if (name != g) continue;
        if (value.IsNull()) return;  // an empty group
        SAMPAN_CHECK(value.IsMap(), ErrorCode::kInvalidArgument, "{}: {}: a group: expected a mapping of keys",
                     at(key_node), name);
        for (const auto& kv : value) entry(kv.first, kv.second, g);
        return;
      }
    }
    const Key* k = find_key(name);
    // Inside a group the group's prefix may be left out: tls: {cert: ...} is tls-cert.
    if (!k && group) k = find_key(fmt::format("{}-{}", group, name));
    SAMPAN_CHECK(k, ErrorCode::kInvalidArgument, "{}: unknown key '{}'", at(key_node), shown);
    SAMPAN_CHECK(!group || std::string_view(k->group) == group, ErrorCode::kInvalidArgument,
                 "{}: {}: belongs under '{}:', not '{}:'", at(key_node), k->name, k->group, group);
    auto [it, fresh] = seen_.emplace(k->name, key_node.Mark().line + 1);
    SAMPAN_CHECK(fresh, ErrorCode::kInvalidArgument, "{}: {}: set twice (first at line {})", at(key_node), k->name,
                 it->second);
    const std::string where = at(key_node);
    assign(*k, value, where);
    origins_.where[k->name] = where;
  }

  // Converts one YAML value into the key's field; every mismatch names file:line and the key.
  void assign(const Key& k, const YAML::Node& v, const std::string& where) {
    auto bad = [&](const char* expected) {
      const std::string got = v.IsSequence() ? "a list"
                              : v.IsMap()    ? "a mapping"
                              : v.IsNull()   ? "nothing"
                                             : fmt::format("'{}'", v.Scalar());
      fail(ErrorCode::kInvalidArgument, "{}: {}: expected {}, got {}", where, k.name, expected, got);
    };
    std::visit(
        [&](auto field) {
          using F = decltype(field);
          auto& dst = field(cfg_);
          if constexpr (std::is_same_v<F, StrField>) {
            if (v.IsNull()) {
              dst.clear();
            } else {
              if (!v.IsScalar()) bad("a string");
              dst = v.Scalar();
            }
          } else if constexpr (std::is_same_v<F, ListField>) {
            dst.clear();
            if (v.IsScalar()) {
              dst.push_back(v.Scalar());
            } else if (v.IsSequence()) {
              for (const auto& item : v) {
                if (!item.IsScalar()) bad("a string or a list of strings");
                dst.push_back(item.Scalar());
              }
            } else if (!v.IsNull()) {
              bad("a string or a list of strings");
            }
          } else if constexpr (std::is_same_v<F, BoolField>) {
            bool b = false;
            if (!v.IsScalar() || !parse_bool(v.Scalar(), &b)) bad("true or false");
            dst = k.parse == Parse::kNegated ? !b : b;
          } else if constexpr (std::is_same_v<F, DblField>) {
            if (!v.IsScalar() || !parse_double(trim(v.Scalar()), &dst)) bad("a number");
          } else {  // int or int64
            if (!v.IsScalar()) bad(k.parse == Parse::kSize ? "a size like 512M" : "an integer");
            if constexpr (std::is_same_v<F, I64Field>) {
              if (k.parse == Parse::kSize) {
                std::string why;
                if (!parse_size(v.Scalar(), &dst, &why)) {
                  fail(ErrorCode::kInvalidArgument, "{}: {}: bad size '{}': {}", where, k.name, v.Scalar(), why);
                }
                return;
              }
            }
            if (!parse_integer(trim(v.Scalar()), &dst)) bad("an integer");
          }
        },
        k.field);
  }

  std::string path_;
  ServeConfig& cfg_;
  Origins& origins_;
  std::map<std::string, int> seen_;  // key -> line, to refuse a key set twice
};

void check(bool ok, const Origins& o, const std::string& key, const std::string& msg) {
  if (!ok) fail(ErrorCode::kInvalidArgument, "{}{}", o.prefix(key), msg);
}

template <typename T>
void check_range(T v, T lo, T hi, const Origins& o, const std::string& key) {
  check(v >= lo && v <= hi, o, key,
        hi == std::numeric_limits<T>::max() ? fmt::format("{} is out of range (must be >= {})", v, lo)
                                            : fmt::format("{} is out of range [{}, {}]", v, lo, hi));
}

void check_readable(const std::string& path, const Origins& o, const std::string& key) {
  std::ifstream f(path);
  check(f.good() && !fs::is_directory(path), o, key, fmt::format("cannot read '{}'", path));
}

std::string default_served_name(const std::string& model) {
  std::error_code ec;
  // A model file (FILE.onnx) is served under its stem, a directory under its name.
  if (fs::is_regular_file(model, ec)) return fs::path(model).stem().string();
  fs::path p = fs::path(model).lexically_normal();
  if (!p.has_filename() || p.filename() == "." || p.filename() == "..") {
    p = fs::absolute(p).lexically_normal();
    if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  }
  return p.filename().string();
}

void validate(ServeConfig& c, const Origins& o) {
  check(!c.model.empty(), o, "model", "required: give --model DIR or 'model:' in the config file");
  std::error_code ec;
  check(fs::is_directory(c.model, ec) || fs::is_regular_file(c.model, ec), o, "model",
        fmt::format("'{}' is not a directory or a model file", c.model));
  if (c.served_model_name.empty()) c.served_model_name = default_served_name(c.model);
  check(!c.host.empty(), o, "host", "must not be empty");
  check_range(c.http_port, 0, 65535, o, "http-port");
  check_range(c.grpc_port, -1, 65535, o, "grpc-port");
  check(c.http_port == 0 || c.http_port != c.grpc_port, o, "grpc-port",
        fmt::format("{} is also the HTTP port", c.grpc_port));
  check_range(c.http_threads, 1, 1024, o, "http-threads");
  check_range<int64_t>(c.max_body_bytes, 1, std::numeric_limits<int64_t>::max(), o, "max-body-bytes");
  check_range<int64_t>(c.max_connections, 1, std::numeric_limits<int64_t>::max(), o, "max-connections");
  check(c.idle_timeout_s > 0, o, "idle-timeout", fmt::format("{} must be > 0 seconds", c.idle_timeout_s));
  check(c.shutdown_grace_s >= 0, o, "shutdown-grace", fmt::format("{} must be >= 0 seconds", c.shutdown_grace_s));
  check(c.log_format == "text" || c.log_format == "json", o, "log-format",
        fmt::format("'{}' is not one of text, json", c.log_format));
  check(c.tool_call_parser == "auto" || tool_call_format_from_name(c.tool_call_parser), o,
        "tool-call-parser",
        fmt::format("'{}' is not one of auto, none, hermes, llama3_json, mistral",
                    c.tool_call_parser));
  check_range<int64_t>(c.default_max_tokens, 1, std::numeric_limits<int64_t>::max(), o, "default-max-tokens");

  const runtime::EngineOptions& e = c.engine;
  check_range(e.threads, 0, 4096, o, "threads");
  check_range<int64_t>(e.max_model_len, 0, std::numeric_limits<int64_t>::max(), o, "max-model-len");
  check_range<int64_t>(e.block_size, 1, 1 << 16, o, "block-size");
  check_range<int64_t>(e.num_kv_blocks, 0, std::numeric_limits<int64_t>::max(), o, "num-kv-blocks");
  check_range<int64_t>(e.kv_cache_bytes, 1, std::numeric_limits<int64_t>::max(), o, "kv-cache-bytes");
  check_range(e.max_running, 1, std::numeric_limits<int>::max(), o, "max-running");
  check_range<int64_t>(e.max_batched_tokens, 1, std::numeric_limits<int64_t>::max(), o, "max-batched-tokens");
  check_range(e.max_waiting, 1, std::numeric_limits<int>::max(), o, "max-waiting");
  check_range(c.max_batch_size, 1, 1 << 16, o, "max-batch-size");
  check(c.batch_delay_ms >= 0 && c.batch_delay_ms <= 10000, o, "batch-delay-ms",
        fmt::format("{} is out of range [0, 10000] milliseconds", c.batch_delay_ms));
  check(e.request_timeout_s >= 0, o, "request-timeout",
        fmt::format("{} must be >= 0 seconds (0: no limit)", e.request_timeout_s));
  models::ModelBuildOptions& b = c.engine.build;
  check(models::parse_weight_format(c.quantization.c_str(), &b.quantization.format), o, "quantization",
        fmt::format("'{}' is not one of none, fp8, int4", c.quantization));
  const int64_t g = b.quantization.group_size;
  check(int4_group_size_ok(g), o, "group-size", fmt::format("{} is not one of 32, 64, 128", g));
  b.quantization.symmetric = !c.asymmetric;
  check(c.scale_dtype == "f16" || c.scale_dtype == "bf16", o, "scale-dtype",
        fmt::format("'{}' is not one of f16, bf16", c.scale_dtype));
  b.quantization.scale_dtype = c.scale_dtype == "bf16" ? DType::kBF16 : DType::kF16;
  check(c.hadamard_seed >= 0, o, "hadamard-seed", fmt::format("{} must be >= 0", c.hadamard_seed));
  b.hadamard.seed = static_cast<uint64_t>(c.hadamard_seed);
  check(parse_kv_dtype(c.kv_cache_dtype.c_str(), &b.kv_cache_dtype), o, "kv-cache-dtype",
        fmt::format("'{}' is not one of f32, bf16, fp8, int8, int4", c.kv_cache_dtype));
  check(c.precision == "f32" || c.precision == "bf16", o, "precision",
        fmt::format("'{}' is not one of f32, bf16", c.precision));
  // Only the spelling here: whether the GPU exists is the engine's check at load, one line.
  try {
    c.engine.device = runtime::parse_device(c.device);
  } catch (const Error&) {
    check(false, o, "device", fmt::format("'{}' is not one of cpu, cuda, cuda:N", c.device));
  }

  check(c.tls_key.empty() || !c.tls_cert.empty(), o, "tls-cert",
        fmt::format("required when tls-key is set (by {})", o.source("tls-key")));
  check(c.tls_cert.empty() || !c.tls_key.empty(), o, "tls-key",
        fmt::format("required when tls-cert is set (by {})", o.source("tls-cert")));
  if (!c.tls_cert.empty()) check_readable(c.tls_cert, o, "tls-cert");
  if (!c.tls_key.empty()) check_readable(c.tls_key, o, "tls-key");
  c.lora_adapters.clear();
  for (const std::string& spec : c.lora) {
    // NAME=DIR, or DIR alone: served under the directory's name.
    const size_t eq = spec.find('=');
    std::string name, dir;
    if (eq == std::string::npos) {
      dir = spec;
      std::string base = dir;
      while (base.size() > 1 && base.back() == '/') base.pop_back();
      name = base.substr(base.find_last_of('/') == std::string::npos ? 0 : base.find_last_of('/') + 1);
    } else {
      name = spec.substr(0, eq);
      dir = spec.substr(eq + 1);
    }
    check(!name.empty() && !dir.empty(), o, "lora",
          fmt::format("'{}' is not NAME=DIR (or a DIR with a name)", spec));
    check(name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:/-") ==
              std::string::npos,
          o, "lora", fmt::format("adapter name '{}' may hold only letters, digits and ._:/-", name));
    for (const auto& [n, dir] : c.lora_adapters) {
      check(n != name, o, "lora", fmt::format("adapter name '{}' is given twice", name));
    }
    c.lora_adapters.emplace_back(std::move(name), std::move(dir));
  }
  for (const std::string& k : c.api_keys) {
    check(!trim(k).empty(), o, "api-key", "an API key must not be empty");
    check(k.find_first_of(" \t\r\n") == std::string::npos, o, "api-key", "an API key must not contain whitespace");
  }
}

}  // namespace

void add_serve_flags(CLI::App& cmd, ServeConfig& flags) {
  cmd.add_option("--config", flags.config_file, "YAML settings file (see configs/serve.yaml); flags override it");
  for (const Key& k : keys()) {
    std::string flag = std::string("--") + k.name;
    if (k.alias != nullptr) flag += std::string(",--") + k.alias;  // CLI11: one option, two names
    if (k.parse == Parse::kNegated) {
      BoolField f = std::get<BoolField>(k.field);
      cmd.add_flag_callback(flag, [&flags, f] { f(flags) = false; }, k.help);
    } else if (k.parse == Parse::kFlag) {
      BoolField f = std::get<BoolField>(k.field);
      cmd.add_flag_callback(flag, [&flags, f] { f(flags) = true; }, k.help);
    } else if (k.parse == Parse::kSize) {
      I64Field f = std::get<I64Field>(k.field);
      cmd.add_option_function<std::string>(
             flag,
             [&flags, f, flag](const std::string& text) {
               std::string why;
               if (!parse_size(text, &f(flags), &why)) {
                 throw CLI::ValidationError(flag, fmt::format("bad size '{}': {}", text, why));
               }
             },
             k.help)
          ->type_name("SIZE");
    } else {
      std::visit([&](auto field) { cmd.add_option(flag, field(flags), k.help); }, k.field);
    }
  }
}

ServeConfig resolve_serve_config(const CLI::App& cmd, const ServeConfig& flags) {
  ServeConfig cfg;
  Origins origins;
  if (!flags.config_file.empty()) YamlLoader(flags.config_file, cfg, origins).load();

  ServeConfig given = flags;  // a mutable copy: the field accessors take non-const references
  bool api_key_flag = false;
  for (const Key& k : keys()) {
    const std::string flag = std::string("--") + k.name;
    const CLI::Option* opt = cmd.get_option_no_throw(flag);
    if (opt == nullptr || opt->count() == 0) continue;
    std::visit([&](auto field) { field(cfg) = field(given); }, k.field);
    origins.where[k.name] = flag;
    if (std::string_view(k.name) == "api-key") api_key_flag = true;
  }
  // The environment sits between the file and the flags: a deployment's secret store sets it,
  // an operator's explicit --api-key still wins.
  if (!api_key_flag) {
    const char* env = std::getenv(kApiKeyEnv);
    if (env != nullptr && *env != '\0') {
      cfg.api_keys = {env};
      origins.where["api-key"] = kApiKeyEnv;
    }
  }
  cfg.config_file = flags.config_file;
  validate(cfg, origins);
  return cfg;
}

}  // namespace sampan::server
