// Version, status names, the per-thread last error and the handle registry of the C API.
#include <mutex>
#include <new>
#include <unordered_map>

#include "engine/capi/capi_internal.h"
#include "engine/core/error.h"

namespace sampan::capi {
namespace {

thread_local std::string t_last_error;
thread_local int t_callback_depth = 0;

struct Entry {
  Kind kind;
  std::shared_ptr<void> object;
};

struct Registry {
  std::mutex mu;
  std::unordered_map<uintptr_t, Entry> entries;
  // Starts well away from small integers and steps like an aligned pointer, so a handle looks
  // like one in a debugger; what matters is that values are never handed out twice.
  uintptr_t next = 0x5a3d0000;
};

Registry& registry() {
  // Leaked on purpose: handles may be destroyed from static destructors of the host program.
  static Registry* r = new Registry;
  return *r;
}

SampanStatus status_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return SAMPAN_ERROR_INVALID_ARGUMENT;
    case ErrorCode::kNotFound: return SAMPAN_ERROR_NOT_FOUND;
    case ErrorCode::kInvalidModel: return SAMPAN_ERROR_INVALID_MODEL;
    case ErrorCode::kUnsupported: return SAMPAN_ERROR_UNSUPPORTED;
    case ErrorCode::kOutOfMemory: return SAMPAN_ERROR_OUT_OF_MEMORY;
    case ErrorCode::kIo: return SAMPAN_ERROR_IO;
    case ErrorCode::kInternal: return SAMPAN_ERROR_INTERNAL;
    case ErrorCode::kResourceExhausted: return SAMPAN_ERROR_RESOURCE_EXHAUSTED;
    case ErrorCode::kUnavailable: return SAMPAN_ERROR_UNAVAILABLE;
    case ErrorCode::kCancelled: return SAMPAN_ERROR_CANCELLED;
    case ErrorCode::kDeadlineExceeded: return SAMPAN_ERROR_DEADLINE_EXCEEDED;
  }
  return SAMPAN_ERROR_INTERNAL;
}

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kConfig: return "config";
    case Kind::kPredictor: return "predictor";
    case Kind::kTensor: return "tensor";
    case Kind::kEngine: return "engine";
    case Kind::kParams: return "params";
    case Kind::kRequest: return "request";
    case Kind::kEvent: return "event";
  }
  return "?";
}

uintptr_t register_handle(Kind kind, std::shared_ptr<void> object) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.next += 16;
  r.entries.emplace(r.next, Entry{kind, std::move(object)});
  return r.next;
}

void unregister_handle(uintptr_t handle) {
  std::shared_ptr<void> dropped;  // destroyed outside the lock: destructors may call back in
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.entries.find(handle);
  if (it == r.entries.end()) return;
  dropped = std::move(it->second.object);
  r.entries.erase(it);
}

static std::unordered_map<uintptr_t, Entry>::iterator find_checked(Registry& r, const void* handle,
                                                                  Kind kind, const char* what) {
  if (handle == nullptr) {
    api_fail(SAMPAN_ERROR_INVALID_HANDLE, "{} is NULL (expected a {} handle)", what,
             kind_name(kind));
  }
  auto it = r.entries.find(reinterpret_cast<uintptr_t>(handle));
  if (it == r.entries.end()) {
    api_fail(SAMPAN_ERROR_INVALID_HANDLE,
             "{} is not a live {} handle (destroyed, or not made by Sampan)", what,
             kind_name(kind));
  }
  if (it->second.kind != kind) {
    api_fail(SAMPAN_ERROR_INVALID_HANDLE, "{} is a handle of kind '{}', expected kind '{}'",
             what, kind_name(it->second.kind), kind_name(kind));
  }
  return it;
}

std::shared_ptr<void> lookup_handle(const void* handle, Kind kind, const char* what) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return find_checked(r, handle, kind, what)->second.object;
}

std::shared_ptr<void> take_handle(const void* handle, Kind kind, const char* what) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = find_checked(r, handle, kind, what);
  std::shared_ptr<void> object = std::move(it->second.object);
  r.entries.erase(it);
  return object;
}

void require_arg(const void* p, const char* what) {
  if (p == nullptr) api_fail(SAMPAN_ERROR_INVALID_ARGUMENT, "{} is NULL", what);
}

void set_last_error(std::string message) { t_last_error = std::move(message); }
void clear_last_error() { t_last_error.clear(); }

SampanStatus translate_current_exception() {
  // Nothing below may throw out of here: the guard is noexcept. Assigning the message could
  // throw bad_alloc; then the status alone is reported.
  SampanStatus status = SAMPAN_ERROR_INTERNAL;
  try {
    try {
      throw;
    } catch (const ApiError& e) {
      status = e.status();
      set_last_error(e.what());
    } catch (const Error& e) {
      status = status_of(e.code());
      set_last_error(e.what());
    } catch (const std::bad_alloc&) {
      status = SAMPAN_ERROR_OUT_OF_MEMORY;
      set_last_error("out of memory");
    } catch (const std::exception& e) {
      status = SAMPAN_ERROR_INTERNAL;
      set_last_error(std::string("internal error: ") + e.what());
    } catch (...) {
      status = SAMPAN_ERROR_INTERNAL;
      set_last_error("internal error: unknown exception");
    }
  } catch (...) {
  }
  return status;
}

bool in_callback() { return t_callback_depth > 0; }
CallbackScope::CallbackScope() { ++t_callback_depth; }
CallbackScope::~CallbackScope() { --t_callback_depth; }

}  // namespace sampan::capi

using namespace sampan::capi;

extern "C" {

SAMPAN_API const char* sampan_version(void) { return "0.1.0"; }
SAMPAN_API int32_t sampan_abi_version(void) { return SAMPAN_ABI_VERSION; }

SAMPAN_API const char* sampan_status_name(SampanStatus status) {
  switch (status) {
    case SAMPAN_OK: return "SAMPAN_OK";
    case SAMPAN_ERROR_INVALID_ARGUMENT: return "SAMPAN_ERROR_INVALID_ARGUMENT";
    case SAMPAN_ERROR_NOT_FOUND: return "SAMPAN_ERROR_NOT_FOUND";
    case SAMPAN_ERROR_INVALID_MODEL: return "SAMPAN_ERROR_INVALID_MODEL";
    case SAMPAN_ERROR_UNSUPPORTED: return "SAMPAN_ERROR_UNSUPPORTED";
    case SAMPAN_ERROR_OUT_OF_MEMORY: return "SAMPAN_ERROR_OUT_OF_MEMORY";
    case SAMPAN_ERROR_IO: return "SAMPAN_ERROR_IO";
    case SAMPAN_ERROR_INTERNAL: return "SAMPAN_ERROR_INTERNAL";
    case SAMPAN_ERROR_RESOURCE_EXHAUSTED: return "SAMPAN_ERROR_RESOURCE_EXHAUSTED";
    case SAMPAN_ERROR_UNAVAILABLE: return "SAMPAN_ERROR_UNAVAILABLE";
    case SAMPAN_ERROR_CANCELLED: return "SAMPAN_ERROR_CANCELLED";
    case SAMPAN_ERROR_DEADLINE_EXCEEDED: return "SAMPAN_ERROR_DEADLINE_EXCEEDED";
    case SAMPAN_ERROR_INVALID_HANDLE: return "SAMPAN_ERROR_INVALID_HANDLE";
    case SAMPAN_ERROR_TIMEOUT: return "SAMPAN_ERROR_TIMEOUT";
    case SAMPAN_ERROR_END_OF_STREAM: return "SAMPAN_ERROR_END_OF_STREAM";
    default: return "SAMPAN_UNKNOWN";
  }
}

SAMPAN_API const char* sampan_last_error(void) { return t_last_error.c_str(); }

}  // extern "C"
