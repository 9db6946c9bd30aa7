#include "engine/train/optimizer.h"

#include <cmath>

#include "engine/core/error.h"

namespace sampan::train {

double clip_grad_norm(const std::vector<std::span<float>>& grads, double max_norm) {
  double ss = 0;
  for (const std::span<float>& g : grads) {
    for (float x : g) ss += static_cast<double>(x) * x;
  }
  const double norm = std::sqrt(ss);
  if (max_norm > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
      const float c = static_cast<float>(coef);
      for (const std::span<float>& g : grads) {
        for (float& x : g) x *= c;
      }
    }
  }
  return norm;
}

void adamw_update(std::span<float> param, std::span<const float> grad, std::span<float> m,
                  std::span<float> v, int64_t step, double lr, const AdamWOptions& o) {
  SAMPAN_CHECK(grad.size() == param.size() && m.size() == param.size() && v.size() == param.size(),
               ErrorCode::kInvalidArgument,
               "adamw_update: param {}, grad {}, m {}, v {} elements differ", param.size(),
               grad.size(), m.size(), v.size());
  SAMPAN_CHECK(step >= 1, ErrorCode::kInvalidArgument, "adamw_update: step {} < 1", step);
  // Python scalars become f32 when they meet f32 tensors, as in torch's CPU kernels.
  const float decay = static_cast<float>(1.0 - lr * o.weight_decay);
  const float w1 = static_cast<float>(1.0 - o.beta1);
  const float b2 = static_cast<float>(o.beta2);
  const float w2 = static_cast<float>(1.0 - o.beta2);
  const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(step));
  const float neg_step = static_cast<float>(-(lr / bc1));
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(o.eps);
  for (size_t i = 0; i < param.size(); ++i) {
    float p = param[i];
    const float g = grad[i];
    if (o.weight_decay != 0) p *= decay;
    // torch's lerp for weight < 0.5: self + weight * (end - self).
    const float mi = w1 < 0.5f ? m[i] + w1 * (g - m[i]) : g - (g - m[i]) * (1.0f - w1);
    const float vi = v[i] * b2 + w2 * g * g;
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    p += neg_step * mi / denom;
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
  }
}

}  // namespace sampan::train
