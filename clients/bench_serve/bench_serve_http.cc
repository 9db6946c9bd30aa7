// The OpenAI-compatible HTTP client of `sampan bench-serve`: one Asio coroutine per request on
// its own strand (a new connection each, "Connection: close", so no request ever waits behind
// another on a shared connection), streaming with stream_options.include_usage, the response
// read as Server-Sent Events as it arrives. The stream's expiry (beast::tcp_stream) bounds every
// step by the request's deadline.
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "engine/core/error.h"
#include "clients/bench_serve/bench_serve_client.h"
#include "clients/bench_serve/bench_serve_sse.h"

namespace sampan::bench {
namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using boost::system::error_code;

struct Url {
  bool tls = false;
  std::string host, port, prefix;
};

Url parse_url(const std::string& url) {
  Url u;
  std::string rest;
  if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    u.tls = true;
    rest = url.substr(8);
  } else {
    fail(ErrorCode::kInvalidArgument, "--url: expected http://HOST[:PORT] or https://..., got '{}'",
         url);
  }
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) u.prefix = rest.substr(slash);
  while (!u.prefix.empty() && u.prefix.back() == '/') u.prefix.pop_back();
  size_t colon = std::string::npos;
  if (!authority.empty() && authority.front() == '[') {  // [v6 address]:port
    const size_t close = authority.find(']');
    SAMPAN_CHECK(close != std::string::npos, ErrorCode::kInvalidArgument, "--url: bad host in '{}'",
                 url);
    u.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size() && authority[close + 1] == ':') colon = close + 1;
  } else {
    colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
  }
  u.port = colon == std::string::npos ? (u.tls ? "443" : "80") : authority.substr(colon + 1);
  SAMPAN_CHECK(!u.host.empty(), ErrorCode::kInvalidArgument, "--url: no host in '{}'", url);
  SAMPAN_CHECK(!u.port.empty() && u.port.find_first_not_of("0123456789") == std::string::npos,
               ErrorCode::kInvalidArgument, "--url: bad port in '{}'", url);
  return u;
}

// The error kind of a transport failure; `connected`: the TCP (and TLS) connection was up.
std::string classify(const error_code& ec, bool connected) {
  if (ec == beast::error::timeout) return "timeout";
  if (!connected) return "connection";
  if (ec.category() == http::make_error_code(http::error::end_of_stream).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message) {
    return "protocol";
  }
  return "connection";
}

// One request in flight.
struct Call {
  RequestRecord record;
  Clock::time_point start;
  Clock::time_point deadline;
  Done done;
  DisconnectPlan plan;  // --disconnect-fraction
  bool finished = false;

  double since_start() const {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
  void fail(std::string kind, std::string message) {
    if (finished) return;
    record.ok = false;
    record.error_kind = std::move(kind);
    record.error = std::move(message);
    finish();
  }
  // Abandoned on purpose: the caller closes the connection right after.
  void abandon() {
    if (finished) return;
    record.ok = false;
    record.disconnected = true;
    finish();
  }
  void finish() {
    if (finished) return;
    finished = true;
    record.e2e_s = since_start();
    done(std::move(record));
  }
};

class HttpClient final : public Client {
 public:
  explicit HttpClient(const ClientOptions& o) : options_(o), url_(parse_url(o.url)) {
    path_ = url_.prefix + (!o.endpoint.empty() ? o.endpoint
                           : o.backend == Backend::kOpenAiChat ? "/v1/chat/completions"
                                                              : "/v1/completions");
    const bool default_port = url_.port == (url_.tls ? "443" : "80");
    const std::string host = url_.host.find(':') != std::string::npos ? "[" + url_.host + "]"
                                                                       : url_.host;
    host_header_ = default_port ? host : host + ":" + url_.port;
    if (url_.tls) {
      tls_.emplace(ssl::context::tls_client);
      if (o.insecure) {
        tls_->set_verify_mode(ssl::verify_none);
      } else {
        tls_->set_verify_mode(ssl::verify_peer);
        error_code ec;
        if (!o.ca_cert.empty()) tls_->load_verify_file(o.ca_cert, ec);
        else tls_->set_default_verify_paths(ec);
        SAMPAN_CHECK(!ec, ErrorCode::kInvalidArgument, "cannot load TLS trust ({}): {}",
                     o.ca_cert.empty() ? "system roots" : o.ca_cert, ec.message());
      }
    }
    work_.emplace(ioc_.get_executor());
    for (int i = 0; i < std::max(1, o.io_threads); ++i) {
      threads_.emplace_back([this] { ioc_.run(); });
    }
  }

  // Every request has reported by now; its coroutine's last steps (closing the socket) still
  // run to the end, so the loop is left to run out rather than stopped.
  ~HttpClient() override {
    work_.reset();
    for (auto& t : threads_) t.join();
  }

  void check_reachable(double wait_s) override {
    auto probe = [this, wait_s]() -> net::awaitable<std::string> {
      Clock::time_point deadline = Clock::now() + to_duration(wait_s);
      std::string why;
      if (url_.tls) {
        ssl::stream<beast::tcp_stream> s(co_await net::this_coro::executor, *tls_);
        why = co_await connect(s, deadline);
        if (why.empty()) close(s);
      } else {
        beast::tcp_stream s(co_await net::this_coro::executor);
        why = co_await connect(s, deadline);
        if (why.empty()) close(s);
      }
      co_return why;
    };
    const std::string why = net::co_spawn(net::make_strand(ioc_), probe, net::use_future).get();
    SAMPAN_CHECK(why.empty(), ErrorCode::kUnavailable, "cannot reach {}: {}", options_.url, why);
  }

  std::string discover_model(double wait_s) override {
    auto get = [this, wait_s]() -> net::awaitable<std::string> {
      const Clock::time_point deadline = Clock::now() + to_duration(wait_s);
      std::string body;
      http::request<http::string_body> req{http::verb::get, url_.prefix + "/v1/models", 11};
      prepare(req);
      if (url_.tls) {
        ssl::stream<beast::tcp_stream> s(co_await net::this_coro::executor, *tls_);
        if ((co_await connect(s, deadline)).empty()) {
          body = co_await simple_exchange(s, req);
        }
      } else {
        beast::tcp_stream s(co_await net::this_coro::executor);
        if ((co_await connect(s, deadline)).empty()) {
          body = co_await simple_exchange(s, req);
        }
      }
      co_return body;
    };
    const std::string body = net::co_spawn(net::make_strand(ioc_), get, net::use_future).get();
    try {
      const auto j = nlohmann::json::parse(body);
      return j.at("data").at(0).at("id").get<std::string>();
    } catch (const std::exception&) {
      return "";
    }
  }

  void start(int64_t index, const Prompt& prompt, Clock::time_point bench_start,
             Done done) override {
    auto call = std::make_shared<Call>();
    call->start = Clock::now();
    call->deadline = call->start + to_duration(options_.timeout_s);
    call->done = std::move(done);
    call->plan = plan_disconnect(options_.disconnect_fraction, options_.disconnect_seed, index);
    call->record.index = index;
    call->record.start_s = std::chrono::duration<double>(call->start - bench_start).count();
    call->record.expected_input_tokens = prompt.expected_input_tokens;
    call->record.max_tokens = prompt.max_tokens;
    auto req = std::make_shared<http::request<http::string_body>>(http::verb::post, path_, 11);
    prepare(*req);
    req->set(http::field::content_type, "application/json");
    req->set(http::field::accept, "text/event-stream");
    req->body() = openai_request_body(options_, prompt);
    req->prepare_payload();
    net::co_spawn(
        net::make_strand(ioc_),
        [this, call, req]() -> net::awaitable<void> { co_await run(*call, *req); },
        [call](std::exception_ptr e) {
          // Nothing in run() should throw; if something did, it is this request's failure.
          if (e) call->fail("protocol", "internal client error");
          call->fail("protocol", "the request ended without a result");  // no-op once finished
        });
  }

 private:
  static Clock::duration to_duration(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  void prepare(http::request<http::string_body>& req) const {
    req.set(http::field::host, host_header_);
    req.set(http::field::user_agent, "sampan-bench-serve");
    if (!options_.api_key.empty()) {
      req.set(http::field::authorization, "Bearer " + options_.api_key);
    }
    req.keep_alive(false);
  }

  net::awaitable<tcp::resolver::results_type> resolve(std::string* why) {
    {
      std::lock_guard lock(resolved_mu_);
      if (resolved_) co_return *resolved_;
    }
    tcp::resolver resolver(co_await net::this_coro::executor);
    error_code ec;
    auto results = co_await resolver.async_resolve(url_.host, url_.port,
                                                   net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      *why = "cannot resolve " + url_.host + ": " + ec.message();
      co_return results;
    }
    std::lock_guard lock(resolved_mu_);
    resolved_ = results;
    co_return results;
  }

  // Empty on success, else why the connection failed.
  net::awaitable<std::string> connect(beast::tcp_stream& s, Clock::time_point deadline) {
    std::string why;
    auto endpoints = co_await resolve(&why);
    if (!why.empty()) co_return why;
    s.expires_at(deadline);
    error_code ec;
    co_await s.async_connect(endpoints, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return ec == beast::error::timeout ? "connect timed out" : ec.message();
    s.socket().set_option(tcp::no_delay(true), ec);
    co_return "";
  }

  net::awaitable<std::string> connect(ssl::stream<beast::tcp_stream>& s,
                                      Clock::time_point deadline) {
    std::string why = co_await connect(beast::get_lowest_layer(s), deadline);
    if (!why.empty()) co_return why;
    if (!SSL_set_tlsext_host_name(s.native_handle(), url_.host.c_str())) {
      co_return "cannot set the TLS server name";
    }
    if (!options_.insecure) s.set_verify_callback(ssl::host_name_verification(url_.host));
    error_code ec;
    co_await s.async_handshake(ssl::stream_base::client,
                               net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return "TLS handshake failed: " + ec.message();
    co_return "";
  }

  // Without a TLS close_notify exchange: the connection is not reused and a server that never
  // answers it must not hold the request.
  static void close(beast::tcp_stream& s) { s.close(); }
  static void close(ssl::stream<beast::tcp_stream>& s) { beast::get_lowest_layer(s).close(); }

  template <class Stream>
  net::awaitable<std::string> simple_exchange(Stream& s, http::request<http::string_body>& req) {
    error_code ec;
    co_await http::async_write(s, req, net::redirect_error(net::use_awaitable, ec));
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    if (!ec) co_await http::async_read(s, buf, res, net::redirect_error(net::use_awaitable, ec));
    close(s);
    co_return ec || res.result_int() != 200 ? std::string() : res.body();
  }

  net::awaitable<void> run(Call& call, http::request<http::string_body>& req) {
    if (url_.tls) {
      ssl::stream<beast::tcp_stream> s(co_await net::this_coro::executor, *tls_);
      const std::string why = co_await connect(s, call.deadline);
      if (!why.empty()) co_return call.fail(why == "connect timed out" ? "timeout" : "connection", why);
      co_await exchange(s, call, req);
      close(s);
    } else {
      beast::tcp_stream s(co_await net::this_coro::executor);
      const std::string why = co_await connect(s, call.deadline);
      if (!why.empty()) co_return call.fail(why == "connect timed out" ? "timeout" : "connection", why);
      co_await exchange(s, call, req);
      close(s);
    }
  }

  template <class Stream>
  net::awaitable<void> exchange(Stream& s, Call& call, http::request<http::string_body>& req) {
    error_code ec;
    co_await http::async_write(s, req, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return call.fail(classify(ec, true), "sending the request: " + ec.message());
    // Abandoned before reading any response: run() closes the connection on return.
    if (call.plan.abandon && call.plan.after_chunks == 0) co_return call.abandon();

    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    SseReader sse(options_.backend == Backend::kOpenAiChat);
    bool streaming = false;
    std::string error_body;
    auto feed = [&](std::string_view data) {
      if (streaming) sse.feed(data, call.since_start(), &call.record);
      else if (error_body.size() < 4096) error_body.append(data.substr(0, 4096));
    };
    auto on_chunk = [&](std::uint64_t, std::string_view body, error_code&) -> std::size_t {
      feed(body);
      return body.size();
    };
    parser.on_chunk_body(on_chunk);

    co_await http::async_read_header(s, buf, parser, net::redirect_error(net::use_awaitable, ec));
    if (ec) co_return call.fail(classify(ec, true), "reading the response: " + ec.message());
    const int status = parser.get().result_int();
    const auto ct = parser.get()[http::field::content_type];
    streaming = status == 200 && ct.substr(0, 17) == "text/event-stream";
    size_t fed = 0;
    while (!parser.is_done()) {
      co_await http::async_read_some(s, buf, parser, net::redirect_error(net::use_awaitable, ec));
      const std::string& body = parser.get().body();  // non-chunked bodies land here
      if (body.size() > fed) {
        feed(std::string_view(body).substr(fed));
        fed = body.size();
      }
      if (ec) break;
      if (sse.failed()) break;  // the server reported an error: no need to read on
      if (call.plan.abandon && streaming && !parser.is_done() &&
          call.record.chunk_s.size() >= static_cast<size_t>(call.plan.after_chunks)) {
        // Abandoned after enough chunks: run() closes the connection mid-stream on return. (A
        // stream that ends first simply completes.)
        co_return call.abandon();
      }
    }
    if (sse.failed()) co_return call.fail(sse.error_kind(), sse.error_message());
    if (ec) {
      co_return call.fail(classify(ec, true),
                          "reading the stream after " + std::to_string(call.record.chunk_s.size()) +
                              " chunks: " + ec.message());
    }
    if (status != 200) co_return call.fail("http_" + std::to_string(status), error_text(error_body));
    if (!streaming) {
      co_return call.fail("protocol", "expected a text/event-stream response, got '" +
                                          std::string(ct) + "'");
    }
    sse.flush(call.since_start(), &call.record);
    if (sse.failed()) co_return call.fail(sse.error_kind(), sse.error_message());
    call.record.ok = true;
    call.finish();
  }

  // The "error.message" of an OpenAI error body, else the body's start.
  static std::string error_text(const std::string& body) {
    try {
      const auto j = nlohmann::json::parse(body);
      if (j.contains("error") && j["error"].is_object() && j["error"].contains("message")) {
        return j["error"]["message"].get<std::string>();
      }
    } catch (const std::exception&) {
    }
    return body.substr(0, 200);
  }

  ClientOptions options_;
  Url url_;
  std::string path_, host_header_;
  std::optional<ssl::context> tls_;
  net::io_context ioc_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  std::mutex resolved_mu_;
  std::optional<tcp::resolver::results_type> resolved_;
};

}  // namespace

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kOpenAiCompletions: return "openai-completions";
    case Backend::kOpenAiChat: return "openai-chat";
    case Backend::kGrpcGenerate: return "grpc-generate";
  }
  return "?";
}

std::string openai_request_body(const ClientOptions& options, const Prompt& prompt) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!options.model.empty()) j["model"] = options.model;
  if (options.backend == Backend::kOpenAiChat) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (prompt.messages.empty()) {
      messages.push_back({{"role", "user"}, {"content", prompt.text}});
    } else {
      for (const ChatTurn& t : prompt.messages) {
        messages.push_back({{"role", t.role}, {"content", t.content}});
      }
    }
    j["messages"] = std::move(messages);
  } else {
    j["prompt"] = prompt.text;
  }
  j["max_tokens"] = prompt.max_tokens;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  if (options.ignore_eos) j["ignore_eos"] = true;
  if (!options.extra_body.empty()) {
    const auto extra = nlohmann::ordered_json::parse(options.extra_body);
    for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::unique_ptr<Client> make_http_client(const ClientOptions& options) {
  if (!options.extra_body.empty()) {
    nlohmann::json extra;
    try {
      extra = nlohmann::json::parse(options.extra_body);
    } catch (const std::exception& e) {
      fail(ErrorCode::kInvalidArgument, "--extra-body: not valid JSON: {}", e.what());
    }
    SAMPAN_CHECK(extra.is_object(), ErrorCode::kInvalidArgument,
                 "--extra-body: expected a JSON object");
  }
  return std::make_unique<HttpClient>(options);
}

}  // namespace sampan::bench
