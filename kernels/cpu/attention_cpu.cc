#include "kernels/cpu/attention_cpu.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_avx2.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::cpu {
namespace detail {

void attention_range_avx2(const AttentionRange& a) { attention_range_dispatch<Avx2>(a); }

}  // namespace detail

namespace {

// A decode step has only n_kv_heads (token, KV head) tasks, often fewer than the workers want;
// then each task's key range is split (split-K, merged afterwards). Below this many keys per
// piece the merge and the hand-off cost more than the parallelism brings.
constexpr int64_t kMinSplitKeys = 256;

int64_t first_key(int32_t pos, int64_t window) {
  return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

// Per-thread scratch, grown once: attention runs every layer of every step and must not allocate.
float* thread_scratch(int64_t n) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// Folds the n_split partial results of one (token, KV head) into out: [group, head_dim].
// part holds, per split, [group * head_dim] unnormalised sums then [group] maxima, [group] sums.
void merge_splits(const float* part, int64_t n_split, int64_t group, int64_t hd, float* out) {
  const int64_t stride = group * hd + 2 * group;
  for (int64_t g = 0; g < group; ++g) {
    float m = -INFINITY;
    for (int64_t s = 0; s < n_split; ++s) {
      const float ms = part[s * stride + group * hd + g];
      m = ms > m ? ms : m;
    }
    float* o = out + g * hd;
    for (int64_t d = 0; d < hd; ++d) o[d] = 0.0f;
    float l = 0.0f;
    if (m == -INFINITY) continue;
    for (int64_t s = 0; s < n_split; ++s) {
      const float* ps = part + s * stride;
      const float ms = ps[group * hd + g];
      if (ms == -INFINITY) continue;  // an empty piece
      const float f = std::exp(ms - m);
      l += f * ps[group * hd + group + g];
      const float* a = ps + g * hd;
      for (int64_t d = 0; d < hd; ++d) o[d] += f * a[d];
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
  }
}

}  // namespace

void kv_cache_write(int64_t n_tokens, const AttentionShape& shape, const float* k, int64_t ldk,
                    const float* v, int64_t ldv, const int32_t* pos, float* k_cache,
                    float* v_cache) {
  const int64_t width = shape.n_kv_heads * shape.head_dim;
  const size_t bytes = static_cast<size_t>(width) * sizeof(float);
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::memcpy(k_cache + pos[t] * width, k + t * ldk, bytes);
    std::memcpy(v_cache + pos[t] * width, v + t * ldv, bytes);
  }
}

void attention(int64_t n_tokens, const AttentionShape& shape, const float* q, int64_t ldq,
               const float* k_cache, const float* v_cache, const int32_t* pos, float* out,
               int64_t ldo, TaskRunner& runner) {
  if (n_tokens <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0) return;
  const int64_t n_kv = shape.n_kv_heads, hd = shape.head_dim;
  const int64_t group = shape.n_heads / n_kv;
  const int64_t window = shape.sliding_window;
  const auto kernel =
      active_isa() == Isa::kAvx2 ? detail::attention_range_avx2 : detail::attention_range_avx512;
  const int64_t scratch_floats = detail::attention_scratch_floats(group, hd);

  auto range_of = [&](int64_t t, int64_t kvh) {
    detail::AttentionRange a;
    a.q = q + t * ldq + kvh * group * hd;
    a.k = k_cache + kvh * hd;
    a.v = v_cache + kvh * hd;
    a.ld_kv = n_kv * hd;
    a.group = group;
    a.head_dim = hd;
    a.scale = shape.scale;
    a.first = first_key(pos[t], window);
    a.last = pos[t];
    return a;
  };

  const int64_t base_tasks = n_tokens * n_kv;
  const int64_t wanted_tasks = 4 * static_cast<int64_t>(runner.concurrency());
  int64_t n_split = 1;
  if (base_tasks < wanted_tasks) {
    int64_t longest = 0;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const int64_t len = pos[t] - first_key(pos[t], window) + 1;
      longest = len > longest ? len : longest;
    }
    n_split = util::ceil_div(wanted_tasks, base_tasks);
    if (n_split > longest / kMinSplitKeys) n_split = longest / kMinSplitKeys;
    if (n_split < 1) n_split = 1;
  }

  if (n_split == 1) {
    // Later tokens see more keys: hand them out first so that the parallel section ends evenly.
    runner.run(base_tasks, [&](int64_t task) {
      const int64_t t = n_tokens - 1 - task / n_kv, kvh = task % n_kv;
      detail::AttentionRange a = range_of(t, kvh);
      a.scratch = thread_scratch(scratch_floats);
      a.out = out + t * ldo + kvh * group * hd;
      kernel(a);
    });
    return;
  }

  const int64_t part_stride = group * hd + 2 * group;
  thread_local std::vector<float> parts;
  const int64_t part_floats = base_tasks * n_split * part_stride;
  if (static_cast<int64_t>(parts.size()) < part_floats) {
    parts.resize(static_cast<size_t>(part_floats));
  }
  float* part_base = parts.data();
  runner.run(base_tasks * n_split, [&](int64_t task) {
    const int64_t s = task % n_split, tk = task / n_split;
    const int64_t t = tk / n_kv, kvh = tk % n_kv;
    detail::AttentionRange a = range_of(t, kvh);
    float* part = part_base + task * part_stride;
    const int64_t chunk = util::ceil_div(a.last - a.first + 1, n_split);
    const int64_t first = a.first + s * chunk;
    const int64_t last = first + chunk - 1 < a.last ? first + chunk - 1 : a.last;
    if (first > last) {  // a short token's range has fewer pieces than the longest one's
      for (int64_t g = 0; g < group; ++g) {
        part[group * hd + g] = -INFINITY;
        part[group * hd + group + g] = 0.0f;
      }
      return;
    }
    a.first = first;
    a.last = last;
    a.scratch = thread_scratch(scratch_floats);
    a.out = part;
    a.m = part + group * hd;
    a.l = part + group * hd + group;
    kernel(a);
  });
  for (int64_t tk = 0; tk < base_tasks; ++tk) {
    const int64_t t = tk / n_kv, kvh = tk % n_kv;
    merge_splits(part_base + tk * n_split * part_stride, n_split, group, hd,
                 out + t * ldo + kvh * group * hd);
  }
}

}  // namespace sampan::cpu
