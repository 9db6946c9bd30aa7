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
#include "server/http_session.h"

#include <nlohmann/json.hpp>

namespace sampan::server {

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
  std::shared_ptr<SessionBase> session = make_session(core, std::move(socket), std::move(remote));
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
