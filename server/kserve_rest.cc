#include "server/kserve_rest.h"

#include <fmt/format.h>

#include <mutex>
#include <string_view>
#include <vector>

#include "server/kserve_decode.h"
#include "server/openai_api.h"
#include "server/request_parse.h"

namespace sampan::server {
namespace {

constexpr const char* kApi = "kserve_rest";
constexpr const char* kServerVersion = "0.1.0";
constexpr const char* kModelVersion = "1";

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

void reply(ResponseWriter& w, ServeMetrics& metrics, int status, const Json& body) {
  w.respond(status, dump(body));
  metrics.request_done(kApi, status);
}

void fail(ResponseWriter& w, ServeMetrics& metrics, int status, const std::string& message) {
  w.respond(status, kserve_error_json(message));
  metrics.request_done(kApi, status);
}

Json tensor_meta(const char* name, const char* datatype, int64_t dim, bool optional) {
  Json t{{"name", name}, {"datatype", datatype}, {"shape", Json::array({dim})}};
  if (optional) t["optional"] = true;
  return t;
}

Json model_metadata(const std::string& name) {
  return Json{{"name", name},
              {"versions", Json::array({kModelVersion})},
              {"platform", "sampan"},
              {"inputs", Json::array({tensor_meta("text_input", "BYTES", 1, false),
                                      tensor_meta("input_ids", "INT32", -1, true),
                                      tensor_meta("max_tokens", "INT32", 1, true),
                                      tensor_meta("sampling_parameters", "BYTES", 1, true)})},
              {"outputs", Json::array({tensor_meta("text_output", "BYTES", 1, false),
                                       tensor_meta("output_ids", "INT32", -1, false)})}};
}

// One infer request: collects the whole output on the engine thread, answers on the final event.
struct InferCall {
  std::shared_ptr<ResponseWriter> writer;
  ServeMetrics* metrics = nullptr;
  std::string model, id;
  std::vector<std::string> outputs;
  std::string text;
  std::vector<int32_t> ids;
  std::chrono::steady_clock::time_point last;
  bool have_last = false;

  void on_event(const runtime::EngineEvent& ev) {
    if (ev.token >= 0) {
      const auto now = std::chrono::steady_clock::now();
      if (have_last) metrics->inter_token(std::chrono::duration<double>(now - last).count());
      last = now;
      have_last = true;
      ids.push_back(ev.token);
    }
    text += ev.text;
    if (!ev.finished) return;
    metrics->generation_done(ev);
    switch (ev.finish) {
      case runtime::EngineFinish::kStop:
      case runtime::EngineFinish::kLength: break;
      case runtime::EngineFinish::kTimeout:
        return fail(*writer, *metrics, 504, "the request exceeded its time limit");
      case runtime::EngineFinish::kCancelled:
        return fail(*writer, *metrics, writer->closed() ? 499 : 503,
                    "the request was cancelled (the server is shutting down)");
      case runtime::EngineFinish::kError:
        return fail(*writer, *metrics, 500, "generation failed: " + ev.error);
    }
    auto wanted = [&](const char* n) {
      return outputs.empty() || std::find(outputs.begin(), outputs.end(), n) != outputs.end();
    };
    Json out = Json::array();
    if (wanted("text_output"))
      out.push_back({{"name", "text_output"}, {"datatype", "BYTES"},
                     {"shape", Json::array({1})}, {"data", Json::array({text})}});
    if (wanted("output_ids"))
      out.push_back({{"name", "output_ids"}, {"datatype", "INT32"},
                     {"shape", Json::array({static_cast<int64_t>(ids.size())})}, {"data", ids}});
    Json body{{"model_name", model}, {"model_version", kModelVersion}};
    if (!id.empty()) body["id"] = id;
    body["parameters"] = Json{{"finish_reason", ev.finish == runtime::EngineFinish::kStop
                                                    ? "stop" : "length"},
                              {"prompt_tokens", ev.usage.prompt_tokens},
                              {"completion_tokens", ev.usage.completion_tokens}};
    body["outputs"] = std::move(out);
    reply(*writer, *metrics, 200, body);
  }
};

void infer(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer, ModelHost& host,
           ServeMetrics& metrics) {
  const KserveInferRequest in = parse_kserve_json(parse_json_object(req.body));
  auto engine = host.engine();
  if (!engine) return fail(*writer, metrics, 503, "the model is still loading");
  if (host.draining()) return fail(*writer, metrics, 503, "the server is shutting down");
  std::vector<int32_t> prompt = in.text ? engine->tokenizer().encode(*in.text, true) : in.ids;
  const int64_t max_len = engine->max_model_len();
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt >= max_len)
    return fail(*writer, metrics, 400,
                fmt::format("input '{}': the prompt has {} tokens; the model's context is {}",
                            in.text ? "text_input" : "input_ids", n_prompt, max_len));
  runtime::EngineRequest er;
  er.id = in.id.empty() ? req.request_id : in.id;
  er.prompt = std::move(prompt);
  in.fields.apply_to(er);
  er.sampling.logprobs = false;  // KServe responses carry no logprobs
  er.max_tokens =
      effective_max_tokens(in.fields.max_tokens, host.default_max_tokens(), n_prompt, max_len);
  auto call = std::make_shared<InferCall>();
  call->writer = writer;
  call->metrics = &metrics;
  call->model = host.name();
  call->id = in.id;
  call->outputs = in.outputs;
  uint64_t handle = 0;
  try {
    handle = engine->submit(std::move(er), [call](const runtime::EngineEvent& ev) {
      call->on_event(ev);
    });
  } catch (const Error& e) {
    return fail(*writer, metrics, http_status(e.code()), e.what());
  }
  std::weak_ptr<runtime::Engine> weak = engine;
  writer->on_close([weak, handle] {
    if (auto e = weak.lock()) e->cancel(handle);
  });
  if (writer->closed()) engine->cancel(handle);
}

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    const size_t j = path.find('/', i);
    const size_t end = j == std::string_view::npos ? path.size() : j;
    if (end > i) parts.push_back(path.substr(i, end - i));
    i = end;
  }
  return parts;
}

bool method_is(const HttpRequest& req, const char* method, ResponseWriter& w,
               ServeMetrics& metrics) {
  if (req.method == method) return true;
  w.respond(405, kserve_error_json(fmt::format("{} is not allowed on {}; use {}", req.method,
                                               req.path, method)),
            "application/json", {{"Allow", method}});
  metrics.request_done(kApi, 405);
  return false;
}

void dispatch(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer, ModelHost& host,
              ServeMetrics& metrics) {
  std::vector<std::string_view> p = split_path(req.path);  // p[0] == "v2"
  ResponseWriter& w = *writer;
  const bool ready = host.ready();
  if (p.size() == 1) {
    if (!method_is(req, "GET", w, metrics)) return;
    return reply(w, metrics, 200,
                 Json{{"name", "sampan"}, {"version", kServerVersion},
                      {"extensions", Json::array()}});
  }
  if (p.size() == 3 && p[1] == "health" && (p[2] == "live" || p[2] == "ready")) {
    if (!method_is(req, "GET", w, metrics)) return;
    const bool ok = p[2] == "live" || ready;
    return reply(w, metrics, ok ? 200 : 503, Json{{p[2] == "live" ? "live" : "ready", ok}});
  }
  if (p.size() >= 3 && p[1] == "models") {
    const std::string model(p[2]);
    // Optional "/versions/{v}"; the served model has the one version "1".
    size_t rest = 3;
    if (p.size() >= 5 && p[3] == "versions") {
      if (p[4] != kModelVersion)
        return fail(w, metrics, 404,
                    fmt::format("model '{}' has no version '{}'", model, std::string(p[4])));
      rest = 5;
    }
    if (model != host.name())
      return fail(w, metrics, 404,
                  fmt::format("unknown model '{}'; this server serves '{}'", model, host.name()));
    if (p.size() == rest) {
      if (!method_is(req, "GET", w, metrics)) return;
      return reply(w, metrics, 200, model_metadata(model));
    }
    if (p.size() == rest + 1 && p[rest] == "ready") {
      if (!method_is(req, "GET", w, metrics)) return;
      return reply(w, metrics, ready ? 200 : 503, Json{{"name", model}, {"ready", ready}});
    }
    if (p.size() == rest + 1 && p[rest] == "infer") {
      if (!method_is(req, "POST", w, metrics)) return;
      return infer(req, std::move(writer), host, metrics);
    }
  }
  fail(w, metrics, 404, fmt::format("no route for {}", req.path));
}

}  // namespace

std::string kserve_error_json(const std::string& message) {
  return dump(Json{{"error", message}});
}

void handle_kserve(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer,
                   ModelHost& host, ServeMetrics& metrics) {
  try {
    dispatch(req, writer, host, metrics);
  } catch (const RequestError& e) {
    fail(*writer, metrics, e.status(), e.what());
  }
}

}  // namespace sampan::server
