// The HTTP transport against a plain blocking client written here: it parses status lines,
// headers, Content-Length and chunked bodies by hand, so the server's framing is checked
// independently of Beast.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "server/http_server.h"
#include "server/serve_metrics.h"

using namespace sampan;
using namespace sampan::server;
namespace net = boost::asio;

namespace {

using Clock = std::chrono::steady_clock;

bool wait_until(const std::function<bool()>& pred, double seconds = 10) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-cased names
  std::string body;
  std::vector<std::string> chunks;  // when chunked, in arrival order
  bool chunked = false;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// A blocking HTTP/1.1 client over any byte stream: `read_some` returns >0 bytes, 0 at EOF,
// <0 on error or timeout.
class Client {
 public:
  virtual ~Client() = default;
  virtual void send(const std::string& data) = 0;
  virtual long read_some(char* p, size_t n) = 0;

  // Reads one full response; fails the test on EOF or timeout before it is complete.
  Response read_response() {
    Response r;
    const std::string head = read_until("\r\n\r\n");
    size_t pos = head.find("\r\n");
    const std::string status_line = head.substr(0, pos);
    REQUIRE(status_line.rfind("HTTP/1.", 0) == 0);
    r.status = std::stoi(status_line.substr(9, 3));
    pos += 2;
    while (pos < head.size()) {
      const size_t end = head.find("\r\n", pos);
      if (end == pos) break;
      const std::string line = head.substr(pos, end - pos);
      const size_t colon = line.find(':');
      REQUIRE(colon != std::string::npos);
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      r.headers[lower(line.substr(0, colon))] = value;
      pos = end + 2;
    }
    if (r.status / 100 == 1) return r;  // interim: no body
    if (lower(r.header("transfer-encoding")) == "chunked") {
      r.chunked = true;
      for (;;) {
        const std::string size_line = read_until("\r\n");
        const size_t n = std::stoul(size_line, nullptr, 16);
        if (n == 0) {
          REQUIRE(read_until("\r\n") == "\r\n");  // no trailers
          break;
        }
        std::string data = read_exact(n);
        REQUIRE(read_exact(2) == "\r\n");
        r.body += data;
        r.chunks.push_back(std::move(data));
      }
    } else if (!r.header("content-length").empty()) {
      r.body = read_exact(std::stoul(r.header("content-length")));
    } else {
      r.body = read_to_eof();
    }
    return r;
  }

  Response request(const std::string& method, const std::string& target,
                   const std::string& body = "", const std::string& extra_headers = "") {
    std::string req = method + " " + target + " HTTP/1.1\r\nHost: test\r\n" + extra_headers;
    if (!body.empty() || method == "POST")
      req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    send(req + "\r\n" + body);
    return read_response();
  }

  // True when the peer closes (EOF or reset) within `seconds`, discarding any bytes.
  bool peer_closes(double seconds = 5) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    char tmp[4096];
    while (Clock::now() < deadline) {
      const long n = read_some(tmp, sizeof(tmp));
      if (n == 0) return true;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return true;
    }
    return false;
  }

  std::string buffered;  // bytes read but not yet consumed

 protected:
  void fill() {
    char tmp[16384];
    const long n = read_some(tmp, sizeof(tmp));
    if (n <= 0) FAIL("connection closed or timed out while reading a response (" << n << ")");
    buffered.append(tmp, static_cast<size_t>(n));
  }
  std::string read_until(const std::string& delim) {
    size_t at;
    while ((at = buffered.find(delim)) == std::string::npos) fill();
    std::string out = buffered.substr(0, at + delim.size());
    buffered.erase(0, at + delim.size());
    return out;
  }
  std::string read_exact(size_t n) {
    while (buffered.size() < n) fill();
    std::string out = buffered.substr(0, n);
    buffered.erase(0, n);
    return out;
  }
  std::string read_to_eof() {
    char tmp[16384];
    long n;
    while ((n = read_some(tmp, sizeof(tmp))) > 0) buffered.append(tmp, static_cast<size_t>(n));
    std::string out;
    out.swap(buffered);
    return out;
  }
};

class TcpClient : public Client {
 public:
  explicit TcpClient(int port, double timeout_s = 10) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    timeval tv{};
    tv.tv_sec = static_cast<long>(timeout_s);
    tv.tv_usec = static_cast<long>((timeout_s - static_cast<double>(tv.tv_sec)) * 1e6);
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  }
  ~TcpClient() override { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void send(const std::string& data) override {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;  // the server may close first (refusals); reading shows what it said
      off += static_cast<size_t>(n);
    }
  }
  long read_some(char* p, size_t n) override { return ::recv(fd_, p, n, 0); }

 private:
  int fd_ = -1;
};

// Routes of the test handler.
//   /echo          200 text: method, path, target, body, request id, x-test header
//   /stream?n=N    chunked, N chunks written from another thread, then end()
//   /hold?id=K     keeps the writer (no response yet); on_close counted
//   /hold-stream?id=K   like /hold but starts a stream and writes "first\n"
//   /throw, /drop  a handler that throws / drops its writer
struct Fixture {
  std::mutex mu;
  std::map<int, std::shared_ptr<ResponseWriter>> held;
  std::atomic<int> on_close_calls{0};
  std::vector<std::thread> threads;

  ~Fixture() {
    for (auto& t : threads) t.join();
  }

  HttpHandler handler() {
    return [this](const HttpRequest& req, std::shared_ptr<ResponseWriter> w) {
      const size_t q = req.target.find('?');
      const std::string query = q == std::string::npos ? "" : req.target.substr(q + 1);
      const auto param = [&](const std::string& key) {
        const size_t at = query.find(key + "=");
        return at == std::string::npos ? 0 : std::stoi(query.substr(at + key.size() + 1));
      };
      if (req.path == "/echo" || req.path == "/health") {
        auto xt = req.headers.find("x-test");
        w->respond(200,
                   req.method + "\n" + req.path + "\n" + req.target + "\n" + req.body + "\n" +
                       req.request_id + "\n" + (xt == req.headers.end() ? "" : xt->second),
                   "text/plain", {{"X-Handler", "yes"}});
      } else if (req.path == "/stream") {
        const int n = param("n");
        w->start_stream(200, "text/event-stream");
        std::lock_guard lock(mu);
        threads.emplace_back([w, n] {
          for (int i = 0; i < n; ++i) w->write("data: " + std::to_string(i) + "\n\n");
          w->end();
        });
      } else if (req.path == "/hold" || req.path == "/hold-stream") {
        w->on_close([this] { on_close_calls++; });
        if (req.path == "/hold-stream") {
          w->start_stream(200, "text/event-stream");
          w->write("first\n");
        }
        std::lock_guard lock(mu);
        held[param("id")] = w;
      } else if (req.path == "/throw") {
        throw std::runtime_error("handler exploded");
      } else if (req.path == "/drop") {
        // The writer goes out of scope unanswered.
      } else {
        w->respond(404, error_json("no route", "not_found", "path", 404));
      }
    };
  }

  std::shared_ptr<ResponseWriter> writer(int id) {
    std::lock_guard lock(mu);
    auto it = held.find(id);
    return it == held.end() ? nullptr : it->second;
  }
  size_t held_count() {
    std::lock_guard lock(mu);
    return held.size();
  }
};

HttpServerOptions local_options() {
  HttpServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.threads = 2;
  return o;
}

void raise_fd_limit() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
}

bool is_hex16(const std::string& s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

TEST_CASE("error_json has the OpenAI error shape", "[http]") {
  const auto j = nlohmann::json::parse(error_json("bad \"x\"\n", "invalid_request_error", "", 400));
  CHECK(j["error"]["message"] == "bad \"x\"\n");
  CHECK(j["error"]["type"] == "invalid_request_error");
  CHECK(j["error"]["param"].is_null());
  CHECK(j["error"]["code"] == 400);
  const auto k = nlohmann::json::parse(error_json("m", "t", "max_tokens", 422));
  CHECK(k["error"]["param"] == "max_tokens");
  // Invalid UTF-8 from a client must not throw.
  CHECK_NOTHROW(nlohmann::json::parse(error_json(std::string("\xff\xfe"), "t", "", 400)));
}

TEST_CASE("GET and POST round trips, keep-alive, pipelining, request ids", "[http]") {
  Fixture fx;
  HttpServer server(local_options(), fx.handler(), nullptr);
  const int port = server.start();
  REQUIRE(port > 0);

  TcpClient c(port);
  Response r = c.request("GET", "/echo?a=1&b=2", "", "X-Test: hello\r\n");
  CHECK(r.status == 200);
  CHECK(r.header("content-type") == "text/plain");
  CHECK(r.header("x-handler") == "yes");
  CHECK(is_hex16(r.header("x-request-id")));
  CHECK(r.body == "GET\n/echo\n/echo?a=1&b=2\n\n" + r.header("x-request-id") + "\nhello");

  // Second request on the same connection, with a body and a client request id.
  r = c.request("POST", "/echo", "payload \x01 bytes", "X-Request-Id: client-id-42\r\n");
  CHECK(r.status == 200);
  CHECK(r.header("x-request-id") == "client-id-42");
  CHECK(r.body == "POST\n/echo\n/echo\npayload \x01 bytes\nclient-id-42\n");
  CHECK(server.open_connections() == 1);

  // An unusable id (too long) is replaced by a generated one.
  r = c.request("GET", "/echo", "", "X-Request-Id: " + std::string(200, 'x') + "\r\n");
  CHECK(is_hex16(r.header("x-request-id")));

  // Two requests in one write: answered in order.
  c.send(
      "GET /echo?first HTTP/1.1\r\nHost: t\r\n\r\nPOST /echo?second HTTP/1.1\r\nHost: t\r\n"
      "Content-Length: 3\r\n\r\nabc");
  Response p1 = c.read_response();
  Response p2 = c.read_response();
  CHECK(p1.body.rfind("GET\n/echo\n/echo?first\n", 0) == 0);
  CHECK(p2.body.rfind("POST\n/echo\n/echo?second\nabc\n", 0) == 0);

  // Expect: 100-continue gets the interim response before the body is sent.
  c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  CHECK(c.read_response().status == 100);
  c.send("hello");
  r = c.read_response();
  CHECK(r.status == 200);
  CHECK(r.body.rfind("POST\n/echo\n/echo\nhello\n", 0) == 0);

  // Unknown route: the handler's own error.
  r = c.request("GET", "/nope");
  CHECK(r.status == 404);
  CHECK(nlohmann::json::parse(r.body)["error"]["param"] == "path");

  // Connection: close is honoured.
  r = c.request("GET", "/echo", "", "Connection: close\r\n");
  CHECK(r.status == 200);
  CHECK(lower(r.header("connection")) == "close");
  CHECK(c.peer_closes());
  CHECK(wait_until([&] { return server.open_connections() == 0; }));
}

TEST_CASE("Expect: 100-continue behind an outstanding response is answered after it", "[http]") {
  // A pipelined request whose headers ask for "100 Continue" while the previous response is
  // still pending: the interim response may not go out inside that response, and the client
  // sends no body without it, so the server owes it until the previous response is done (it
  // once sent none, and both sides waited for the idle timeout).
  Fixture fx;
  HttpServer server(local_options(), fx.handler(), nullptr);
  TcpClient c(server.start(), 3.0);
  c.send(
      "GET /hold?id=7 HTTP/1.1\r\nHost: t\r\n\r\n"
      "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  REQUIRE(wait_until([&] { return fx.held_count() == 1; }));
  // Let the session read the second request's headers while the first is still unanswered.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  fx.writer(7)->respond(200, "held", "text/plain", {});
  Response first = c.read_response();
  CHECK(first.status == 200);
  CHECK(first.body == "held");
  CHECK(c.read_response().status == 100);
  c.send("hello");
  Response second = c.read_response();
  CHECK(second.status == 200);
  CHECK(second.body.rfind("POST\n/echo\n/echo\nhello\n", 0) == 0);
}

TEST_CASE("handler failures become 500", "[http]") {
  Fixture fx;
  HttpServer server(local_options(), fx.handler(), nullptr);
  TcpClient c(server.start());
  Response r = c.request("GET", "/throw");
  CHECK(r.status == 500);
  CHECK(nlohmann::json::parse(r.body)["error"]["message"] == "handler exploded");
  r = c.request("GET", "/drop");
  CHECK(r.status == 500);
  r = c.request("GET", "/echo");  // the connection still serves
  CHECK(r.status == 200);
}

TEST_CASE("body limit, malformed requests and header limit", "[http]") {
  Fixture fx;
  ServeMetrics metrics;
  HttpServerOptions o = local_options();
  o.max_body_bytes = 1024;
  HttpServer server(o, fx.handler(), &metrics);
  const int port = server.start();

  {  // exactly at the limit: served
    TcpClient c(port);
    CHECK(c.request("POST", "/echo", std::string(1024, 'a')).status == 200);
  }
  {  // Content-Length over the limit, body sent anyway: 413, then closed
    TcpClient c(port);
    Response r = c.request("POST", "/echo", std::string(5000, 'b'), "X-Request-Id: big-1\r\n");
    CHECK(r.status == 413);
    CHECK(r.header("x-request-id") == "big-1");
    CHECK(lower(r.header("connection")) == "close");
    const auto j = nlohmann::json::parse(r.body);
    CHECK(j["error"]["code"] == 413);
    CHECK(j["error"]["message"].get<std::string>().find("1024") != std::string::npos);
    CHECK(c.peer_closes());
  }
  {  // chunked body that grows over the limit
    TcpClient c(port);
    std::string req = "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 4; ++i) req += "200\r\n" + std::string(512, 'c') + "\r\n";
    c.send(req + "0\r\n\r\n");
    CHECK(c.read_response().status == 413);
    CHECK(c.peer_closes());
  }
  {  // not HTTP at all
    TcpClient c(port);
    c.send("THIS IS NOT HTTP\r\n\r\n");
    Response r = c.read_response();
    CHECK(r.status == 400);
    CHECK(nlohmann::json::parse(r.body)["error"]["message"].get<std::string>().find("malformed") !=
          std::string::npos);
    CHECK(c.peer_closes());
  }
  {  // a header line without a colon
    TcpClient c(port);
    c.send("GET / HTTP/1.1\r\nHost: t\r\nthis is no header\r\n\r\n");
    CHECK(c.read_response().status == 400);
    CHECK(c.peer_closes());
  }
  {  // headers over the 32 KiB header limit
    TcpClient c(port);
    c.send("GET /echo HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(40000, 'h') + "\r\n\r\n");
    CHECK(c.read_response().status == 431);
    CHECK(c.peer_closes());
  }
  // Transport refusals are counted as api "other".
  const std::string text = metrics.render();
  CHECK(text.find("code=\"413\"") != std::string::npos);
  CHECK(text.find("code=\"400\"") != std::string::npos);
  CHECK(text.find("api=\"other\"") != std::string::npos);
}

TEST_CASE("API keys: missing, wrong, right, public paths", "[http]") {
  Fixture fx;
  HttpServerOptions o = local_options();
  o.api_keys = {"first-key", "secret-key"};
  HttpServer server(o, fx.handler(), nullptr);
  TcpClient c(server.start());

  Response r = c.request("GET", "/echo");
  CHECK(r.status == 401);
  CHECK(r.header("www-authenticate") == "Bearer");
  CHECK(nlohmann::json::parse(r.body)["error"]["code"] == 401);
  // The connection stays usable after a 401.
  r = c.request("GET", "/echo", "", "Authorization: Bearer secret-kez\r\n");
  CHECK(r.status == 401);
  r = c.request("GET", "/echo", "", "Authorization: Bearer secret-key-longer\r\n");
  CHECK(r.status == 401);
  r = c.request("GET", "/echo", "", "Authorization: Basic secret-key\r\n");
  CHECK(r.status == 401);
  r = c.request("GET", "/echo", "", "Authorization: Bearer secret-key\r\n");
  CHECK(r.status == 200);
  r = c.request("POST", "/echo", "x", "Authorization: bearer first-key\r\n");
  CHECK(r.status == 200);
  // Public paths match without the query string.
  CHECK(c.request("GET", "/health").status == 200);
  CHECK(c.request("GET", "/health?verbose=1").status == 200);
  CHECK(c.request("GET", "/healthz").status == 401);
}

TEST_CASE("streaming from another thread arrives complete and in order", "[http]") {
  Fixture fx;
  HttpServer server(local_options(), fx.handler(), nullptr);
  TcpClient c(server.start());
  for (int n : {1, 7, 300}) {
    Response r = c.request("GET", "/stream?n=" + std::to_string(n));
    CHECK(r.status == 200);
    CHECK(r.chunked);
    CHECK(r.header("content-type") == "text/event-stream");
    CHECK(is_hex16(r.header("x-request-id")));
    std::string expect;
    for (int i = 0; i < n; ++i) expect += "data: " + std::to_string(i) + "\n\n";
    CHECK(r.body == expect);
    CHECK(!r.chunks.empty());
  }
  // Keep-alive after a stream; a stream that ended never reports on_close.
  CHECK(c.request("GET", "/echo").status == 200);
  CHECK(fx.on_close_calls == 0);
}

TEST_CASE("a client that leaves mid-stream or mid-compute triggers on_close once", "[http]") {
  Fixture fx;
  HttpServer server(local_options(), fx.handler(), nullptr);
  const int port = server.start();
  {
    TcpClient c(port);
    c.send("GET /hold-stream?id=1 HTTP/1.1\r\nHost: t\r\n\r\n");
    REQUIRE(wait_until([&] {
      char tmp[4096];
      const long n = c.read_some(tmp, sizeof(tmp));
      if (n > 0) c.buffered.append(tmp, static_cast<size_t>(n));
      return c.buffered.find("first\n") != std::string::npos;
    }));
    CHECK(c.buffered.find("Transfer-Encoding: chunked") != std::string::npos);
    auto w = fx.writer(1);
    REQUIRE(w);
    CHECK(!w->closed());
    c.close();
    CHECK(wait_until([&] { return fx.on_close_calls == 1; }));
    CHECK(w->closed());
    // Late writes from the engine are ignored.
    for (int i = 0; i < 100; ++i) w->write("late\n");
    w->end();
    w->on_close([&] { fx.on_close_calls++; });  // already gone: called at once (posted)
    CHECK(wait_until([&] { return fx.on_close_calls == 2; }));
  }
  {
    TcpClient c(port);
    c.send("GET /hold?id=2 HTTP/1.1\r\nHost: t\r\n\r\n");
    REQUIRE(wait_until([&] { return fx.writer(2) != nullptr; }));
    c.close();
    CHECK(wait_until([&] { return fx.on_close_calls == 3; }));
    fx.writer(2)->respond(200, "too late");
  }
  CHECK(wait_until([&] { return server.open_connections() == 0; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(fx.on_close_calls == 3);
}

TEST_CASE("connection limit and idle timeout", "[http]") {
  Fixture fx;
  HttpServerOptions o = local_options();
  o.max_connections = 2;
  o.idle_timeout_s = 1.0;
  HttpServer server(o, fx.handler(), nullptr);
  const int port = server.start();

  auto a = std::make_unique<TcpClient>(port);
  TcpClient b(port);
  CHECK(a->request("GET", "/echo").status == 200);
  CHECK(b.request("GET", "/echo").status == 200);
  CHECK(server.open_connections() == 2);
  {
    TcpClient refused(port);
    refused.send("GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
    CHECK(refused.peer_closes());
  }
  a.reset();
  REQUIRE(wait_until([&] { return server.open_connections() == 1; }));
  TcpClient d(port);
  CHECK(d.request("GET", "/echo").status == 200);

  // Idle keep-alive connections are closed after the timeout.
  CHECK(b.peer_closes(3));
  CHECK(d.peer_closes(3));
  CHECK(wait_until([&] { return server.open_connections() == 0; }));
}

TEST_CASE("a stream slower than the idle timeout is not cut", "[http]") {
  Fixture fx;
  HttpServerOptions o = local_options();
  o.idle_timeout_s = 0.2;
  HttpServer server(o, fx.handler(), nullptr);
  TcpClient c(server.start());
  c.send("GET /hold-stream?id=5 HTTP/1.1\r\nHost: t\r\n\r\n");
  REQUIRE(wait_until([&] { return fx.writer(5) != nullptr; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // the engine is thinking
  auto w = fx.writer(5);
  CHECK(!w->closed());
  w->write("second\n");
  w->end();
  Response r = c.read_response();
  CHECK(r.status == 200);
  CHECK(r.body == "first\nsecond\n");
  CHECK(fx.on_close_calls == 0);
}

TEST_CASE("bind failure and bad TLS files are reported", "[http]") {
  Fixture fx;
  HttpServer first(local_options(), fx.handler(), nullptr);
  const int port = first.start();
  HttpServerOptions o = local_options();
  o.port = port;
  HttpServer second(o, fx.handler(), nullptr);
  try {
    second.start();
    FAIL("second bind succeeded");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kIo);
    CHECK(std::string(e.what()).find("cannot listen on 127.0.0.1:" + std::to_string(port)) !=
          std::string::npos);
  }
  HttpServerOptions t = local_options();
  t.tls_cert = "/nonexistent/cert.pem";
  t.tls_key = "/nonexistent/key.pem";
  HttpServer tls(t, fx.handler(), nullptr);
  try {
    tls.start();
    FAIL("missing certificate accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(std::string(e.what()).find("/nonexistent/cert.pem") != std::string::npos);
  }
}

TEST_CASE("stop() closes open streams and late writers are harmless", "[http]") {
  Fixture fx;
  auto server = std::make_unique<HttpServer>(local_options(), fx.handler(), nullptr);
  TcpClient c(server->start());
  c.send("GET /hold-stream?id=7 HTTP/1.1\r\nHost: t\r\n\r\n");
  REQUIRE(wait_until([&] { return fx.writer(7) != nullptr; }));
  auto w = fx.writer(7);
  server->stop_accepting();
  w->write("still streaming\n");
  server->stop();
  CHECK(fx.on_close_calls == 1);
  CHECK(w->closed());
  CHECK(server->open_connections() == 0);
  server.reset();
  w->write("after the server is gone\n");
  w->end();
  CHECK(c.peer_closes());
}

TEST_CASE("TLS with a self-signed certificate", "[http][tls]") {
  // openssl makes the certificate (scripts/setup.sh installs it): missing is a failure.
  REQUIRE(std::system("openssl version > /dev/null 2>&1") == 0);
  const auto dir =
      std::filesystem::temp_directory_path() / ("sampan_http_tls_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string cert = (dir / "cert.pem").string(), key = (dir / "key.pem").string();
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-keyout " +
      key + " -out " + cert + " > /dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);

  Fixture fx;
  HttpServerOptions o = local_options();
  o.tls_cert = cert;
  o.tls_key = key;
  HttpServer server(o, fx.handler(), nullptr);
  const int port = server.start();

  struct TlsClient : Client {
    net::io_context ioc;
    net::ssl::context ctx{net::ssl::context::tls_client};
    net::ssl::stream<net::ip::tcp::socket> stream{ioc, ctx};
    TlsClient(int port, const std::string& ca) {
      ctx.load_verify_file(ca);
      stream.set_verify_mode(net::ssl::verify_peer);
      stream.next_layer().connect(
          {net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
      stream.handshake(net::ssl::stream_base::client);
    }
    void send(const std::string& data) override { net::write(stream, net::buffer(data)); }
    long read_some(char* p, size_t n) override {
      boost::system::error_code ec;
      const size_t got = stream.read_some(net::buffer(p, n), ec);
      if (ec == net::error::eof || ec == net::ssl::error::stream_truncated) return 0;
      if (ec) errno = ECONNRESET;  // peer_closes() reads errno
      return ec ? -1 : static_cast<long>(got);
    }
  };
  {
    TlsClient c(port, cert);
    Response r = c.request("POST", "/echo", "over tls", "X-Request-Id: tls-1\r\n");
    CHECK(r.status == 200);
    CHECK(r.body == "POST\n/echo\n/echo\nover tls\ntls-1\n");
    r = c.request("GET", "/stream?n=50");
    CHECK(r.status == 200);
    CHECK(r.chunks.size() >= 1);
    CHECK(r.body.find("data: 49\n\n") != std::string::npos);
    r = c.request("GET", "/echo", "", "Connection: close\r\n");
    CHECK(r.status == 200);
    CHECK(c.peer_closes());
  }
  {  // plain HTTP to the TLS port is dropped, and the server keeps serving TLS
    TcpClient plain(port);
    plain.send("GET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
    CHECK(plain.peer_closes());
    TlsClient c(port, cert);
    CHECK(c.request("GET", "/echo").status == 200);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("1000 concurrent idle and streaming connections", "[http][load]") {
  raise_fd_limit();
  constexpr int kIdle = 500, kStreams = 500, kRounds = 8;
  Fixture fx;
  HttpServer server(local_options(), fx.handler(), nullptr);
  const int port = server.start();

  std::vector<std::unique_ptr<TcpClient>> idle, streams;
  for (int i = 0; i < kIdle; ++i) {
    idle.push_back(std::make_unique<TcpClient>(port));
    REQUIRE(idle.back()->request("GET", "/echo").status == 200);
  }
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_unique<TcpClient>(port));
    streams.back()->send("GET /hold-stream?id=" + std::to_string(i) +
                         " HTTP/1.1\r\nHost: t\r\n\r\n");
  }
  REQUIRE(wait_until([&] { return fx.held_count() == kStreams; }, 60));
  CHECK(server.open_connections() == kIdle + kStreams);

  // An "engine" thread feeds every stream, interleaved, then ends them.
  std::thread feeder([&] {
    for (int r = 0; r < kRounds; ++r) {
      for (int i = 0; i < kStreams; ++i) {
        fx.writer(i)->write(std::to_string(i) + ":" + std::to_string(r) + "\n");
      }
    }
    for (int i = 0; i < kStreams; ++i) fx.writer(i)->end();
  });
  int complete = 0;
  for (int i = 0; i < kStreams; ++i) {
    std::string expect = "first\n";
    for (int r = 0; r < kRounds; ++r) expect += std::to_string(i) + ":" + std::to_string(r) + "\n";
    Response resp = streams[i]->read_response();
    complete += resp.status == 200 && resp.body == expect;
  }
  feeder.join();
  CHECK(complete == kStreams);
  int served = 0;
  for (auto& c : idle) served += c->request("GET", "/echo").status == 200;
  CHECK(served == kIdle);
  CHECK(fx.on_close_calls == 0);
}
