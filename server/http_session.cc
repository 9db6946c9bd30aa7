// The HTTP connection state machine (see http_server.cc for the design).
#include "server/http_session.h"

#include "server/gateway.h"

namespace sampan::server {

namespace {

std::string new_request_id() {
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   std::hash<std::thread::id>{}(std::this_thread::get_id())};
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

// A client's id is echoed into headers and logs: accept only short printable tokens.
bool usable_request_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

void append_header(std::string& out, std::string_view name, std::string_view value) {
  out.append(name);
  out.append(": ");
  // A CR or LF in a handler-supplied value would split the response (header injection).
  for (char c : value) out.push_back(c == '\r' || c == '\n' ? ' ' : c);
  out.append("\r\n");
}

bool is_http_error(const error_code& ec) {
  return ec.category() == http::make_error_code(http::error::end_of_stream).category();
}

}  // namespace

class Writer final : public ResponseWriter {
 public:
  Writer(std::shared_ptr<SessionBase> session, uint64_t seq)
      : session_(std::move(session)), seq_(seq) {}
  ~Writer() override {
    session_->post([s = session_, seq = seq_] { s->writer_abandoned(seq); });
  }

  void respond(int status, std::string body, std::string content_type, Headers headers) override {
    session_->post([s = session_, seq = seq_, status, body = std::move(body),
                    ct = std::move(content_type), h = std::move(headers)]() mutable {
      s->writer_respond(seq, status, std::move(body), std::move(ct), std::move(h));
    });
  }
  void start_stream(int status, std::string content_type, Headers headers) override {
    session_->post([s = session_, seq = seq_, status, ct = std::move(content_type),
                    h = std::move(headers)]() mutable {
      s->writer_start(seq, status, std::move(ct), std::move(h));
    });
  }
  void write(std::string chunk) override {
    if (chunk.empty() || session_->peer_closed()) return;
    session_->post([s = session_, seq = seq_, c = std::move(chunk)]() mutable {
      s->writer_write(seq, std::move(c));
    });
  }
  void end() override {
    session_->post([s = session_, seq = seq_] { s->writer_end(seq); });
  }
  bool closed() const override { return session_->peer_closed(); }
  void on_close(std::function<void()> callback) override {
    session_->post([s = session_, seq = seq_, cb = std::move(callback)]() mutable {
      s->writer_on_close(seq, std::move(cb));
    });
  }

 private:
  std::shared_ptr<SessionBase> session_;
  uint64_t seq_;
};

// ---- reading ---------------------------------------------------------------------------------

void SessionBase::do_read() {
  if (finished_ || core_->stopping.load()) return;
  parser_.emplace();
  parser_->body_limit(static_cast<uint64_t>(std::max<int64_t>(core_->options.max_body_bytes, 0)));
  parser_->header_limit(kHeaderLimit);
  if (resp_ == Resp::kIdle) arm_timer();
  read_active_ = true;
  async_read_header();
}

void SessionBase::on_header(error_code ec) {
  if (ec || finished_) return on_read(ec);
  // Clients that wait for "100 Continue" before sending a body (curl) would stall a second.
  const auto& req = parser_->get();
  auto expect = req.find(http::field::expect);
  if (expect != req.end() && beast::iequals(expect->value(), "100-continue")) {
    if (resp_ == Resp::kIdle) {
      out_.append("HTTP/1.1 100 Continue\r\n\r\n");
      flush();
    } else {
      // The previous response is still going out (or its write has not completed yet: the
      // client can have read it all and sent this header before on_written runs). The interim
      // response must not land inside it, and the client sends no body without it: owe it
      // until response_finished.
      continue_owed_ = true;
    }
  }
  async_read_body();
}

void SessionBase::on_read(error_code ec) {
  read_active_ = false;
  if (lingering_) return start_linger();  // this read was cancelled to make way for it
  if (finished_) return;
  if (resp_ != Resp::kIdle) {
    // A response is outstanding: a failure here means the client went away; anything else
    // (the next pipelined request, or a malformed one) waits for the response to finish.
    if (ec && !is_http_error(ec)) return peer_gone();
    if (ec == http::error::end_of_stream || ec == http::error::partial_message) {
      return peer_gone();
    }
    has_pending_ = true;
    pending_ec_ = ec;
    return;
  }
  handle_request_result(ec);
}

void SessionBase::handle_request_result(error_code ec) {
  disarm_timer();
  if (core_->stopping.load()) return close_now();
  if (!ec) return dispatch(parser_->release());
  if (ec == http::error::body_limit) {
    return refuse(413,
                  "request body is larger than the limit of " +
                      std::to_string(core_->options.max_body_bytes) + " bytes",
                  "invalid_request_error");
  }
  if (ec == http::error::header_limit) {
    return refuse(
        431,
        "request headers are larger than the limit of " + std::to_string(kHeaderLimit) + " bytes",
        "invalid_request_error");
  }
  if (is_http_error(ec) && ec != http::error::end_of_stream && ec != http::error::partial_message &&
      ec != http::error::need_more) {
    return refuse(400, "malformed HTTP request: " + ec.message(), "invalid_request_error");
  }
  // eof between requests, a reset, or the idle timeout: nothing to answer.
  close_now();
}

void SessionBase::dispatch(http::request<http::string_body> msg) {
  ++seq_;
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.path = req.target.substr(0, req.target.find('?'));
  for (const auto& f : msg) {
    std::string name(f.name_string());
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    auto [it, inserted] = req.headers.emplace(std::move(name), std::string(f.value()));
    if (!inserted) it->second.append(", ").append(f.value());  // repeated fields: one list
  }
  req.body = std::move(msg.body());
  auto rid = req.headers.find("x-request-id");
  req.request_id =
      rid != req.headers.end() && usable_request_id(rid->second) ? rid->second : new_request_id();
  req.remote = remote_;
  request_id_ = req.request_id;
  req_method_ = req.method;
  req_path_ = req.path;
  req_start_ = std::chrono::steady_clock::now();
  req_bytes_ = 0;
  keep_alive_ = msg.keep_alive();
  http10_ = msg.version() < 11;
  resp_ = Resp::kPending;
  on_close_ = nullptr;

  const auto& pub = core_->options.public_paths;
  if (std::find(pub.begin(), pub.end(), req.path) == pub.end()) {
    const auto auth = req.headers.find("authorization");
    std::string_view value;
    if (auth != req.headers.end()) value = auth->second;
    const ApiKeyCheck check =
        check_api_key(core_->options.api_keys, auth != req.headers.end() ? &value : nullptr);
    if (check != ApiKeyCheck::kOk) {
      do_read();  // the connection stays usable
      const int status = kUnauthenticatedStatus.http;
      return send_error(status, api_key_message(check), error_type(status),
                        {{"WWW-Authenticate", "Bearer"}});
    }
  }

  // Read on while the handler works: that read is what notices a client that leaves.
  do_read();
  try {
    core_->handler(req, std::make_shared<Writer>(shared_from_this(), seq_));
  } catch (const std::exception& e) {
    log::error("request {}: handler failed: {}", request_id_, e.what());
    if (resp_ == Resp::kPending) {
      writer_respond(seq_, 500, error_json(e.what(), "internal_error", "", 500), "application/json",
                     {});
    }
  }
}

// A transport-level refusal: answered here, then the connection is closed (the rest of the
// request may still be in flight and cannot be trusted).
void SessionBase::refuse(int status, const std::string& message, const std::string& type) {
  ++seq_;
  request_id_.clear();
  if (parser_) {  // the fields parsed so far; a body limit error comes before "header done"
    auto rid = parser_->get().find("X-Request-Id");
    if (rid != parser_->get().end() && usable_request_id(rid->value())) {
      request_id_ = std::string(rid->value());
    }
  }
  if (request_id_.empty()) request_id_ = new_request_id();
  log::warn("{}: refused with {}: {}", remote_, status, message);
  keep_alive_ = false;
  http10_ = false;
  on_close_ = nullptr;
  send_error(status, message, type, {});
}

// An answer on the transport's own account, counted as api "other".
void SessionBase::send_error(int status, const std::string& message, const std::string& type,
                             const Headers& headers) {
  core_->refused(status);
  std::string body = error_json(message, type, "", status);
  begin_response(status, "application/json", body.size(), false, headers);
  out_.append(body);
  resp_ = Resp::kDone;
  flush();
}

// ---- writing ---------------------------------------------------------------------------------

void SessionBase::begin_response(int status, std::string_view content_type, size_t length,
                                 bool chunked, const Headers& headers) {
  if (core_->draining.load() || core_->stopping.load()) keep_alive_ = false;
  if (status < 100 || status > 999) status = 500;
  const auto st = http::int_to_status(static_cast<unsigned>(status));
  std::string_view reason = http::obsolete_reason(st);
  if (reason.empty() || reason == "<unknown-status>") reason = "Unknown";
  out_.append(http10_ ? "HTTP/1.0 " : "HTTP/1.1 ");
  out_.append(std::to_string(status)).append(" ").append(reason).append("\r\n");
  if (!content_type.empty()) append_header(out_, "Content-Type", content_type);
  if (chunked) {
    append_header(out_, "Transfer-Encoding", "chunked");
  } else if (length != std::string::npos) {
    append_header(out_, "Content-Length", std::to_string(length));
  }
  append_header(out_, "X-Request-Id", request_id_);
  append_header(out_, "Connection", keep_alive_ ? "keep-alive" : "close");
  for (const auto& [name, value] : headers) {
    if (beast::iequals(name, "Content-Length") || beast::iequals(name, "Transfer-Encoding") ||
        beast::iequals(name, "Connection") || beast::iequals(name, "X-Request-Id")) {
      continue;  // framing belongs to the transport
    }
    append_header(out_, name, value);
  }
  out_.append("\r\n");
}

void SessionBase::writer_respond(uint64_t seq, int status, std::string body,
                                 std::string content_type, Headers headers) {
  if (seq != seq_ || resp_ != Resp::kPending || finished_) return;
  begin_response(status, content_type, body.size(), false, headers);
  out_.append(body);
  resp_ = Resp::kDone;
  req_status_ = status;
  req_bytes_ = body.size();
  log_access("");
  flush();
}

void SessionBase::log_access(const char* how) {
  // Probes and scrapes arrive every few seconds from orchestrators: debug level only.
  const bool quiet = req_path_ == "/metrics" || req_path_ == "/health" ||
                     req_path_.rfind("/v2/health/", 0) == 0;
  if (log::level() > (quiet ? log::Level::kDebug : log::Level::kInfo)) return;
  const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - req_start_).count();
  const std::string line = fmt::format("request_id={} remote={} method={} path={} status={} "
                                       "bytes={} ms={:.1f}{}",
                                       request_id_, remote_, req_method_, req_path_, req_status_,
                                       req_bytes_, ms, how);
  if (quiet) {
    log::debug("{}", line);
  } else {
    log::info("{}", line);
  }
}

void SessionBase::writer_start(uint64_t seq, int status, std::string content_type,
                               Headers headers) {
  if (seq != seq_ || resp_ != Resp::kPending || finished_) return;
  // HTTP/1.0 has no chunked encoding: the body runs until the connection closes.
  chunked_ = !http10_;
  if (!chunked_) keep_alive_ = false;
  begin_response(status, content_type, std::string::npos, chunked_, headers);
  resp_ = Resp::kStreaming;
  req_status_ = status;
  flush();
}

void SessionBase::writer_write(uint64_t seq, std::string chunk) {
  if (seq != seq_ || resp_ != Resp::kStreaming || finished_ || chunk.empty()) return;
  if (chunked_) {
    char size[20];
    std::snprintf(size, sizeof(size), "%zx\r\n", chunk.size());
    out_.append(size).append(chunk).append("\r\n");
    req_bytes_ += chunk.size();
  } else {
    req_bytes_ += chunk.size();
    out_.append(chunk);
  }
  if (out_.size() > kMaxPendingOutput) {
    log::warn("{}: request {}: client is not reading the stream; closing", remote_, request_id_);
    return peer_gone();
  }
  flush();
}

void SessionBase::writer_end(uint64_t seq) {
  if (seq != seq_ || finished_) return;
  if (resp_ == Resp::kStreaming) {
    if (chunked_) out_.append("0\r\n\r\n");
    resp_ = Resp::kDone;
    log_access(" stream=1");
    flush();
  } else if (resp_ == Resp::kPending) {
    writer_respond(
        seq, 500,
        error_json("handler ended a response it never started", "internal_error", "", 500),
        "application/json", {});
  }
}

void SessionBase::writer_on_close(uint64_t seq, std::function<void()> callback) {
  if (seq != seq_) return;
  if (resp_ != Resp::kPending && resp_ != Resp::kStreaming) return;
  on_close_ = std::move(callback);
  // The client may already be gone (the handler set its callback late): tell it now.
  if (finished_ && on_close_) {
    auto cb = std::move(on_close_);
    on_close_ = nullptr;
    cb();
  }
}

void SessionBase::writer_abandoned(uint64_t seq) {
  if (seq != seq_ || finished_) return;
  if (resp_ == Resp::kPending) {
    log::error("request {}: handler dropped it without a response", request_id_);
    writer_respond(
        seq, 500,
        error_json("the request was dropped without a response", "internal_error", "", 500),
        "application/json", {});
  } else if (resp_ == Resp::kStreaming) {
    // Ending it cleanly would tell the client the stream was complete; it was not.
    log::error("request {}: handler dropped its stream without end()", request_id_);
    peer_gone();
  }
}

void SessionBase::flush() {
  if (write_active_ || out_.empty() || finished_) return;
  writing_.swap(out_);
  out_.clear();
  write_active_ = true;
  arm_timer();  // a client that reads nothing for the idle timeout is dropped
  async_write_out();
}

void SessionBase::on_written(error_code ec) {
  write_active_ = false;
  if (finished_) return;
  if (ec) return peer_gone();
  writing_.clear();
  if (writing_.capacity() > kKeepBufferBytes) writing_.shrink_to_fit();
  if (!out_.empty()) return flush();
  switch (resp_) {
    case Resp::kDone:
      return response_finished();
    case Resp::kIdle:
      return arm_timer();  // after "100 Continue": waiting for the body
    case Resp::kPending:
    case Resp::kStreaming:
      return disarm_timer();  // the handler sets the pace now
  }
}

void SessionBase::response_finished() {
  resp_ = Resp::kIdle;
  on_close_ = nullptr;
  if (!keep_alive_ || core_->stopping.load()) return close_gracefully();
  if (continue_owed_) {
    continue_owed_ = false;
    out_.append("HTTP/1.1 100 Continue\r\n\r\n");
    flush();
  }
  if (buffer_.size() == 0 && buffer_.capacity() > kKeepBufferBytes && !read_active_) {
    buffer_.shrink_to_fit();
  }
  if (has_pending_) {
    has_pending_ = false;
    return handle_request_result(pending_ec_);
  }
  if (read_active_) {
    arm_timer();
  } else {
    do_read();
  }
}

// ---- closing ---------------------------------------------------------------------------------

void SessionBase::peer_gone() {
  if (finished_) return;
  closed_.store(true, std::memory_order_release);
  const bool outstanding = resp_ == Resp::kPending || resp_ == Resp::kStreaming;
  if (outstanding) log_access(" client_gone=1");
  auto cb = outstanding ? std::move(on_close_) : nullptr;
  on_close_ = nullptr;
  close_now();
  if (cb) {
    try {
      cb();
    } catch (const std::exception& e) {
      log::error("request {}: on_close callback failed: {}", request_id_, e.what());
    }
  }
}

void SessionBase::close_now() {
  closed_.store(true, std::memory_order_release);
  if (registered_) {
    registered_ = false;
    core_->open.fetch_sub(1);
    std::lock_guard lock(core_->sessions_mu);
    core_->sessions.erase(id_);
  }
  finished_ = true;
  disarm_timer();
  error_code ignored;
  tcp().socket().close(ignored);
}

// No more requests: half-close and drain what the client still sends for a moment. Closing
// with unread input makes the kernel send a reset, which can destroy the response (a 413,
// say) before the client has read it.
void SessionBase::close_gracefully() {
  finished_ = true;
  lingering_ = true;
  closed_.store(true, std::memory_order_release);
  arm_timer(kLingerTime);
  if (read_active_) {
    // The read that watched for a disconnect must finish first; on_read continues here.
    error_code ignored;
    tcp().socket().cancel(ignored);
    return;
  }
  start_linger();
}

void SessionBase::arm_timer(std::chrono::steady_clock::duration d) {
  const uint64_t gen = ++timer_gen_;
  timer_.expires_after(d);
  timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
    if (ec || gen != self->timer_gen_) return;
    if (self->lingering_) return self->close_now();
    if (self->finished_) return;
    if (self->resp_ == Resp::kIdle || self->write_active_) self->peer_gone();
  });
}

void SessionBase::disarm_timer() {
  ++timer_gen_;
  timer_.cancel();
}

// ---- the stream-specific half --------------------------------------------------------------

template <bool kTls>
class Session final : public SessionBase {
 public:
  using Stream = std::conditional_t<kTls, beast::ssl_stream<beast::tcp_stream>, beast::tcp_stream>;

  Session(std::shared_ptr<Core> core, tcp::socket socket, std::string remote)
      : SessionBase(core, Executor(socket.get_executor()), std::move(remote)),
        stream_(make_stream(*core, std::move(socket))) {}

 protected:
  beast::tcp_stream& tcp() override { return beast::get_lowest_layer(stream_); }

  void start_handshake() override {
    if constexpr (kTls) {
      tcp().expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(std::max(core_->options.idle_timeout_s, 0.001))));
      stream_.async_handshake(ssl::stream_base::server, [self = shared_this()](error_code ec) {
        if (self->finished_) return;
        if (ec) return self->close_now();
        self->tcp().expires_never();
        self->do_read();
      });
    } else {
      do_read();
    }
  }

  void async_read_header() override {
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_this()](error_code ec, size_t) { self->on_header(ec); });
  }

  void async_read_body() override {
    // While a response is outstanding the unread input must stay bounded.
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_this()](error_code ec, size_t) { self->on_read(ec); });
  }

  void async_write_out() override {
    net::async_write(stream_, net::buffer(writing_),
                     [self = shared_this()](error_code ec, size_t) { self->on_written(ec); });
  }

  // Bounded by the linger deadline armed in close_gracefully().
  void start_linger() override {
    if constexpr (kTls) {
      stream_.async_shutdown([self = shared_this()](error_code) { self->close_now(); });
    } else {
      error_code ignored;
      tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
      linger_read();
    }
  }

 private:
  static Stream make_stream(Core& core, tcp::socket socket) {
    if constexpr (kTls) {
      return Stream(beast::tcp_stream(std::move(socket)), *core.tls);
    } else {
      return Stream(std::move(socket));
    }
  }

  std::shared_ptr<Session> shared_this() {
    return std::static_pointer_cast<Session>(shared_from_this());
  }

  void linger_read() {
    buffer_.clear();
    if (buffer_.capacity() > kKeepBufferBytes) buffer_.shrink_to_fit();
    // Straight on the socket: only the linger deadline bounds this read.
    tcp().socket().async_read_some(buffer_.prepare(4096),
                                   [self = shared_this()](error_code ec, size_t) {
                                     if (ec) return self->close_now();
                                     self->linger_read();
                                   });
  }

  Stream stream_;
};

std::shared_ptr<SessionBase> make_session(std::shared_ptr<Core> core, tcp::socket socket,
                                          std::string remote) {
  if (core->tls) return std::make_shared<Session<true>>(core, std::move(socket), std::move(remote));
  return std::make_shared<Session<false>>(core, std::move(socket), std::move(remote));
}

}  // namespace sampan::server
