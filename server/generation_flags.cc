#include "server/generation_flags.h"

#include "engine/core/error.h"
#include "engine/runtime/json_schema.h"
#include "engine/runtime/sampling_limits.h"
#include "server/model_flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <limits>
#include <optional>
#include <utility>

#include <fmt/format.h>

namespace sampan::cli {

namespace {

// "ID=BIAS" of --logit-bias: a token id >= 0 and a bias in [-100, 100]; nullopt otherwise.
std::optional<std::pair<int32_t, float>> parse_bias_spec(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) return std::nullopt;
  const std::string id_text = spec.substr(0, eq), bias_text = spec.substr(eq + 1);
  if (!std::all_of(id_text.begin(), id_text.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      id_text.size() > 10) {
    return std::nullopt;
  }
  const long long id = std::stoll(id_text);
  char* end = nullptr;
  const double bias = std::strtod(bias_text.c_str(), &end);
  if (*end != '\0' || id > std::numeric_limits<int32_t>::max() || !(bias >= -100 && bias <= 100)) {
    return std::nullopt;
  }
  return std::pair<int32_t, float>(static_cast<int32_t>(id), static_cast<float>(bias));
}

}  // namespace

void GenerationFlags::add_to(CLI::App& cmd) {
  cmd.add_option("--model", model, "model directory (config.json, safetensors, tokenizer) or .gguf file")->required();
  cmd.add_option("--threads", threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  cmd.add_option("--max-context", max_context, "KV cache capacity in tokens")->check(CLI::PositiveNumber);
  cmd.add_option("--temperature", sampling.temperature, "0 = greedy (default 1)");
  cmd.add_option("--top-k", sampling.top_k, "keep the k most likely tokens (0 = off)")->check(CLI::NonNegativeNumber);
  cmd.add_option("--top-p", sampling.top_p, "nucleus sampling threshold (1 = off)");
  cmd.add_option("--min-p", sampling.min_p, "drop tokens below min-p x the top probability");
  cmd.add_option("--repetition-penalty", sampling.repetition_penalty, "HF-style, 1 = off");
  cmd.add_option("--presence-penalty", sampling.presence_penalty, "OpenAI-style, 0 = off");
  cmd.add_option("--frequency-penalty", sampling.frequency_penalty, "OpenAI-style, 0 = off");
  cmd.add_option("--seed", seed, "random seed (same seed, same output)")->each([this](const std::string&) { has_seed = true; });
  cmd.add_option("--logprobs", sampling.top_logprobs, "print each token's logprob and this many alternatives to stderr")
      ->check(CLI::Range(0, runtime::kMaxTopLogprobs));
  cmd.add_option("--max-tokens", max_tokens, "generate at most this many tokens")->check(CLI::NonNegativeNumber);
  cmd.add_option("--stop", stop, "stop string (repeatable; not printed)");
  cmd.add_option("--stop-id", stop_ids, "stop token id (repeatable)");
  cmd.add_option("--logit-bias", logit_bias,
                 "ID=BIAS: add BIAS in [-100, 100] to token ID's logit (repeatable; -100 bans it)")
      ->check([](const std::string& spec) -> std::string {
        return parse_bias_spec(spec) ? ""
                                     : "expected ID=BIAS, a token id and a bias in [-100, 100]";
      });
  cmd.add_flag("--ignore-eos", ignore_eos, "keep generating past end-of-sequence tokens");
  auto* json = cmd.add_flag(
      "--json", json_object,
      "JSON mode: the output is one JSON object (a prefix of one if max-tokens cuts it)");
  cmd.add_option("--json-schema", json_schema,
                 "SCHEMA: the output is a JSON value this JSON Schema admits; inline JSON "
                 "(starting with '{') or a file")
      ->excludes(json);
  cmd.add_flag("--stats", stats, "print token counts and speeds to stderr at the end");
  add_model_build_flags(cmd, &build);
}

runtime::GenerationRequest GenerationFlags::request(std::vector<int32_t> prompt) const {
  runtime::GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling = sampling;
  if (has_seed) r.sampling.seed = seed;
  for (const std::string& spec : logit_bias) {
    r.sampling.logit_bias.push_back(*parse_bias_spec(spec));
  }
  r.max_tokens = max_tokens;
  r.stop = stop;
  r.stop_ids = stop_ids;
  r.ignore_eos = ignore_eos;
  r.json_object = json_object;
  if (!json_schema.empty()) {
    const size_t first = json_schema.find_first_not_of(" \t\r\n");
    std::string text = json_schema;
    if (first == std::string::npos || json_schema[first] != '{') {
      std::ifstream f(json_schema, std::ios::binary);
      SAMPAN_CHECK(f.good(), ErrorCode::kNotFound, "--json-schema: cannot read '{}'",
                   json_schema);
      std::stringstream ss;
      ss << f.rdbuf();
      text = ss.str();
    }
    r.grammar = runtime::compile_json_schema(text, "--json-schema");
  }
  return r;
}

void print_event(const runtime::GenerationEvent& ev, const tok::Tokenizer& tokenizer,
                 int top_logprobs) {
  if (!ev.text.empty()) {
    std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
    std::fflush(stdout);
  }
  if (top_logprobs > 0 && ev.token >= 0) {
    std::string line = fmt::format("[logprob] {} {:?} {:.4f}", ev.token,
                                   std::string(tokenizer.token_text(ev.token)), ev.sample.logprob);
    for (const auto& alt : ev.sample.top) {
      line += fmt::format(" | {} {:?} {:.4f}", alt.id, std::string(tokenizer.token_text(alt.id)), alt.logprob);
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

void print_stats(const runtime::GenerationResult& r) {
  const double n = static_cast<double>(r.tokens.size());
  std::fprintf(stderr,
               "\n[prompt %lld tokens (%lld cached), generated %zu, finish %s, prefill %.1f tok/s, "
               "decode %.2f tok/s]\n",
               static_cast<long long>(r.prompt_tokens), static_cast<long long>(r.cached_prompt_tokens),
               r.tokens.size(), runtime::finish_reason_name(r.finish),
               (r.prompt_tokens - r.cached_prompt_tokens) / std::max(r.prefill_seconds, 1e-9),
               n / std::max(r.decode_seconds, 1e-9));
}

}  // namespace sampan::cli
