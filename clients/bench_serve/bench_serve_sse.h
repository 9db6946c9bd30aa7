// `sampan bench-serve`: reads an OpenAI streaming response (Server-Sent Events) into a request
// record as its bytes arrive: a chunk whose text (completions) or delta.content (chat) is
// non-empty counts as one token-carrying chunk at its arrival time; a "usage" object gives the
// token counts; an "error" object, or an event that is not JSON, fails the request.
#pragma once

#include <string>
#include <string_view>

#include "clients/bench_serve/bench_serve_stats.h"

namespace sampan::bench {

class SseReader {
 public:
  explicit SseReader(bool chat) : chat_(chat) {}

  // Bytes of the body as they arrive, `t_s` seconds after the request's start.
  void feed(std::string_view data, double t_s, RequestRecord* record);
  // The body ended: handles an unterminated last event.
  void flush(double t_s, RequestRecord* record);

  bool done() const { return done_; }  // "[DONE]" seen
  bool failed() const { return !error_kind_.empty(); }
  const std::string& error_kind() const { return error_kind_; }
  const std::string& error_message() const { return error_message_; }

 private:
  void line(std::string_view line, double t_s, RequestRecord* record);
  void event(const std::string& payload, double t_s, RequestRecord* record);

  bool chat_;
  bool done_ = false;
  std::string pending_;  // an incomplete line
  std::string data_;     // the data lines of the event being read
  bool have_data_ = false;
  std::string error_kind_, error_message_;
};

}  // namespace sampan::bench
