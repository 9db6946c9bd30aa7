// Private to the HTTP transport (http_server.cc, http_session.cc): the state a server shares
// with its connections, and the connection state machine. Not for other code: handlers see only
// server/http_types.h.
#pragma once

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

inline constexpr uint32_t kHeaderLimit = 32 * 1024;     // request line + headers
inline constexpr size_t kKeepBufferBytes = 16 * 1024;   // larger idle buffers are released
inline constexpr size_t kMaxPendingOutput = 64u << 20;  // a client this far behind is dropped
inline constexpr auto kLingerTime = std::chrono::seconds(2);

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
  // A pipelined request's "Expect: 100-continue" that arrived while a response was outstanding:
  // the interim response is sent when that response finishes.
  bool continue_owed_ = false;
};

// The handler's side of one request. Holding it keeps the session object alive (not the
// connection); every call hops to the session's strand.

// Creates the connection object for an accepted socket (plain or TLS per `core.tls`); the caller
// posts begin() to it.
std::shared_ptr<SessionBase> make_session(std::shared_ptr<Core> core, tcp::socket socket,
                                          std::string remote);

}  // namespace sampan::server
