// Log facade. Engine code logs through these functions only, so the backend (spdlog today)
// can change without touching callers, and kernels never log at all.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace sampan::log {

enum class Level { kTrace, kDebug, kInfo, kWarn, kError, kOff };

void set_level(Level level);
Level level();
// Parses "trace|debug|info|warn|error|off"; returns false on anything else.
bool parse_level(std::string_view text, Level* out);
void write(Level level, std::string_view message);
// One JSON object per line ({"ts", "level", "msg"}) instead of text, for log collectors.
void set_json(bool json);

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kDebug) write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kInfo) write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kWarn) write(Level::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kError) write(Level::kError, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace sampan::log
