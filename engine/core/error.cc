#include "engine/core/error.h"

#include <new>

namespace sampan {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kInvalidModel: return "invalid model";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kOutOfMemory: return "out of memory";
    case ErrorCode::kIo: return "i/o error";
    case ErrorCode::kInternal: return "internal error";
    case ErrorCode::kResourceExhausted: return "resource exhausted";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kCancelled: return "cancelled";
    case ErrorCode::kDeadlineExceeded: return "deadline exceeded";
  }
  return "error";
}

Error current_error() {
  try {
    throw;
  } catch (const Error& e) {
    return e;
  } catch (const std::bad_alloc&) {
    return Error(ErrorCode::kOutOfMemory, "out of memory");
  } catch (const std::exception& e) {
    return Error(ErrorCode::kInternal, fmt::format("internal error: {}", e.what()));
  } catch (...) {
    return Error(ErrorCode::kInternal, "internal error: unknown exception");
  }
}

}  // namespace sampan
