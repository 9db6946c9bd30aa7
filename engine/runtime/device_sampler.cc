#include "engine/runtime/device_sampler.h"

#include "engine/core/cuda_stream.h"
#include "engine/core/error.h"

#ifdef SAMPAN_WITH_CUDA
#include "kernels/cuda/sampling.cuh"
#endif

namespace sampan::runtime {

bool device_sampling_eligible(const SamplingParams& p) {
  return p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f && !p.logprobs && p.top_logprobs == 0 &&
         p.logit_bias.empty();
}

#ifdef SAMPAN_WITH_CUDA

struct DeviceSampler::Impl {
  Device device;
  CudaStream stream;
  std::shared_ptr<Storage> params;  // [capacity] SamplingRowParams
  std::shared_ptr<Storage> ids;     // [capacity] i32
  size_t capacity = 0;
  std::vector<cuda::SamplingRowParams> host_params;
  explicit Impl(Device d) : device(d), stream(d.index) {}
};

DeviceSampler::DeviceSampler(Device device) {
  SAMPAN_CHECK(device.type == DeviceType::kCUDA, ErrorCode::kInvalidArgument,
               "device sampling needs a CUDA device, not {}", device.str());
  impl_ = std::make_unique<Impl>(device);
}

DeviceSampler::~DeviceSampler() = default;

std::vector<int32_t> DeviceSampler::sample(const Tensor& logits,  // [rows, vocab] f32
                                           std::span<const DeviceSampleRow> rows) {
  Impl& m = *impl_;
  const size_t n = rows.size();
  if (n == 0) return {};
  SAMPAN_CHECK(logits.device() == m.device && logits.dtype() == DType::kF32 &&
                   logits.rank() == 2 && logits.dim(0) == static_cast<int64_t>(n) &&
                   logits.stride(1) == 1,
               ErrorCode::kInternal, "device sampling: logits {} for {} rows on {}",
               logits.str(), n, m.device.str());
  cuda_set_device(m.device.index);
  if (n > m.capacity) {
    m.params.reset();
    m.ids.reset();
    m.capacity = std::max<size_t>(n, 2 * m.capacity);
    m.params = Storage::allocate(m.capacity * sizeof(cuda::SamplingRowParams), m.device);
    m.ids = Storage::allocate(m.capacity * sizeof(int32_t), m.device);
  }
  m.host_params.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const SamplingParams& p = rows[i].params;
    m.host_params[i] = {p.temperature, p.top_k, p.top_p, p.min_p, rows[i].seed, rows[i].step};
  }
  void* stream = m.stream.handle();
  cuda_copy_async(m.params->data(), m.host_params.data(), n * sizeof(cuda::SamplingRowParams),
                  stream);
  check_cuda(cuda::sample_tokens(logits.data<float>(), static_cast<int64_t>(n), logits.dim(1),
                                 logits.stride(0),
                                 static_cast<const cuda::SamplingRowParams*>(m.params->data()),
                                 static_cast<int32_t*>(m.ids->data()),
                                 static_cast<cudaStream_t>(stream)),
             "device sampling launch");
  std::vector<int32_t> out(n);
  cuda_copy_async(out.data(), m.ids->data(), n * sizeof(int32_t), stream);
  // Also keeps host_params alive until the copy that read them is done.
  m.stream.synchronize("device sampling");
  return out;
}

#else

struct DeviceSampler::Impl {};

DeviceSampler::DeviceSampler(Device device) {
  fail(ErrorCode::kUnsupported, "device sampling on {}: Sampan was built without CUDA",
       device.str());
}

DeviceSampler::~DeviceSampler() = default;

std::vector<int32_t> DeviceSampler::sample(const Tensor&, std::span<const DeviceSampleRow>) {
  fail(ErrorCode::kUnsupported, "device sampling: Sampan was built without CUDA");
}

#endif

}  // namespace sampan::runtime
