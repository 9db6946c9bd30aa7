// The engine's one error type. Inside the engine failures are exceptions carrying a kind, a
// precise single-line message (what, where) and, when a request field is at fault, that field's
// name; the CLI, server and C API turn them into exit codes and statuses at their boundary
// (server/gateway.h holds the one table of HTTP and gRPC statuses). Nobody parses the message to
// recover the kind or the field.
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
  // `field`: the request field at fault, spelled as the caller sent it ("top_p",
  // "sampling_parameters.top_p", "messages[0].content"); the message should name it too.
  Error(ErrorCode code, std::string field, std::string message)
      : std::runtime_error(std::move(message)), code_(code), field_(std::move(field)) {}
  ErrorCode code() const { return code_; }
  // The request field the error is about; empty when none is (the whole request, or no request).
  const std::string& field() const { return field_; }

 private:
  ErrorCode code_;
  std::string field_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(code, fmt::format(f, std::forward<Args>(args)...));
}

// The exception being handled (call inside a catch block) as an Error: an Error as it is,
// std::bad_alloc as kOutOfMemory, anything else as kInternal "internal error: <what>". For the
// boundaries nothing may cross (a server thread, a C API call, a session's worker).
Error current_error();

// fail() naming the request field at fault.
template <typename... Args>
[[noreturn]] void fail_field(ErrorCode code, std::string field, fmt::format_string<Args...> f,
                             Args&&... args) {
  throw Error(code, std::move(field), fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace sampan

// SAMPAN_CHECK(cond, code, "format {}", args...): throws sampan::Error when cond is false.
#define SAMPAN_CHECK(cond, code, ...)                   \
  do {                                                  \
    if (!(cond)) ::sampan::fail(code, __VA_ARGS__);     \
  } while (0)
