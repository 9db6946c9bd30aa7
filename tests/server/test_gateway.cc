// The gateway every front end shares (server/gateway.h): one table of HTTP and gRPC statuses that
// agree with each other, errors carrying their field to OpenAI's `param` without any message
// being parsed, admission, finished requests, API keys — and the source rules that keep these
// defined once.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "proto/grpc_service.pb.h"
#include "engine/runtime/grammar.h"
#include "server/api_routes.h"
#include "server/gateway.h"
#include "server/kserve_decode.h"
#include "server/openai_api.h"
#include "server/request_parse.h"

using sampan::Error;
using sampan::ErrorCode;
using sampan::server::Json;
using G = grpc::StatusCode;

namespace {

constexpr ErrorCode kAllCodes[] = {
    ErrorCode::kInvalidArgument, ErrorCode::kNotFound,        ErrorCode::kInvalidModel,
    ErrorCode::kUnsupported,     ErrorCode::kOutOfMemory,     ErrorCode::kIo,
    ErrorCode::kInternal,        ErrorCode::kResourceExhausted, ErrorCode::kUnavailable,
    ErrorCode::kCancelled,       ErrorCode::kDeadlineExceeded,
};

// Fails to compile with -Werror=switch (and warns with -Wall) when ErrorCode grows and
// kAllCodes above is not extended with it.
[[maybe_unused]] constexpr bool listed(ErrorCode c) {
  switch (c) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kNotFound:
    case ErrorCode::kInvalidModel:
    case ErrorCode::kUnsupported:
    case ErrorCode::kOutOfMemory:
    case ErrorCode::kIo:
    case ErrorCode::kInternal:
    case ErrorCode::kResourceExhausted:
    case ErrorCode::kUnavailable:
    case ErrorCode::kCancelled:
    case ErrorCode::kDeadlineExceeded: return true;
  }
  return false;
}

// google.rpc.Code's documented HTTP mapping (google/rpc/code.proto), written out independently
// of gateway.cc: what "the HTTP and gRPC columns agree" means.
int google_http(G code) {
  switch (code) {
    case G::OK: return 200;
    case G::CANCELLED: return 499;
    case G::UNKNOWN: return 500;
    case G::INVALID_ARGUMENT: return 400;
    case G::DEADLINE_EXCEEDED: return 504;
    case G::NOT_FOUND: return 404;
    case G::ALREADY_EXISTS: return 409;
    case G::PERMISSION_DENIED: return 403;
    case G::UNAUTHENTICATED: return 401;
    case G::RESOURCE_EXHAUSTED: return 429;
    case G::FAILED_PRECONDITION: return 400;
    case G::ABORTED: return 409;
    case G::OUT_OF_RANGE: return 400;
    case G::UNIMPLEMENTED: return 501;
    case G::INTERNAL: return 500;
    case G::UNAVAILABLE: return 503;
    case G::DATA_LOSS: return 500;
    default: return -1;
  }
}

struct Answer {
  int status = 0;
  std::string body;
};

class RecordingWriter : public sampan::server::ResponseWriter {
 public:
  explicit RecordingWriter(Answer* out) : out_(out) {}
  void respond(int status, std::string body, std::string,
               std::vector<std::pair<std::string, std::string>>) override {
    *out_ = Answer{status, std::move(body)};
  }
  void start_stream(int, std::string, std::vector<std::pair<std::string, std::string>>) override {
    FAIL("no stream expected");
  }
  void write(std::string) override { FAIL("no stream expected"); }
  void end() override { FAIL("no stream expected"); }
  bool closed() const override { return false; }
  void on_close(std::function<void()>) override {}

 private:
  Answer* out_;
};

Answer post(const sampan::server::HttpHandler& h, const std::string& path,
            const std::string& body) {
  sampan::server::HttpRequest req;
  req.method = "POST";
  req.target = req.path = path;
  req.body = body;
  req.request_id = "t1";
  Answer a;
  h(req, std::make_shared<RecordingWriter>(&a));
  return a;
}

template <typename F>
Error thrown(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no Error thrown");
  return Error(ErrorCode::kInternal, "");
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("error table: every ErrorCode has an HTTP and a gRPC status that agree", "[gateway]") {
  for (ErrorCode c : kAllCodes) {
    INFO(sampan::error_code_name(c));
    REQUIRE(listed(c));
    const sampan::server::ErrorStatus s = sampan::server::error_status(c);
    CHECK(s.http == google_http(s.grpc));
    CHECK(s.grpc != G::OK);
    CHECK(sampan::server::http_status(c) == s.http);
    CHECK(sampan::server::grpc_status(c) == s.grpc);
  }
  CHECK(sampan::server::kUnauthenticatedStatus.http ==
        google_http(sampan::server::kUnauthenticatedStatus.grpc));
  // The rows the e2e tests and clients rely on.
  using sampan::server::error_status;
  CHECK(error_status(ErrorCode::kInvalidArgument).http == 400);
  CHECK(error_status(ErrorCode::kNotFound).grpc == G::NOT_FOUND);
  CHECK(error_status(ErrorCode::kResourceExhausted).http == 429);
  CHECK(error_status(ErrorCode::kResourceExhausted).grpc == G::RESOURCE_EXHAUSTED);
  CHECK(error_status(ErrorCode::kUnavailable).http == 503);
  CHECK(error_status(ErrorCode::kDeadlineExceeded).grpc == G::DEADLINE_EXCEEDED);
  CHECK(error_status(ErrorCode::kUnsupported).http == 501);
  CHECK(error_status(ErrorCode::kUnsupported).grpc == G::UNIMPLEMENTED);
  CHECK(error_status(ErrorCode::kInternal).http == 500);
}

TEST_CASE("current_error: whatever was thrown, as an Error", "[gateway]") {
  const auto as_error = [](auto thrower) {
    try {
      thrower();
    } catch (...) {
      return sampan::current_error();
    }
    return Error(ErrorCode::kInternal, "nothing thrown");
  };
  const Error field = as_error([] { throw Error(ErrorCode::kInvalidArgument, "top_p", "m"); });
  CHECK(field.code() == ErrorCode::kInvalidArgument);
  CHECK(field.field() == "top_p");
  CHECK(as_error([] { throw std::bad_alloc(); }).code() == ErrorCode::kOutOfMemory);
  const Error other = as_error([] { throw std::runtime_error("boom"); });
  CHECK(other.code() == ErrorCode::kInternal);
  CHECK(std::string(other.what()) == "internal error: boom");
}

TEST_CASE("field propagation: OpenAI's param comes from Error::field, not the message",
          "[gateway]") {
  // The parser sets the field itself.
  const Error e = thrown([] {
    sampan::server::parse_completion_request(Json::parse(R"({"prompt": "hi", "top_p": 1.5})"));
  });
  CHECK(e.code() == ErrorCode::kInvalidArgument);
  CHECK(e.field() == "top_p");
  const Error k = thrown([] {
    sampan::server::parse_kserve_json(Json::parse(R"({"inputs": [
        {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["a"]},
        {"name": "sampling_parameters", "datatype": "BYTES", "shape": [1],
         "data": ["{\"top_p\": 1.5}"]}]})"));
  });
  CHECK(k.field() == "sampling_parameters.top_p");

  // The param is the field even when the message does not mention it: nothing reads the text.
  Answer a;
  sampan::server::ServeMetrics metrics;
  RecordingWriter w(&a);
  sampan::server::send_error(w, metrics, "openai",
                             Error(ErrorCode::kInvalidArgument, "top_p", "out of range"));
  CHECK(a.status == 400);
  CHECK(Json::parse(a.body)["error"]["param"] == "top_p");
  sampan::server::send_error(w, metrics, "openai",
                             Error(ErrorCode::kInvalidArgument, "the top_p field is bad"));
  CHECK(Json::parse(a.body)["error"]["param"].is_null());

  // End to end through the router (validation needs no engine).
  sampan::server::ModelHost host("tiny", 16);
  const auto h = sampan::server::make_api_router(host, metrics);
  a = post(h, "/v1/completions", R"({"prompt": "hi", "top_p": 1.5})");
  CHECK(a.status == 400);
  CHECK(Json::parse(a.body)["error"]["param"] == "top_p");
  a = post(h, "/v1/chat/completions",
           R"({"messages": [{"role": "user", "content": "hi"}], "temperature": -1})");
  CHECK(a.status == 400);
  CHECK(Json::parse(a.body)["error"]["param"] == "temperature");
}

TEST_CASE("admission: the model's name first, then draining, then loading", "[gateway]") {
  sampan::server::ModelHost host("tiny", 16);
  using sampan::server::admit;
  Error e = thrown([&] { admit(host, "other"); });
  CHECK(e.code() == ErrorCode::kNotFound);
  CHECK(e.field() == "model");
  CHECK(std::string(e.what()).find("'other'") != std::string::npos);
  e = thrown([&] { admit(host, "other", "model_name"); });
  CHECK(e.field() == "model_name");
  e = thrown([&] { admit(host, ""); });
  CHECK(e.code() == ErrorCode::kUnavailable);
  CHECK(std::string(e.what()).find("loading") != std::string::npos);
  e = thrown([&] { admit(host, "tiny"); });
  CHECK(e.code() == ErrorCode::kUnavailable);
  host.set_draining();
  e = thrown([&] { admit(host, "tiny"); });
  CHECK(e.code() == ErrorCode::kUnavailable);
  CHECK(std::string(e.what()).find("shutting down") != std::string::npos);
  CHECK(thrown([&] { admit(host, "x"); }).code() == ErrorCode::kNotFound);

  e = thrown([&] { sampan::server::check_kserve_model(host, "tiny", "2"); });
  CHECK(e.code() == ErrorCode::kNotFound);
  CHECK(e.field() == "version");
  sampan::server::check_kserve_model(host, "tiny", "1");
  sampan::server::check_kserve_model(host, "tiny", "");
}

TEST_CASE("finished requests: one outcome per finish and cause", "[gateway]") {
  using sampan::runtime::EngineFinish;
  using sampan::server::CancelCause;
  using sampan::server::finish_error;
  sampan::runtime::EngineEvent ev;
  ev.finished = true;
  const auto code = [&](EngineFinish f, CancelCause c) {
    ev.finish = f;
    const auto e = finish_error(ev, c);
    REQUIRE(e.has_value());
    return e->code();
  };
  for (CancelCause c : {CancelCause::kServer, CancelCause::kClient, CancelCause::kDeadline}) {
    ev.finish = EngineFinish::kStop;
    CHECK_FALSE(finish_error(ev, c).has_value());
    ev.finish = EngineFinish::kLength;
    CHECK_FALSE(finish_error(ev, c).has_value());
    CHECK(code(EngineFinish::kTimeout, c) == ErrorCode::kDeadlineExceeded);
    CHECK(code(EngineFinish::kError, c) == ErrorCode::kInternal);
  }
  CHECK(code(EngineFinish::kCancelled, CancelCause::kServer) == ErrorCode::kUnavailable);
  CHECK(code(EngineFinish::kCancelled, CancelCause::kClient) == ErrorCode::kCancelled);
  CHECK(code(EngineFinish::kCancelled, CancelCause::kDeadline) == ErrorCode::kDeadlineExceeded);
  ev.finish = EngineFinish::kError;
  ev.error = "injected fault";
  CHECK(std::string(finish_error(ev, CancelCause::kServer)->what()).find("injected fault") !=
        std::string::npos);
  CHECK(std::string(sampan::server::finish_reason(EngineFinish::kLength)) == "length");
}

TEST_CASE("API keys: one check for HTTP and gRPC", "[gateway]") {
  using sampan::server::ApiKeyCheck;
  using sampan::server::check_api_key;
  const std::vector<std::string> keys = {"first-key", "secret-key"};
  const auto check = [&](std::string_view v) { return check_api_key(keys, &v); };
  CHECK(check_api_key({}, nullptr) == ApiKeyCheck::kOk);
  CHECK(check_api_key(keys, nullptr) == ApiKeyCheck::kMissing);
  CHECK(check("Bearer secret-key") == ApiKeyCheck::kOk);
  CHECK(check("bearer first-key") == ApiKeyCheck::kOk);  // the scheme is case-insensitive
  CHECK(check("Bearer Secret-key") == ApiKeyCheck::kWrongKey);
  CHECK(check("Bearer secret-key-longer") == ApiKeyCheck::kWrongKey);
  CHECK(check("Bearer ") == ApiKeyCheck::kWrongKey);
  CHECK(check("Basic Zm9vOmJhcg==") == ApiKeyCheck::kNotBearer);
  CHECK(check("Bearer") == ApiKeyCheck::kNotBearer);
  const std::vector<std::string> empty_key = {""};
  std::string_view bare = "Bearer ";
  CHECK(check_api_key(empty_key, &bare) == ApiKeyCheck::kWrongKey);
  CHECK(std::string(sampan::server::api_key_message(ApiKeyCheck::kMissing)).find("Bearer") !=
        std::string::npos);
}

TEST_CASE("source rules: one mapping of error kinds, no message parsing", "[gateway]") {
  namespace fs = std::filesystem;
  const fs::path root(SAMPAN_SOURCE_DIR);
  for (const auto& entry : fs::directory_iterator(root / "server")) {
    const std::string name = entry.path().filename().string();
    const std::string text = read_file(entry.path());
    INFO(name);
    // Only the gateway switches on error kinds in the server.
    if (name != "gateway.cc") CHECK(text.find("case ErrorCode::") == std::string::npos);
    // The old way of recovering a field: scanning what() for known names.
    CHECK(text.find("field_in_message") == std::string::npos);
  }
  // One definition of the sampling limits.
  for (const char* dir : {"server", "engine/runtime", "engine/capi"}) {
    for (const auto& entry : fs::directory_iterator(root / dir)) {
      if (entry.path().filename() == "sampling_limits.h") continue;
      INFO(entry.path().string());
      CHECK(read_file(entry.path()).find("kMaxTopLogprobs =") == std::string::npos);
    }
  }
}

namespace {

// A KServe protobuf request with one text_input.
inference::ModelInferRequest text_request(const std::string& text) {
  inference::ModelInferRequest req;
  auto* in = req.add_inputs();
  in->set_name("text_input");
  in->set_datatype("BYTES");
  in->add_shape(1);
  in->mutable_contents()->add_bytes_contents(text);
  return req;
}

}  // namespace

TEST_CASE("KServe: logit_bias from sampling_parameters, and as a JSON string parameter",
          "[gateway]") {
  const auto r = sampan::server::parse_kserve_json(Json::parse(R"({"inputs": [
      {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["a"]},
      {"name": "sampling_parameters", "datatype": "BYTES", "shape": [1],
       "data": ["{\"logit_bias\": {\"3\": -100}}"]}]})"));
  REQUIRE(r.fields.sampling.logit_bias.size() == 1);
  CHECK(r.fields.sampling.logit_bias[0] == std::pair<int32_t, float>(3, -100.0f));

  // A protobuf parameter is a scalar: the object travels as a JSON string.
  inference::ModelInferRequest req = text_request("a");
  (*req.mutable_parameters())["logit_bias"].set_string_param(R"({"4": 7.5})");
  const auto p = sampan::server::parse_kserve_proto(req);
  REQUIRE(p.fields.sampling.logit_bias.size() == 1);
  CHECK(p.fields.sampling.logit_bias[0] == std::pair<int32_t, float>(4, 7.5f));
  // Not JSON, or JSON nested past the request limit: the wrong type, naming the field.
  for (const std::string& bad : {std::string("{4: 1}"), std::string(5000, '[')}) {
    (*req.mutable_parameters())["logit_bias"].set_string_param(bad);
    const Error e = thrown([&] { sampan::server::parse_kserve_proto(req); });
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(e.field() == "parameters.logit_bias");
  }
  (*req.mutable_parameters())["logit_bias"].set_string_param(R"({"4": 101})");
  CHECK(thrown([&] { sampan::server::parse_kserve_proto(req); }).field() ==
        R"(parameters.logit_bias["4"])");
}

TEST_CASE("KServe: response_format in parameters and sampling_parameters, JSON and protobuf",
          "[gateway]") {
  using sampan::runtime::GrammarMatcher;
  const Json rf = {{"response_format", {{"type", "json_schema"},
                                        {"json_schema", {{"name", "n"},
                                                         {"schema", {{"type", "integer"},
                                                                     {"minimum", 3}}}}}}}};
  Json body = Json::parse(R"({"inputs": [
      {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["a"]},
      {"name": "sampling_parameters", "datatype": "BYTES", "shape": [1]}]})");
  body["inputs"][1]["data"] = Json::array({rf.dump()});
  const auto r = sampan::server::parse_kserve_json(body);
  REQUIRE(r.fields.grammar);
  CHECK(GrammarMatcher(*r.fields.grammar).matches("42"));
  CHECK_FALSE(GrammarMatcher(*r.fields.grammar).matches("2"));
  const auto j = sampan::server::parse_kserve_json(Json::parse(R"({"inputs": [
      {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["a"]}],
      "parameters": {"response_format": {"type": "json_object"}}})"));
  CHECK(j.fields.json_object);
  CHECK_FALSE(j.fields.grammar);
  // A later sampling_parameters' type "text" clears what parameters asked for.
  const auto t = sampan::server::parse_kserve_json(Json::parse(R"({"inputs": [
      {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["a"]},
      {"name": "sampling_parameters", "datatype": "BYTES", "shape": [1],
       "data": ["{\"response_format\": {\"type\": \"text\"}}"]}],
      "parameters": {"response_format": {"type": "json_object"}}})"));
  CHECK_FALSE(t.fields.json_object);
  const Error bad_json = thrown([&] {
    sampan::server::parse_kserve_json(Json::parse(R"js({"inputs": [
        {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["a"]}],
        "parameters": {"response_format": {"type": "json_schema", "json_schema": {"name": "x",
            "schema": {"type": "string", "pattern": "(?=a)"}}}}})js"));
  });
  CHECK(bad_json.field() == "parameters.response_format.json_schema.schema");
  CHECK_THAT(std::string(bad_json.what()), Catch::Contains("lookaround"));

  inference::ModelInferRequest req = text_request("a");
  (*req.mutable_parameters())["response_format"].set_string_param(
      R"({"type": "json_schema", "json_schema": {"name": "d", "schema": {"format": "date"}}})");
  const auto p = sampan::server::parse_kserve_proto(req);
  REQUIRE(p.fields.grammar);
  CHECK(GrammarMatcher(*p.fields.grammar).matches(R"("2024-05-31")"));
  CHECK_FALSE(GrammarMatcher(*p.fields.grammar).matches(R"("2024-06-31")"));
  (*req.mutable_parameters())["response_format"].set_string_param(R"({"type": "xml"})");
  CHECK(thrown([&] { sampan::server::parse_kserve_proto(req); }).field() ==
        "parameters.response_format.type");
  (*req.mutable_parameters())["response_format"].set_string_param("json_object");
  CHECK(thrown([&] { sampan::server::parse_kserve_proto(req); }).field() ==
        "parameters.response_format");
}
