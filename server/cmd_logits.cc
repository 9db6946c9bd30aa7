// sampan logits --model DIR --ids 1,2,3 --out FILE.npy [--chunk N] [--threads N] [--lora DIR]
// Writes the f32 logits of every position, shape [n_ids, vocab]. Acceptance checks and the
// end-to-end tests depend on this interface: keep it stable.
#include <charconv>

#include "engine/core/error.h"
#include "engine/core/npy.h"
#include "engine/runtime/causal_lm.h"
#include "server/commands.h"
#include "server/model_flags.h"

namespace sampan::cli {

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  SAMPAN_CHECK(!text.empty(), ErrorCode::kInvalidArgument, "--ids: no token ids given");
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    SAMPAN_CHECK(!item.empty() && ec == std::errc() && ptr == item.data() + item.size() && v >= 0 &&
                     v <= INT32_MAX,
                 ErrorCode::kInvalidArgument, "--ids: element {} ('{}') is not a token id",
                 ids.size(), item);
    ids.push_back(static_cast<int32_t>(v));
    start = end + 1;
  }
  return ids;
}

Runner add_logits(CLI::App& app) {
  struct Args {
    std::string model, ids, out;
    int64_t chunk = 0;
    int threads = 0;
    models::ModelBuildOptions build;
    Device device;
    std::string lora;  // --lora DIR
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("logits", "Write the logits of every position as a .npy file");
  cmd->add_option("--model", a->model, "model directory or .gguf file")->required();
  cmd->add_option("--ids", a->ids, "comma-separated token ids, e.g. 1,2,3")->required();
  cmd->add_option("--out", a->out, "output .npy file, float32 [n_ids, vocab]")->required();
  cmd->add_option("--chunk", a->chunk,
                  "feed the ids through the KV cache this many at a time (1 = token by token; "
                  "default: all at once)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", a->threads, "CPU threads (default: all cores)")
      ->check(CLI::NonNegativeNumber);
  add_model_build_flags(*cmd, &a->build);
  add_device_flag(*cmd, &a->device);
  add_lora_flag(*cmd, &a->lora);
  return [a] {
    const std::vector<int32_t> ids = parse_ids(a->ids);
    runtime::CausalLmOptions opt;
    opt.threads = a->threads;
    opt.max_context = static_cast<int64_t>(ids.size());
    opt.build = a->build;
    load_lora_flag(a->lora, &opt.build);
    opt.device = a->device;
    auto lm = runtime::CausalLm::load(a->model, opt);
    const int64_t vocab = lm->config().vocab_size;
    for (size_t i = 0; i < ids.size(); ++i) {
      SAMPAN_CHECK(ids[i] < vocab, ErrorCode::kInvalidArgument,
                   "--ids: element {} ({}) is outside the vocabulary of {} tokens", i, ids[i], vocab);
    }
    SAMPAN_CHECK(static_cast<int64_t>(ids.size()) <= lm->capacity(), ErrorCode::kInvalidArgument,
                 "--ids: {} tokens exceed the model context of {}", ids.size(), lm->capacity());
    const int64_t n = static_cast<int64_t>(ids.size());
    const int64_t chunk = a->chunk > 0 ? a->chunk : n;
    Tensor logits = Tensor::empty({n, vocab}, DType::kF32);
    for (int64_t begin = 0; begin < n; begin += chunk) {
      const int64_t len = std::min(chunk, n - begin);
      Tensor part = lm->forward(std::span<const int32_t>(ids.data() + begin, static_cast<size_t>(len)), true);
      std::memcpy(logits.data<float>() + begin * vocab, part.raw(), static_cast<size_t>(part.nbytes()));
    }
    write_npy(a->out, logits);
    return 0;
  };
}

}  // namespace sampan::cli
