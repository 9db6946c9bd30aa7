// `sampan serve` settings: defaults, the YAML file, flags over the file, every key both ways,
// and the errors (each must name the key, and file:line for YAML).
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "server/serve_config.h"

using sampan::server::ServeConfig;
namespace fs = std::filesystem;

namespace {

// A scratch directory with a (fake) model directory and files for TLS; removed at the end.
struct Scratch {
  fs::path dir;
  std::string model;
  std::string cert;
  std::string key;

  Scratch() {
    dir = fs::temp_directory_path() /
          ("sampan_cfg_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir / "my-model");
    model = (dir / "my-model").string();
    cert = (dir / "cert.pem").string();
    key = (dir / "key.pem").string();
    std::ofstream(cert) << "-----BEGIN CERTIFICATE-----\n";
    std::ofstream(key) << "-----BEGIN PRIVATE KEY-----\n";
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = (dir / name).string();
    std::ofstream(p) << text;
    return p;
  }
};

// SAMPAN_API_KEY is read by resolve; tests that do not set it must not see a developer's value.
struct EnvGuard {
  EnvGuard() { ::unsetenv("SAMPAN_API_KEY"); }
  ~EnvGuard() { ::unsetenv("SAMPAN_API_KEY"); }
};

ServeConfig resolve(std::vector<std::string> args) {
  CLI::App app{"test"};
  ServeConfig flags;
  sampan::server::add_serve_flags(app, flags);
  std::vector<char*> argv;
  std::string prog = "serve";
  argv.push_back(prog.data());
  for (auto& a : args) argv.push_back(a.data());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return sampan::server::resolve_serve_config(app, flags);
}

// The message of the sampan::Error that resolve() throws (fails the test if none).
std::string error_of(std::vector<std::string> args) {
  try {
    resolve(std::move(args));
  } catch (const sampan::Error& e) {
    CHECK(e.code() == sampan::ErrorCode::kInvalidArgument);
    return e.what();
  } catch (const std::exception& e) {
    FAIL("unexpected exception type: " << e.what());
  }
  FAIL("no error");
  return {};
}

using Catch::Matchers::Contains;

}  // namespace

TEST_CASE("defaults: only --model", "[serve_config]") {
  EnvGuard env;
  Scratch s;
  const ServeConfig c = resolve({"--model", s.model});
  const ServeConfig d;  // the documented defaults in serve_config.h
  CHECK(c.model == s.model);
  CHECK(c.served_model_name == "my-model");
  CHECK(c.host == d.host);
  CHECK(c.http_port == 8000);
  CHECK(c.grpc_port == 8001);
  CHECK(c.http_threads == 1);
  CHECK(c.api_keys.empty());
  CHECK(c.max_body_bytes == 4 << 20);
  CHECK(c.max_connections == 4096);
  CHECK(c.idle_timeout_s == 60);
  CHECK(c.tls_cert.empty());
  CHECK(c.tls_key.empty());
  CHECK(c.shutdown_grace_s == 30);
  CHECK(c.log_format == "text");
  CHECK(c.default_max_tokens == 256);
  CHECK(c.engine.threads == d.engine.threads);
  CHECK(c.engine.max_model_len == d.engine.max_model_len);
  CHECK(c.engine.block_size == 16);
  CHECK(c.engine.num_kv_blocks == 0);
  CHECK(c.engine.kv_cache_bytes == (1LL << 30));
  CHECK(c.engine.max_running == 64);
  CHECK(c.engine.max_batched_tokens == 512);
  CHECK(c.engine.max_waiting == 256);
  CHECK(c.engine.prefix_cache);
  CHECK(c.engine.request_timeout_s == 0);
  CHECK(c.config_file.empty());
  // A trailing slash still names the directory.
  CHECK(resolve({"--model", s.model + "/"}).served_model_name == "my-model");
}

namespace {

void check_all_changed(const ServeConfig& c, const Scratch& s) {
  CHECK(c.model == s.model);
  CHECK(c.served_model_name == "tiny");
  CHECK(c.host == "127.0.0.1");
  CHECK(c.http_port == 9000);
  CHECK(c.grpc_port == -1);
  CHECK(c.http_threads == 2);
  CHECK(c.max_connections == 100);
  CHECK(c.idle_timeout_s == 2.5);
  CHECK(c.shutdown_grace_s == 0);
  CHECK(c.log_format == "json");
  CHECK(c.engine.threads == 2);
  CHECK(c.engine.max_model_len == 1024);
  CHECK(c.engine.block_size == 32);
  CHECK(c.engine.num_kv_blocks == 77);
  CHECK(c.engine.kv_cache_bytes == 512LL << 20);
  CHECK(!c.engine.prefix_cache);
  CHECK(c.engine.max_running == 8);
  CHECK(c.engine.max_batched_tokens == 128);
  CHECK(c.engine.max_waiting == 10);
  CHECK(c.engine.request_timeout_s == 30);
  CHECK(c.max_body_bytes == 1536);
  CHECK(c.default_max_tokens == 64);
  CHECK(c.max_batch_size == 16);
  CHECK(c.batch_delay_ms == 2.5);
  CHECK(c.tls_cert == s.cert);
  CHECK(c.tls_key == s.key);
  CHECK(c.api_keys == std::vector<std::string>{"k1", "k2"});
}

}  // namespace

TEST_CASE("file only: every key, grouped", "[serve_config]") {
  EnvGuard env;
  Scratch s;
  const std::string path = s.write("all.yaml",
                                   "engine:\n"
                                   "  model: " + s.model + "\n"
                                   "  served-model-name: tiny\n"
                                   "  threads: 2\n"
                                   "  max-model-len: 1024\n"
                                   "  block_size: 32\n"          // '_' works like '-'
                                   "  num-kv-blocks: 77\n"
                                   "  kv-cache-bytes: 512M\n"
                                   "  no-prefix-cache: true\n"
                                   "server:\n"
                                   "  host: 127.0.0.1\n"
                                   "  http-port: 9000\n"
                                   "  grpc-port: -1\n"
                                   "  http-threads: 2\n"
                                   "  max-connections: 100\n"
                                   "  idle-timeout: 2.5\n"
                                   "  shutdown-grace: 0\n"
                                   "  log-format: json\n"
                                   "limits:\n"
                                   "  max-running: 8\n"
                                   "  max-batched-tokens: 128\n"
                                   "  max-waiting: 10\n"
                                   "  request-timeout: 30\n"
                                   "  max-body-bytes: 1.5K\n"
                                   "  default-max-tokens: 64\n"
                                   "  max-batch-size: 16\n"
                                   "  batch-delay-ms: 2.5\n"
                                   "tls:\n"
                                   "  cert: " + s.cert + "\n"   // the group prefix may be dropped
                                   "  tls-key: " + s.key + "\n"
                                   "auth:\n"
                                   "  api-key: [k1, k2]\n");
  const ServeConfig c = resolve({"--config", path});
  check_all_changed(c, s);
  CHECK(c.config_file == path);
}

TEST_CASE("file only: flat keys", "[serve_config]") {
  EnvGuard env;
  Scratch s;
  const std::string path = s.write("flat.yaml",
                                   "model: " + s.model + "\n"
                                   "served_model_name: tiny\n"
                                   "host: 127.0.0.1\n"
                                   "http_port: 9000\n"
                                   "grpc-port: -1\n"
                                   "http-threads: 2\n"
                                   "max-connections: 100\n"
                                   "idle-timeout: 2.5\n"
                                   "shutdown-grace: 0\n"
                                   "log-format: json\n"
                                   "threads: 2\n"
                                   "max-model-len: 1024\n"
                                   "block-size: 32\n"
                                   "num-kv-blocks: 77\n"
                                   "kv-cache-bytes: 512MiB\n"
                                   "no-prefix-cache: yes\n"
                                   "max-running: 8\n"
                                   "max-batched-tokens: 128\n"
                                   "max-waiting: 10\n"
                                   "request-timeout: 30\n"
                                   "max-body-bytes: 1536\n"
                                   "default-max-tokens: 64\n"
                                   "max_batch_size: 16\n"
                                   "batch-delay-ms: 2.5\n"
                                   "tls-cert: " + s.cert + "\n"
                                   "tls-key: " + s.key + "\n"
                                   "api-key:\n"
                                   "  - k1\n"
                                   "  - k2\n");
  check_all_changed(resolve({"--config", path}), s);
}

TEST_CASE("flags: every key", "[serve_config]") {
  EnvGuard env;
  Scratch s;
  const ServeConfig c = resolve({"--model", s.model, "--served-model-name", "tiny", "--host", "127.0.0.1",
                                 "--http-port", "9000", "--grpc-port", "-1", "--http-threads", "2",
                                 "--max-connections", "100", "--idle-timeout", "2.5", "--shutdown-grace", "0",
                                 "--log-format", "json", "--threads", "2", "--max-model-len", "1024",
                                 "--block-size", "32", "--num-kv-blocks", "77", "--kv-cache-bytes", "512M",
                                 "--no-prefix-cache", "--max-running", "8", "--max-batched-tokens", "128",
                                 "--max-waiting", "10", "--request-timeout", "30", "--max-body-bytes", "1.5k",
                                 "--default-max-tokens", "64", "--max-batch-size", "16",
                                 "--batch-delay-ms", "2.5", "--tls-cert", s.cert, "--tls-key", s.key,
                                 "--api-key", "k1", "--api-key", "k2"});
  check_all_changed(c, s);
}

TEST_CASE("flags override the file, the file overrides defaults", "[serve_config]") {
  EnvGuard env;
  Scratch s;
  const std::string path = s.write("o.yaml",
                                   "model: /nonexistent/overridden\n"
                                   "server:\n  http-port: 9000\n  grpc-port: 9001\n"
                                   "engine:\n  kv-cache-bytes: 2G\n  no-prefix-cache: true\n"
                                   "auth:\n  api-key: from-file\n");
  const ServeConfig c = resolve({"--config", path, "--model", s.model, "--http-port", "9100"});
  CHECK(c.model == s.model);
  CHECK(c.http_port == 9100);                     // flag
  CHECK(c.grpc_port == 9001);                     // file
  CHECK(c.engine.kv_cache_bytes == 2LL << 30);    // file
  CHECK(!c.engine.prefix_cache);                  // file
  CHECK(c.max_connections == 4096);               // default
  CHECK(c.api_keys == std::vector<std::string>{"from-file"});
  // A flag at its default value still overrides the file: it was given.
  CHECK(resolve({"--config", path, "--model", s.model, "--grpc-port", "8001"}).grpc_port == 8001);
}

TEST_CASE("serve flag port is http-port, as vLLM and llama.cpp spell it", "[serve_config]") {
  EnvGuard env;
  Scratch s;
  const std::string path = s.write("p.yaml", "server:\n  http-port: 9000\n");
  CHECK(resolve({"--model", s.model, "--port", "9200"}).http_port == 9200);
  // A flag over the file, whichever name it is given by.
  CHECK(resolve({"--config", path, "--model", s.model, "--port", "9300"}).http_port == 9300);
  CHECK(resolve({"--config", path, "--model", s.model}).http_port == 9000);
  // Range-checked like --http-port, the message naming the flag.
  const std::string e = error_of({"--model", s.model, "--port", "70000"});
  CHECK(e.find("--http-port") != std::string::npos);
  CHECK(e.find("70000") != std::string::npos);
}

TEST_CASE("API keys: SAMPAN_API_KEY over the file, --api-key over both", "[serve_config]") {
  EnvGuard env;
  Scratch s;
  const std::string path = s.write("k.yaml", "auth:\n  api-key: from-file\n");
  ::setenv("SAMPAN_API_KEY", "from-env", 1);
  CHECK(resolve({"--model", s.model}).api_keys == std::vector<std::string>{"from-env"});
  CHECK(resolve({"--config", path, "--model", s.model}).api_keys == std::vector<std::string>{"from-env"});
  CHECK(resolve({"--config", path, "--model", s.model, "--api-key", "a", "--api-key", "b"}).api_keys ==
        std::vector<std::string>{"a", "b"});
  ::setenv("SAMPAN_API_KEY", "", 1);  // set but empty: as if unset
  CHECK(resolve({"--config", path, "--model", s.model}).api_keys == std::vector<std::string>{"from-file"});
}

TEST_CASE("the shipped configs load", "[serve_config]") {
  EnvGuard env;
  Scratch s;
  const std::string dir = std::string(SAMPAN_SOURCE_DIR) + "/configs/";
  // serve.yaml lists every key at its default: loading it must change nothing.
  const ServeConfig a = resolve({"--config", dir + "serve.yaml", "--model", s.model});
  const ServeConfig b = resolve({"--model", s.model});
  CHECK(a.served_model_name == b.served_model_name);
  CHECK(a.host == b.host);
  CHECK(a.http_port == b.http_port);
  CHECK(a.grpc_port == b.grpc_port);
  CHECK(a.http_threads == b.http_threads);
  CHECK(a.api_keys == b.api_keys);
  CHECK(a.max_body_bytes == b.max_body_bytes);
  CHECK(a.max_connections == b.max_connections);
  CHECK(a.idle_timeout_s == b.idle_timeout_s);
  CHECK(a.tls_cert == b.tls_cert);
  CHECK(a.tls_key == b.tls_key);
  CHECK(a.shutdown_grace_s == b.shutdown_grace_s);
  CHECK(a.log_format == b.log_format);
  CHECK(a.default_max_tokens == b.default_max_tokens);
  CHECK(a.engine.threads == b.engine.threads);
  CHECK(a.engine.max_model_len == b.engine.max_model_len);
  CHECK(a.engine.block_size == b.engine.block_size);
  CHECK(a.engine.num_kv_blocks == b.engine.num_kv_blocks);
  CHECK(a.engine.kv_cache_bytes == b.engine.kv_cache_bytes);
  CHECK(a.engine.max_running == b.engine.max_running);
  CHECK(a.engine.max_batched_tokens == b.engine.max_batched_tokens);
  CHECK(a.engine.max_waiting == b.engine.max_waiting);
  CHECK(a.engine.prefix_cache == b.engine.prefix_cache);
  CHECK(a.engine.request_timeout_s == b.engine.request_timeout_s);

  const ServeConfig small = resolve({"--config", dir + "serve-small-cpu.yaml", "--model", s.model});
  CHECK(small.engine.threads == 2);
  CHECK(small.engine.max_running == 16);
  CHECK(small.served_model_name == "tinyllama");
}

TEST_CASE("size suffixes", "[serve_config]") {
  EnvGuard env;
  Scratch s;
  auto kv = [&](const std::string& v) {
    return resolve({"--model", s.model, "--kv-cache-bytes", v}).engine.kv_cache_bytes;
  };
  CHECK(kv("1024") == 1024);
  CHECK(kv("512M") == 512LL << 20);
  CHECK(kv("2G") == 2LL << 30);
  CHECK(kv("2g") == 2LL << 30);
  CHECK(kv("2GB") == 2LL << 30);
  CHECK(kv("2GiB") == 2LL << 30);
  CHECK(kv("64K") == 64LL << 10);
  CHECK(kv("1T") == 1LL << 40);
  CHECK(kv("1.5G") == 3LL << 29);
  for (const char* bad : {"12X", "G", "-1G", "1.5", "1..5G", "99999999999T", "1e9", "2 GG", ""}) {
    INFO(bad);
    CLI::App app{"test"};
    ServeConfig flags;
    sampan::server::add_serve_flags(app, flags);
    std::vector<std::string> args = {"serve", "--model", s.model, "--kv-cache-bytes", bad};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
      FAIL("accepted");
    } catch (const CLI::ParseError& e) {
      CHECK_THAT(std::string(e.what()), Contains("--kv-cache-bytes"));
    }
  }
  const std::string path = s.write("bad_size.yaml", "model: " + s.model + "\nengine:\n  kv-cache-bytes: 12X\n");
  const std::string msg = error_of({"--config", path});
  CHECK_THAT(msg, Contains("bad_size.yaml:3") && Contains("kv-cache-bytes") && Contains("12X"));
}

TEST_CASE("YAML errors name file:line and the key", "[serve_config]") {
  EnvGuard env;
  Scratch s;
  const std::string m = "model: " + s.model + "\n";
  struct Case {
    const char* name;
    std::string text;
    std::vector<std::string> must_contain;
  };
  const std::vector<Case> cases = {
      {"syntax.yaml", m + "server:\n  http-port: [8000\n", {"syntax.yaml:", "invalid YAML"}},
      {"syntax2.yaml", m + "server:\n  http-port: 1\n bad indent: 2\n", {"syntax2.yaml:", "invalid YAML"}},
      {"type_int.yaml", m + "server:\n  http-port: abc\n", {"type_int.yaml:3", "http-port", "an integer", "abc"}},
      {"type_list.yaml", m + "http-port: [1, 2]\n", {"type_list.yaml:2", "http-port", "a list"}},
      {"type_float.yaml", m + "idle-timeout: soon\n", {"type_float.yaml:2", "idle-timeout", "a number"}},
      {"type_bool.yaml", m + "no-prefix-cache: 3\n", {"type_bool.yaml:2", "no-prefix-cache", "true or false"}},
      {"type_str.yaml", m + "host: {a: 1}\n", {"type_str.yaml:2", "host", "a string"}},
      {"type_int_frac.yaml", m + "max-running: 1.5\n", {"type_int_frac.yaml:2", "max-running", "an integer"}},
      {"type_int_big.yaml", m + "http-port: 99999999999\n", {"type_int_big.yaml:2", "http-port"}},
      {"unknown.yaml", m + "engine:\n  blocksize: 16\n", {"unknown.yaml:3", "engine.blocksize", "unknown key"}},
      {"unknown_top.yaml", m + "colour: blue\n", {"unknown_top.yaml:2", "colour", "unknown key"}},
      {"config_key.yaml", m + "config: other.yaml\n", {"config_key.yaml:2", "config", "unknown key"}},
      {"wrong_group.yaml", m + "server:\n  block-size: 16\n", {"wrong_group.yaml:3", "block-size", "engine"}},
      {"not_group.yaml", m + "server: 1\n", {"not_group.yaml:2", "server", "mapping"}},
      {"twice.yaml", m + "http-port: 1\nserver:\n  http_port: 2\n", {"twice.yaml:4", "http-port", "twice", "line 2"}},
      {"twice_same.yaml", m + "http-port: 1\nhttp-port: 2\n", {"twice_same.yaml:3", "http-port", "twice"}},
      // Hostile nesting: refused with a line naming the file, never a stack overflow.
      {"deep_flow.yaml", m + "threads: " + std::string(100000, '[') + std::string(100000, ']') + "\n",
       {"deep_flow.yaml:", "invalid YAML"}},
      {"deep_block.yaml", m + [] {
         std::string t = "engine:\n";
         for (int i = 1; i < 3000; ++i) t += std::string(2 * i, ' ') + "b:\n";
         return t + std::string(6000, ' ') + "c: 1\n";
       }(), {"deep_block.yaml:", "invalid YAML"}},
      {"top_list.yaml", "- a\n- b\n", {"top_list.yaml", "mapping"}},
      {"port.yaml", m + "server:\n  http-port: 70000\n", {"port.yaml:3", "http-port", "70000", "out of range"}},
      {"grpc_port.yaml", m + "grpc-port: -2\n", {"grpc_port.yaml:2", "grpc-port", "out of range"}},
      {"tls.yaml", m + "tls:\n  cert: " + s.cert + "\n", {"tls-key", "required when tls-cert", "tls.yaml:3"}},
      {"tls_missing.yaml", m + "tls-cert: /nonexistent.pem\ntls-key: /nonexistent.key\n",
       {"tls_missing.yaml:2", "tls-cert", "cannot read"}},
      {"nomodel.yaml", "server:\n  http-port: 1\n", {"model", "required"}},
      {"badmodel.yaml", "model: /nonexistent/model\n", {"badmodel.yaml:1", "model", "not a directory"}},
      {"log.yaml", m + "log-format: xml\n", {"log.yaml:2", "log-format", "xml"}},
      {"zero_running.yaml", m + "limits:\n  max-running: 0\n", {"zero_running.yaml:3", "max-running"}},
      {"neg_timeout.yaml", m + "request-timeout: -1\n", {"neg_timeout.yaml:2", "request-timeout"}},
      {"empty_key.yaml", m + "api-key: ['']\n", {"empty_key.yaml:2", "api-key", "empty"}},
      {"block.yaml", m + "block-size: 0\n", {"block.yaml:2", "block-size"}},
  };
  for (const Case& c : cases) {
    INFO(c.name << ":\n" << c.text);
    const std::string msg = error_of({"--config", s.write(c.name, c.text)});
    INFO("message: " << msg);
    CHECK(msg.find('\n') == std::string::npos);  // one line
    for (const std::string& want : c.must_contain) CHECK_THAT(msg, Contains(want));
  }
}

TEST_CASE("flag errors name the flag", "[serve_config]") {
  EnvGuard env;
  Scratch s;
  CHECK_THAT(error_of({}), Contains("model") && Contains("required"));
  CHECK_THAT(error_of({"--model", (s.dir / "nope").string()}), Contains("--model") && Contains("not a directory"));
  CHECK_THAT(error_of({"--model", s.model, "--http-port", "65536"}), Contains("--http-port") && Contains("65536"));
  CHECK_THAT(error_of({"--model", s.model, "--http-port", "-1"}), Contains("--http-port"));
  CHECK_THAT(error_of({"--model", s.model, "--grpc-port", "8000"}), Contains("--grpc-port"));  // = HTTP port
  CHECK_THAT(error_of({"--model", s.model, "--tls-cert", s.cert}),
             Contains("tls-key") && Contains("required when tls-cert") && Contains("--tls-cert"));
  CHECK_THAT(error_of({"--model", s.model, "--tls-key", s.key}), Contains("tls-cert"));
  CHECK_THAT(error_of({"--model", s.model, "--max-batched-tokens", "0"}), Contains("--max-batched-tokens"));
  CHECK_THAT(error_of({"--model", s.model, "--http-threads", "0"}), Contains("--http-threads"));
  CHECK_THAT(error_of({"--model", s.model, "--max-batch-size", "0"}), Contains("--max-batch-size"));
  CHECK_THAT(error_of({"--model", s.model, "--batch-delay-ms", "-1"}),
             Contains("--batch-delay-ms") && Contains("-1"));
  CHECK_THAT(error_of({"--model", s.model, "--idle-timeout", "0"}), Contains("--idle-timeout"));
  CHECK_THAT(error_of({"--model", s.model, "--max-body-bytes", "0"}), Contains("--max-body-bytes"));
  CHECK_THAT(error_of({"--model", s.model, "--api-key", "has space"}), Contains("--api-key"));
  CHECK_THAT(error_of({"--config", (s.dir / "missing.yaml").string(), "--model", s.model}),
             Contains("--config") && Contains("missing.yaml"));
  ::setenv("SAMPAN_API_KEY", "bad key", 1);
  CHECK_THAT(error_of({"--model", s.model}), Contains("SAMPAN_API_KEY"));
  // A non-number for an integer flag is CLI11's usage error, naming the flag.
  CLI::App app{"test"};
  ServeConfig flags;
  sampan::server::add_serve_flags(app, flags);
  std::vector<std::string> args = {"serve", "--http-port", "abc"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
    FAIL("accepted");
  } catch (const CLI::ParseError& e) {
    CHECK_THAT(std::string(e.what()), Contains("--http-port"));
  }
}
