#include "clients/bench_serve/bench_serve_sse.h"

#include <nlohmann/json.hpp>

namespace sampan::bench {

void SseReader::feed(std::string_view data, double t_s, RequestRecord* record) {
  pending_.append(data);
  size_t from = 0;
  for (size_t nl; (nl = pending_.find('\n', from)) != std::string::npos; from = nl + 1) {
    std::string_view l(pending_.data() + from, nl - from);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    line(l, t_s, record);
  }
  pending_.erase(0, from);
}

void SseReader::flush(double t_s, RequestRecord* record) {
  if (!pending_.empty()) {
    std::string last = std::move(pending_);
    pending_.clear();
    line(last, t_s, record);
  }
  line("", t_s, record);
}

void SseReader::line(std::string_view l, double t_s, RequestRecord* record) {
  if (l.empty()) {  // the end of an event
    if (have_data_) event(data_, t_s, record);
    data_.clear();
    have_data_ = false;
    return;
  }
  if (l.front() == ':') return;  // a comment (keep-alive)
  if (l.substr(0, 5) != "data:") return;  // event:, id:, retry: carry nothing we measure
  l.remove_prefix(5);
  if (!l.empty() && l.front() == ' ') l.remove_prefix(1);
  if (have_data_) data_.push_back('\n');
  data_.append(l);
  have_data_ = true;
}

void SseReader::event(const std::string& payload, double t_s, RequestRecord* record) {
  if (failed()) return;
  if (payload == "[DONE]") {
    done_ = true;
    return;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(payload);
  } catch (const nlohmann::json::exception&) {
    error_kind_ = "protocol";
    error_message_ = "an event is not JSON: " + payload.substr(0, 120);
    return;
  }
  if (!j.is_object()) {
    error_kind_ = "protocol";
    error_message_ = "an event is not a JSON object";
    return;
  }
  if (const auto e = j.find("error"); e != j.end() && !e->is_null()) {
    // An error after the 200 header: the status it would have had, when the server says.
    const auto code = e->is_object() ? e->find("code") : e->end();
    error_kind_ = code != e->end() && code->is_number_integer()
                      ? "http_" + std::to_string(code->get<int64_t>())
                      : "server_error";
    const auto msg = e->is_object() ? e->find("message") : e->end();
    error_message_ = msg != e->end() && msg->is_string() ? msg->get<std::string>() : e->dump();
    return;
  }
  if (const auto c = j.find("choices"); c != j.end() && c->is_array()) {
    bool tokens = false;
    for (const auto& choice : *c) {
      if (!choice.is_object()) continue;
      const nlohmann::json* text = nullptr;
      if (chat_) {
        const auto d = choice.find("delta");
        if (d != choice.end() && d->is_object()) {
          const auto content = d->find("content");
          if (content != d->end()) text = &*content;
        }
      } else if (const auto t = choice.find("text"); t != choice.end()) {
        text = &*t;
      }
      if (text != nullptr && text->is_string() && !text->get_ref<const std::string&>().empty()) {
        tokens = true;
      }
    }
    if (tokens) {
      record->chunk_s.push_back(t_s);
      record->chunk_tokens.push_back(1);
    }
  }
  if (const auto u = j.find("usage"); u != j.end() && u->is_object()) {
    const auto p = u->find("prompt_tokens");
    const auto c = u->find("completion_tokens");
    if (p != u->end() && p->is_number_integer()) record->input_tokens = p->get<int64_t>();
    if (c != u->end() && c->is_number_integer()) record->output_tokens = c->get<int64_t>();
  }
}

}  // namespace sampan::bench
