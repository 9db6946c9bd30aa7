// The optimizer of LoRA training: AdamW with decoupled weight decay and bias correction, exactly
// torch.optim.AdamW's single-tensor update (f32 arithmetic in torch's order), and global-norm
// gradient clipping with torch.nn.utils.clip_grad_norm_'s semantics.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace sampan::train {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled (Loshchilov & Hutter), as torch.optim.AdamW
};

// The L2 norm of all gradients together (summed in double). When max_norm > 0 and the norm
// exceeds it, every gradient is multiplied by max_norm / (norm + 1e-6), as
// clip_grad_norm_ does. Returns the norm before clipping.
double clip_grad_norm(const std::vector<std::span<float>>& grads, double max_norm);

// One AdamW step of one parameter tensor at step number `step` (1 for the first step), as
// torch.optim.AdamW(foreach=False) computes it:
//   p *= 1 - lr·wd;  m = lerp(m, g, 1 - β1);  v = β2 v + (1 - β2) g²;
//   p -= lr / (1 - β1^t) · m / (sqrt(v) / sqrt(1 - β2^t) + eps).
// param, grad, m, v: [n] each.
void adamw_update(std::span<float> param, std::span<const float> grad, std::span<float> m,
                  std::span<float> v, int64_t step, double lr, const AdamWOptions& options);

}  // namespace sampan::train
