// HTTP/1.1 transport on Boost.Beast/Asio. Every connection is a Session whose I/O runs as
// asynchronous operations on its own strand, so a few threads serve thousands of connections.
//
// Per connection, at most one request is with the handler at a time. While it is, the next
// request is already being read: that read is what notices a client that goes away (it fails
// with eof/reset) and lets the handler cancel its engine work through on_close; a request that
// arrives meanwhile (pipelining) waits until the current response has been written.
// Outgoing bytes are appended to `out_` and written by one async_write at a time, so writers on
// other threads only post and never block.
#include "server/http_server.h"

#include <sys/resource.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "engine/core/error.h"
#include "engine/core/log.h"

namespace sampan::server {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using boost::system::error_code;
using Headers = std::vector<std::pair<std::string, std::string>>;

std::string error_json(const std::string& message, const std::string& type,
                       const std::string& param, int code) {
  nlohmann::json j;
  j["error"] = {{"message", message},
                {"type", type},
                {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                {"code", code}};
  // Messages may quote client input that is not valid UTF-8: replace, never throw.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

constexpr uint32_t kHeaderLimit = 32 * 1024;     // request line + headers
constexpr size_t kKeepBufferBytes = 16 * 1024;   // larger idle buffers are released
constexpr size_t kMaxPendingOutput = 64u << 20;  // a client this far behind is dropped
constexpr auto kLingerTime = std::chrono::seconds(2);

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

// Every byte is compared so the time does not reveal how much of a key matched.
bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
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

// ---- state shared by the server, its sessions and writers that outlive them ----------------

class SessionBase;

struct Core {
  HttpServerOptions options;
  HttpHandler handler;
  ServeMetrics* metrics = nullptr;
  net::io_context ioc;
  std::optional<ssl::context> tls;
  std::optional<tcp::acceptor> acceptor;  // on `accept_strand`
  net::strand<net::io_context::executor_type> accept_strand{ioc.get_executor()};

  // Writers post to a session's strand from any thread. Once `stopped` is set (under the
  // exclusive lock) the io_context is drained for good and posts are dropped instead.
  std::shared_mutex post_mu;
  bool stopped = false;
  std::atomic<bool> stopping{false};  // stop(): no new requests, no new async work
  std::atomic<bool> draining{false};  // stop_accepting(): close after the current response

  std::atomic<int64_t> open{0};
  std::mutex sessions_mu;
  uint64_t next_session_id = 0;
  std::unordered_map<uint64_t, std::weak_ptr<SessionBase>> sessions;

  void refused(int code) {
    if (metrics != nullptr) metrics->request_done("other", code);
  }
};

// ---- a connection: the state machine, independent of TLS -----------------------------------

class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  using Executor = net::any_io_executor;  // the connection's strand

  SessionBase(std::shared_ptr<Core> core, Executor ex, std::string remote)
      : core_(std::move(core)), ex_(ex), timer_(ex), remote_(std::move(remote)) {}
  virtual ~SessionBase() = default;

  // Runs `fn` on this connection's strand unless the server is gone for good.
  template <typename Fn>
  void post(Fn&& fn) {
    std::shared_lock lock(core_->post_mu);
    if (core_->stopped) return;
    net::post(ex_, std::forward<Fn>(fn));
  }

  void begin() {
    {
      std::lock_guard lock(core_->sessions_mu);
      id_ = core_->next_session_id++;
      core_->sessions.emplace(id_, weak_from_this());
    }
    registered_ = true;
    if (core_->stopping.load()) return close_now();
    start_handshake();
  }

  bool peer_closed() const { return closed_.load(std::memory_order_acquire); }

  // ---- ResponseWriter operations, on the strand; `seq` names the request they answer ----
  void writer_respond(uint64_t seq, int status, std::string body, std::string content_type,
                      Headers headers);
  void writer_start(uint64_t seq, int status, std::string content_type, Headers headers);
  void writer_write(uint64_t seq, std::string chunk);
  void writer_end(uint64_t seq);
  void writer_on_close(uint64_t seq, std::function<void()> callback);
  void writer_abandoned(uint64_t seq);

  // From stop(): the server is going away now.
  void close_hard() {
    if (finished_) return close_now();  // cut a lingering close short too
    peer_gone();
  }
  // From stop_accepting(): an idle keep-alive connection has no work in flight.
  void drain_if_idle() {
    if (finished_ || resp_ != Resp::kIdle) return;
    if (parser_ && parser_->got_some()) return;
    if (buffer_.size() > 0) return;
    close_now();
  }

 protected:
  // ---- transport primitives, per stream type ----
  virtual beast::tcp_stream& tcp() = 0;
  virtual void start_handshake() = 0;    // then calls do_read() or close_now()
  virtual void async_read_header() = 0;  // -> on_header
  virtual void async_read_body() = 0;    // -> on_read
  virtual void async_write_out() = 0;    // writes writing_ -> on_written
  virtual void start_linger() = 0;       // graceful close -> close_now()

  void do_read();
  void on_header(error_code ec);
  void on_read(error_code ec);
  void on_written(error_code ec);
  void close_now();
  void close_gracefully();

  std::shared_ptr<Core> core_;  // first: the io_context outlives the stream below
  Executor ex_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string writing_;    // the bytes of the write in flight
  bool finished_ = false;  // no more requests or responses on this connection
  bool lingering_ = false;

 private:
  enum class Resp { kIdle, kPending, kStreaming, kDone };

  void handle_request_result(error_code ec);
  void dispatch(http::request<http::string_body> req);
  void refuse(int status, const std::string& message, const std::string& type);
  void send_error(int status, const std::string& message, const std::string& type,
                  const Headers& headers);
  void begin_response(int status, std::string_view content_type, size_t length, bool chunked,
                      const Headers& headers);
  void flush();
  void response_finished();
  void peer_gone();
  void arm_timer(std::chrono::steady_clock::duration d);
  void arm_timer() { arm_timer(idle_timeout()); }
  void disarm_timer();
  std::chrono::steady_clock::duration idle_timeout() const {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(std::max(core_->options.idle_timeout_s, 0.001)));
  }

  // One deadline serves the idle wait for a request, a write that makes no progress and the
  // lingering close; the stream's own timers cannot, since the read that watches for a
  // disconnect must stay pending without a deadline through a long response.
  net::steady_timer timer_;
  uint64_t timer_gen_ = 0;
  std::string remote_;
  uint64_t id_ = 0;
  bool registered_ = false;
  std::atomic<bool> closed_{false};

  std::string out_;  // queued bytes not yet handed to a write
  bool write_active_ = false;
  bool read_active_ = false;

  Resp resp_ = Resp::kIdle;
  uint64_t seq_ = 0;
  bool keep_alive_ = true;
  bool http10_ = false;
  bool chunked_ = false;
  std::string request_id_;
  // Access log of the current request: one line when its response is complete.
  std::string req_method_, req_path_;
  std::chrono::steady_clock::time_point req_start_;
  int req_status_ = 0;
  uint64_t req_bytes_ = 0;
  void log_access(const char* how);
  std::function<void()> on_close_;

  // A request (or read error) that arrived while the previous response was still going out.
  bool has_pending_ = false;
  error_code pending_ec_;
};

// The handler's side of one request. Holding it keeps the session object alive (not the
// connection); every call hops to the session's strand.
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
  if (resp_ == Resp::kIdle && expect != req.end() &&
      beast::iequals(expect->value(), "100-continue")) {
    out_.append("HTTP/1.1 100 Continue\r\n\r\n");
    flush();
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

  const auto& keys = core_->options.api_keys;
  const auto& pub = core_->options.public_paths;
  if (!keys.empty() && std::find(pub.begin(), pub.end(), req.path) == pub.end()) {
    auto auth = req.headers.find("authorization");
    bool ok = false;
    if (auth != req.headers.end() && auth->second.size() > 7 &&
        beast::iequals(std::string_view(auth->second).substr(0, 7), "Bearer ")) {
      std::string_view given = std::string_view(auth->second).substr(7);
      for (const auto& k : keys) ok |= constant_time_equal(given, k);
    }
    if (!ok) {
      do_read();  // the connection stays usable
      return send_error(401, "missing or invalid API key (Authorization: Bearer <key>)",
                        "authentication_error", {{"WWW-Authenticate", "Bearer"}});
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

// ---- the server --------------------------------------------------------------------------

struct HttpServer::Impl {
  std::shared_ptr<Core> core = std::make_shared<Core>();
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  bool started = false;
  bool stopped = false;

  void accept();
  void on_accept(error_code ec, tcp::socket socket);
  std::vector<std::shared_ptr<SessionBase>> live_sessions();
};

std::vector<std::shared_ptr<SessionBase>> HttpServer::Impl::live_sessions() {
  std::vector<std::shared_ptr<SessionBase>> out;
  std::lock_guard lock(core->sessions_mu);
  for (auto& [id, weak] : core->sessions) {
    if (auto s = weak.lock()) out.push_back(std::move(s));
  }
  return out;
}

void HttpServer::Impl::accept() {
  if (!core->acceptor || !core->acceptor->is_open() || core->stopping.load()) return;
  // Each connection gets its own strand; the acceptor stays on accept_strand.
  core->acceptor->async_accept(net::make_strand(core->ioc), [this](error_code ec, tcp::socket s) {
    on_accept(ec, std::move(s));
  });
}

void HttpServer::Impl::on_accept(error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !core->acceptor || !core->acceptor->is_open()) return;
  if (ec) {
    // Out of descriptors (EMFILE) and friends: pause instead of spinning on the error.
    log::warn("HTTP accept failed: {}", ec.message());
    auto timer =
        std::make_shared<net::steady_timer>(core->accept_strand, std::chrono::milliseconds(50));
    timer->async_wait([this, timer](error_code) { accept(); });
    return;
  }
  if (core->open.load() >= core->options.max_connections) {
    core->refused(503);
    log::warn("HTTP connection limit ({}) reached: closing a new connection",
              core->options.max_connections);
    error_code ignored;
    socket.close(ignored);
    return accept();
  }
  error_code rec;
  auto ep = socket.remote_endpoint(rec);
  std::string remote = rec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port());
  socket.set_option(tcp::no_delay(true), rec);  // SSE chunks are small and latency matters
  core->open.fetch_add(1);
  std::shared_ptr<SessionBase> session;
  if (core->tls) {
    session = std::make_shared<Session<true>>(core, std::move(socket), std::move(remote));
  } else {
    session = std::make_shared<Session<false>>(core, std::move(socket), std::move(remote));
  }
  // begin() runs on the session's strand like everything else it does.
  session->post([session] { session->begin(); });
  accept();
}

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler, ServeMetrics* metrics)
    : impl_(std::make_unique<Impl>()) {
  impl_->core->options = std::move(options);
  impl_->core->handler = std::move(handler);
  impl_->core->metrics = metrics;
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::start() {
  SAMPAN_CHECK(!impl_->started, ErrorCode::kInvalidArgument, "HttpServer::start() called twice");
  Core& core = *impl_->core;
  const HttpServerOptions& o = core.options;
  SAMPAN_CHECK(o.tls_cert.empty() == o.tls_key.empty(), ErrorCode::kInvalidArgument,
               "TLS needs both a certificate and a key (got cert '{}', key '{}')", o.tls_cert,
               o.tls_key);
  if (!o.tls_cert.empty()) {
    core.tls.emplace(ssl::context::tls_server);
    core.tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                          ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                          ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    error_code ec;
    core.tls->use_certificate_chain_file(o.tls_cert, ec);
    SAMPAN_CHECK(!ec, ErrorCode::kInvalidArgument, "cannot load TLS certificate '{}': {}",
                 o.tls_cert, ec.message());
    core.tls->use_private_key_file(o.tls_key, ssl::context::pem, ec);
    SAMPAN_CHECK(!ec, ErrorCode::kInvalidArgument, "cannot load TLS private key '{}': {}",
                 o.tls_key, ec.message());
    // Idle TLS connections then hold no OpenSSL read/write buffers (~34 KiB each).
    SSL_CTX_set_mode(core.tls->native_handle(), SSL_MODE_RELEASE_BUFFERS);
  }

  // Every connection is a descriptor: make the configured limit reachable.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
      rl.rlim_cur < static_cast<rlim_t>(std::max<int64_t>(o.max_connections, 0) + 64) &&
      rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) log::warn("cannot raise the open-file limit");
  }

  const std::string where = o.host + ":" + std::to_string(o.port);
  try {
    tcp::resolver resolver(core.ioc);
    auto results = resolver.resolve(o.host, std::to_string(o.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service);
    const tcp::endpoint ep = results.begin()->endpoint();
    core.acceptor.emplace(core.accept_strand);
    core.acceptor->open(ep.protocol());
    core.acceptor->set_option(net::socket_base::reuse_address(true));
    core.acceptor->bind(ep);
    core.acceptor->listen(net::socket_base::max_listen_connections);
  } catch (const boost::system::system_error& e) {
    core.acceptor.reset();
    fail(ErrorCode::kIo, "cannot listen on {}: {}", where, e.code().message());
  }
  const int port = core.acceptor->local_endpoint().port();

  impl_->started = true;
  impl_->work.emplace(core.ioc.get_executor());
  net::post(core.accept_strand, [impl = impl_.get()] { impl->accept(); });
  const int n = std::max(1, o.threads);
  for (int i = 0; i < n; ++i) {
    impl_->threads.emplace_back([c = impl_->core] {
      try {
        c->ioc.run();
      } catch (const std::exception& e) {
        log::error("HTTP I/O thread stopped: {}", e.what());
      }
    });
  }
  return port;
}

void HttpServer::stop_accepting() {
  if (!impl_->started) return;
  Core& core = *impl_->core;
  if (core.draining.exchange(true)) return;
  net::post(core.accept_strand, [c = impl_->core] {
    error_code ignored;
    if (c->acceptor) c->acceptor->close(ignored);
  });
  for (auto& s : impl_->live_sessions()) s->post([s] { s->drain_if_idle(); });
}

void HttpServer::stop() {
  if (!impl_->started || impl_->stopped) return;
  impl_->stopped = true;
  Core& core = *impl_->core;
  core.draining = true;
  core.stopping = true;
  net::post(core.accept_strand, [c = impl_->core] {
    error_code ignored;
    if (c->acceptor) c->acceptor->close(ignored);
  });
  for (auto& s : impl_->live_sessions()) s->post([s] { s->close_hard(); });
  // Wait (bounded) for the sessions to see their close, then end the loop for good.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (core.open.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  impl_->work.reset();
  core.ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  {
    std::unique_lock lock(core.post_mu);
    core.stopped = true;
  }
  // Run what was queued before `stopped`: completions of the closed sockets, late posts. They
  // start no new work, and afterwards no handler in the queue holds a session (or the Core).
  core.ioc.restart();
  core.ioc.poll();
  {
    std::lock_guard lock(core.sessions_mu);
    core.sessions.clear();
  }
  core.acceptor.reset();
}

int64_t HttpServer::open_connections() const { return impl_->core->open.load(); }

}  // namespace sampan::server
