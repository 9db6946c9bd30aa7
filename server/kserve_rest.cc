#include "server/kserve_rest.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "engine/core/log.h"
#include "server/gateway.h"
#include "server/kserve_decode.h"
#include "server/request_parse.h"

namespace sampan::server {
namespace {

constexpr const char* kApi = "kserve_rest";

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

void reply(ResponseWriter& w, ServeMetrics& metrics, int status, const Json& body) {
  w.respond(status, dump(body));
  metrics.request_done(kApi, status);
}

void fail(ResponseWriter& w, ServeMetrics& metrics, const Error& e) {
  const int status = http_status(e.code());
  w.respond(status, kserve_error_json(e.what()));
  metrics.request_done(kApi, status);
}

Json tensor_meta(const char* name, const char* datatype, int64_t dim, bool optional) {
  Json t{{"name", name}, {"datatype", datatype}, {"shape", Json::array({dim})}};
  if (optional) t["optional"] = true;
  return t;
}

Json model_metadata(const std::string& name) {
  return Json{{"name", name},
              {"versions", Json::array({kKserveModelVersion})},
              {"platform", "sampan"},
              {"inputs", Json::array({tensor_meta("text_input", "BYTES", 1, false),
                                      tensor_meta("input_ids", "INT32", -1, true),
                                      tensor_meta("max_tokens", "INT32", 1, true),
                                      tensor_meta("sampling_parameters", "BYTES", 1, true)})},
              {"outputs", Json::array({tensor_meta("text_output", "BYTES", 1, false),
                                       tensor_meta("output_ids", "INT32", -1, false)})}};
}

// ---- classic (tensor) models ----------------------------------------------------------------

Json tensor_model_metadata(const std::string& name, const runtime::TensorSession& session) {
  auto list = [](const std::vector<models::TensorSpec>& specs) {
    Json out = Json::array();
    for (const models::TensorSpec& s : specs) {
      out.push_back(Json{{"name", s.api_name}, {"datatype", kserve_spec_datatype(s)},
                         {"shape", kserve_shape(s)}});
    }
    return out;
  };
  return Json{{"name", name},
              {"versions", Json::array({kKserveModelVersion})},
              {"platform", session.model().format},
              {"inputs", list(session.signature().inputs)},
              {"outputs", list(session.signature().outputs)}};
}

// The JSON header and the binary part of an infer body (Triton's binary tensor extension: the
// Inference-Header-Content-Length header gives the JSON's length; without it the whole body is
// JSON).
std::pair<std::string_view, std::string_view> split_infer_body(const HttpRequest& req) {
  const std::string_view body = req.body;
  const auto it = req.headers.find("inference-header-content-length");
  if (it == req.headers.end()) return {body, {}};
  const std::string& v = it->second;
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n > body.size()) {
    throw RequestError("Inference-Header-Content-Length",
                       fmt::format("Inference-Header-Content-Length '{}' is not a byte count "
                                   "within the body's {} bytes", v, body.size()));
  }
  return {body.substr(0, n), body.substr(n)};
}

// A tensor's elements as a flat JSON list.
Json tensor_json_data(const Tensor& t) {
  Json data = Json::array();
  auto& arr = data.get_ref<Json::array_t&>();
  const int64_t n = t.numel();
  arr.reserve(static_cast<size_t>(n));
  switch (t.dtype()) {
    case DType::kF32:
      for (int64_t i = 0; i < n; ++i) arr.emplace_back(t.data<float>()[i]);
      break;
    case DType::kI64:
      for (int64_t i = 0; i < n; ++i) arr.emplace_back(t.data<int64_t>()[i]);
      break;
    case DType::kI32:
      for (int64_t i = 0; i < n; ++i) arr.emplace_back(t.data<int32_t>()[i]);
      break;
    case DType::kI8:
      for (int64_t i = 0; i < n; ++i) arr.emplace_back(t.data<int8_t>()[i]);
      break;
    case DType::kU8:
      for (int64_t i = 0; i < n; ++i) arr.emplace_back(t.data<uint8_t>()[i]);
      break;
    case DType::kBool:
      for (int64_t i = 0; i < n; ++i) arr.emplace_back(t.data<uint8_t>()[i] != 0);
      break;
    default: {
      const Tensor f = t.to_f32();
      for (int64_t i = 0; i < n; ++i) arr.emplace_back(f.data<float>()[i]);
    }
  }
  return data;
}

// What a tensor infer's answer needs once the session is done (no reference to the session: the
// callback runs on its worker and may outlive nothing of it).
struct TensorCall {
  std::shared_ptr<ResponseWriter> writer;
  ServeMetrics* metrics = nullptr;
  std::string model, id;
  std::vector<TensorOutputChoice> outputs;
  std::vector<std::string> names, datatypes;  // by signature output

  void done(const std::vector<Tensor>& results, const std::optional<Error>& error) {
    if (error) return fail(*writer, *metrics, *error);
    Json out = Json::array();
    std::string binary;
    for (const TensorOutputChoice& c : outputs) {
      const Tensor& t = results.at(c.index);
      Json o{{"name", names[c.index]}, {"datatype", datatypes[c.index]}, {"shape", t.shape()}};
      if (c.binary) {
        const auto bytes = static_cast<size_t>(t.nbytes());
        if (bytes > 0) binary.append(static_cast<const char*>(t.raw()), bytes);
        o["parameters"] = Json{{"binary_data_size", bytes}};
      } else {
        o["data"] = tensor_json_data(t);
      }
      out.push_back(std::move(o));
    }
    Json body{{"model_name", model}, {"model_version", kKserveModelVersion}};
    if (!id.empty()) body["id"] = id;
    body["outputs"] = std::move(out);
    std::string text = dump(body);
    const bool any_binary = std::any_of(outputs.begin(), outputs.end(),
                                        [](const TensorOutputChoice& c) { return c.binary; });
    if (!any_binary) {
      writer->respond(200, std::move(text));
    } else {
      const std::string header_len = std::to_string(text.size());
      text += binary;
      writer->respond(200, std::move(text), "application/octet-stream",
                      {{"Inference-Header-Content-Length", header_len}});
    }
    metrics->request_done(kApi, 200);
  }
};

void tensor_infer(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer,
                  ModelHost& host, ServeMetrics& metrics,
                  const std::shared_ptr<runtime::TensorSession>& session) {
  const auto [header, binary] = split_infer_body(req);
  KserveTensorRequest in = parse_kserve_tensor_json(parse_json_object(header), binary);
  auto call = std::make_shared<TensorCall>();
  call->writer = std::move(writer);
  call->metrics = &metrics;
  call->model = host.name();
  call->id = in.id;
  call->outputs = kserve_tensor_outputs(*session, in);
  for (const models::TensorSpec& s : session->signature().outputs) {
    call->names.push_back(s.api_name);
    call->datatypes.push_back(kserve_spec_datatype(s));
  }
  session->submit(kserve_tensor_feeds(*session, in),
                  [call](std::vector<Tensor> outputs, std::optional<Error> error) {
                    call->done(outputs, error);
                  });
}

// One infer request: collects the whole output on the engine thread, answers on the final event.
struct InferCall {
  std::shared_ptr<ResponseWriter> writer;
  ServeMetrics* metrics = nullptr;
  std::string model, id;
  std::vector<std::string> outputs;
  std::string text;
  std::vector<int32_t> ids;
  TokenClock clock;

  void on_event(const runtime::EngineEvent& ev) {
    metrics->observe_token(ev, clock);
    if (ev.token >= 0) ids.push_back(ev.token);
    text += ev.text;
    if (!ev.finished) return;
    answer(ev);
    metrics->generation_done(ev);
  }

  // The response to the final event: the outputs, or the error it finished with.
  void answer(const runtime::EngineEvent& ev) {
    const auto cause = writer->closed() ? CancelCause::kClient : CancelCause::kServer;
    if (const std::optional<Error> e = finish_error(ev, cause)) return fail(*writer, *metrics, *e);
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
    Json body{{"model_name", model}, {"model_version", kKserveModelVersion}};
    if (!id.empty()) body["id"] = id;
    body["parameters"] = Json{{"finish_reason", finish_reason(ev.finish)},
                              {"prompt_tokens", ev.usage.prompt_tokens},
                              {"completion_tokens", ev.usage.completion_tokens}};
    body["outputs"] = std::move(out);
    reply(*writer, *metrics, 200, body);
  }
};

void infer(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer, ModelHost& host,
           ServeMetrics& metrics, const std::string& model) {
  if (auto session = admit_tensor(host, model, "model_name")) {
    return tensor_infer(req, std::move(writer), host, metrics, session);
  }
  const KserveInferRequest in = parse_kserve_json(parse_json_object(req.body));
  int32_t lora = -1;
  auto engine = admit(host, model, "model_name", &lora);
  runtime::EngineRequest er =
      kserve_engine_request(host, *engine, in, in.id.empty() ? req.request_id : in.id);
  er.lora = lora;
  auto call = std::make_shared<InferCall>();
  call->writer = writer;
  call->metrics = &metrics;
  call->model = host.model_name(lora);
  call->id = in.id;
  call->outputs = in.outputs;
  const uint64_t handle = engine->submit(std::move(er), [call](const runtime::EngineEvent& ev) {
    call->on_event(ev);
  });
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
                 Json{{"name", "sampan"}, {"version", kKserveServerVersion},
                      {"extensions", Json::array()}});
  }
  if (p.size() == 3 && p[1] == "health" && (p[2] == "live" || p[2] == "ready")) {
    if (!method_is(req, "GET", w, metrics)) return;
    const bool ok = p[2] == "live" || ready;
    return reply(w, metrics, ok ? 200 : 503, Json{{p[2] == "live" ? "live" : "ready", ok}});
  }
  if (p.size() >= 3 && p[1] == "models") {
    const std::string model(p[2]);
    // Optional "/versions/{v}"; the served model has the one version kKserveModelVersion.
    const bool versioned = p.size() >= 5 && p[3] == "versions";
    check_kserve_model(host, model, versioned ? std::string(p[4]) : "");
    const size_t rest = versioned ? 5 : 3;
    if (p.size() == rest) {
      if (!method_is(req, "GET", w, metrics)) return;
      if (auto session = host.tensor_session()) {
        return reply(w, metrics, 200, tensor_model_metadata(model, *session));
      }
      return reply(w, metrics, 200, model_metadata(model));
    }
    if (p.size() == rest + 1 && p[rest] == "ready") {
      if (!method_is(req, "GET", w, metrics)) return;
      return reply(w, metrics, ready ? 200 : 503, Json{{"name", model}, {"ready", ready}});
    }
    if (p.size() == rest + 1 && p[rest] == "infer") {
      if (!method_is(req, "POST", w, metrics)) return;
      return infer(req, std::move(writer), host, metrics, model);
    }
  }
  fail(w, metrics, Error(ErrorCode::kNotFound, fmt::format("no route for {}", req.path)));
}

}  // namespace

std::string kserve_error_json(const std::string& message) {
  return dump(Json{{"error", message}});
}

void handle_kserve(const HttpRequest& req, std::shared_ptr<ResponseWriter> writer,
                   ModelHost& host, ServeMetrics& metrics) {
  // Whatever a request throws before it is submitted is answered in the protocol's error shape.
  try {
    dispatch(req, writer, host, metrics);
  } catch (...) {
    const Error e = current_error();
    if (http_status(e.code()) >= 500)
      log::warn("request {} {} {}: {}", req.request_id, req.method, req.path, e.what());
    fail(*writer, metrics, e);
  }
}

}  // namespace sampan::server
