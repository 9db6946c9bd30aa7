// Choosing the device a model runs on: parsing "cpu" / "cuda" / "cuda:N" (the --device flag,
// the serve config key `device`, the C API's device setting) and checking, before anything is
// loaded, that the device can be used. Both throw Error with one line the CLI prints as is.
#pragma once

#include <string_view>

#include "engine/core/device.h"
#include "engine/core/tensor.h"

namespace sampan::runtime {

// "cpu", "cuda" (= cuda:0), "gpu" (= cuda:0) or "cuda:N". Throws Error(kInvalidArgument)
// naming the text otherwise.
Device parse_device(std::string_view text);

// Returns when `device` can run a model. Throws Error(kUnsupported) "cuda:0 requested but
// Sampan was built without CUDA", or Error(kNotFound) "cuda:0 requested but no CUDA device is
// visible" (or, for an index beyond the visible devices, how many there are).
void require_device(Device device);

// Named allocation lives with the tensors (engine/core/tensor.h); the runtime's spelling stays.
using sampan::allocate_named;
using sampan::Fill;

}  // namespace sampan::runtime
