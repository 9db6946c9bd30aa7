#include "engine/runtime/device_select.h"

#include <charconv>
#include <string>

#include "engine/core/error.h"

namespace sampan::runtime {

Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda" || text == "gpu") return Device::cuda(0);
  constexpr std::string_view kPrefix = "cuda:";
  if (text.starts_with(kPrefix)) {
    const std::string_view digits = text.substr(kPrefix.size());
    int index = -1;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (!digits.empty() && ec == std::errc() && ptr == digits.data() + digits.size() &&
        index >= 0) {
      return Device::cuda(index);
    }
  }
  fail(ErrorCode::kInvalidArgument, "device '{}' is not one of cpu, cuda, cuda:N", text);
}

void require_device(Device device) {
  switch (device.type) {
    case DeviceType::kCPU: return;
    case DeviceType::kCUDA: {
      SAMPAN_CHECK(cuda_compiled(), ErrorCode::kUnsupported,
                   "{} requested but Sampan was built without CUDA", device.str());
      const int n = cuda_device_count();
      SAMPAN_CHECK(n > 0, ErrorCode::kNotFound, "{} requested but no CUDA device is visible",
                   device.str());
      SAMPAN_CHECK(device.index < n, ErrorCode::kNotFound,
                   "{} requested but only {} CUDA device(s) are visible", device.str(), n);
      return;
    }
  }
}

}  // namespace sampan::runtime
