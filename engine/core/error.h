// The engine's one error type. Inside the engine failures are exceptions carrying a precise,
// single-line message (what, where); the CLI, server and C API turn them into exit codes and
// statuses at their boundary.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace sampan {

enum class ErrorCode {
  kInvalidArgument,  // the caller's input is wrong (shape, dtype, value)
  kNotFound,         // a file, tensor or name that does not exist
  kInvalidModel,     // a model file or config that is malformed or inconsistent
  kUnsupported,      // valid input this build cannot handle (architecture, dtype, device)
  kOutOfMemory,      // an allocation failed
  kIo,               // the operating system refused a read, map or write
  kInternal,         // a bug in Sampan
  kResourceExhausted,  // a limit is reached right now (queue full, KV cache full); retry later
  kUnavailable,        // the service is not (or no longer) accepting work: loading, shutting down
  kCancelled,          // the caller cancelled or went away
  kDeadlineExceeded,   // the request's time limit passed
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message) : std::runtime_error(std::move(message)), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(code, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace sampan

// SAMPAN_CHECK(cond, code, "format {}", args...): throws sampan::Error when cond is false.
#define SAMPAN_CHECK(cond, code, ...)                   \
  do {                                                  \
    if (!(cond)) ::sampan::fail(code, __VA_ARGS__);     \
  } while (0)
