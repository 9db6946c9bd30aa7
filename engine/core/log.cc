#include "engine/core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <fmt/chrono.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <cstdlib>

namespace sampan::log {
namespace {

std::shared_ptr<spdlog::logger> make_logger() {
  // Logs go to stderr: stdout belongs to command output (ids, rendered prompts, tables).
  auto logger = spdlog::stderr_color_mt("sampan");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  logger->set_level(spdlog::level::trace);
  return logger;
}

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> l = make_logger();
  return *l;
}

Level initial_level() {
  Level l = Level::kInfo;
  if (const char* env = std::getenv("SAMPAN_LOG_LEVEL")) parse_level(env, &l);
  return l;
}

std::atomic<Level>& level_slot() {
  static std::atomic<Level> slot{initial_level()};
  return slot;
}

std::atomic<bool> g_json{false};

const char* level_name(Level l) {
  switch (l) {
    case Level::kTrace: return "trace";
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarn: return "warn";
    case Level::kError: return "error";
    case Level::kOff: return "off";
  }
  return "?";
}

}  // namespace

void set_json(bool json) {
  if (json == g_json.exchange(json)) return;
  logger().set_pattern(json ? "%v" : "%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
}

void set_level(Level l) { level_slot().store(l); }
Level level() { return level_slot().load(std::memory_order_relaxed); }

bool parse_level(std::string_view text, Level* out) {
  static constexpr std::pair<std::string_view, Level> kNames[] = {
      {"trace", Level::kTrace}, {"debug", Level::kDebug}, {"info", Level::kInfo},
      {"warn", Level::kWarn},   {"error", Level::kError}, {"off", Level::kOff}};
  for (const auto& [name, l] : kNames) {
    if (text == name) {
      *out = l;
      return true;
    }
  }
  return false;
}

void write(Level l, std::string_view message) {
  std::string json_line;
  if (g_json.load(std::memory_order_relaxed)) {
    const auto now = std::chrono::system_clock::now();
    // Messages may quote client input that is not valid UTF-8: replace, never throw.
    const std::string msg = nlohmann::json(std::string(message))
                                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    json_line = fmt::format(R"({{"ts":"{:%Y-%m-%dT%H:%M:%S}Z","level":"{}","msg":{}}})",
                            std::chrono::floor<std::chrono::milliseconds>(now), level_name(l),
                            msg);
    message = json_line;
  }
  switch (l) {
    case Level::kTrace: logger().trace("{}", message); break;
    case Level::kDebug: logger().debug("{}", message); break;
    case Level::kInfo: logger().info("{}", message); break;
    case Level::kWarn: logger().warn("{}", message); break;
    case Level::kError: logger().error("{}", message); break;
    case Level::kOff: break;
  }
}

}  // namespace sampan::log
