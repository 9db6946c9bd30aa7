// Shared machinery of the C API (engine/capi/*.cc): the handle registry, the exception-to-status
// guard, and the objects behind the handles.
//
// Handles are never pointers to objects: each is a fresh number from a counter, looked up in a
// registry that maps it to (kind, shared_ptr). So a destroyed or foreign handle is simply not
// found (values are never reused, so a stale handle cannot alias a new object), a handle of the
// wrong kind is refused, and a call that found an object keeps it alive even if another thread
// destroys the handle meanwhile.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "engine/capi/sampan.h"

namespace sampan::capi {

enum class Kind : uint8_t { kConfig, kPredictor, kTensor, kEngine, kParams, kRequest, kEvent };
const char* kind_name(Kind kind);

// The C API's own failures (a status not in sampan::ErrorCode, e.g. INVALID_HANDLE, TIMEOUT).
class ApiError : public std::exception {
 public:
  ApiError(SampanStatus status, std::string message)
      : status_(status), message_(std::move(message)) {}
  SampanStatus status() const { return status_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  SampanStatus status_;
  std::string message_;
};

template <typename... Args>
[[noreturn]] void api_fail(SampanStatus status, fmt::format_string<Args...> f, Args&&... args) {
  throw ApiError(status, fmt::format(f, std::forward<Args>(args)...));
}

// Registers `object`; returns its new handle value (never 0, never reused).
uintptr_t register_handle(Kind kind, std::shared_ptr<void> object);
// Removes a handle (no-op if absent).
void unregister_handle(uintptr_t handle);
// The object of a live handle of `kind`; ApiError(INVALID_HANDLE) otherwise. `what` names the
// parameter in the message.
std::shared_ptr<void> lookup_handle(const void* handle, Kind kind, const char* what);
// Removes a live handle of `kind` and returns its object; ApiError(INVALID_HANDLE) otherwise.
std::shared_ptr<void> take_handle(const void* handle, Kind kind, const char* what);

template <typename T>
std::shared_ptr<T> lookup(const void* handle, Kind kind, const char* what) {
  return std::static_pointer_cast<T>(lookup_handle(handle, kind, what));
}
template <typename T>
std::shared_ptr<T> take(const void* handle, Kind kind, const char* what) {
  return std::static_pointer_cast<T>(take_handle(handle, kind, what));
}
template <typename H>
H* as_handle(uintptr_t value) {
  return reinterpret_cast<H*>(value);
}

// ApiError(INVALID_ARGUMENT) when p is null.
void require_arg(const void* p, const char* what);

// Sets this thread's last error (the message of sampan_last_error).
void set_last_error(std::string message);
void clear_last_error();

// Runs `body`, turning every exception into a status and the thread's last-error message.
SampanStatus translate_current_exception();
template <typename F>
SampanStatus guarded(F&& body) noexcept {
  try {
    body();
    clear_last_error();
    return SAMPAN_OK;
  } catch (...) {
    return translate_current_exception();
  }
}

// True while this thread runs a user callback of the generation API (where blocking calls and
// engine calls are refused: they would stall or deadlock the engine thread).
bool in_callback();
class CallbackScope {
 public:
  CallbackScope();
  ~CallbackScope();
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;
};

}  // namespace sampan::capi
