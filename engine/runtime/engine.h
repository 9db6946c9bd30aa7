// Engine: the serving runtime. Owns a loaded decoder model, its tokenizer, a paged KV cache
// (per layer one K and one V pool of [num_blocks, block_size, kv_dim]) and a scheduler thread
// that runs continuous batching: every step is ONE forward over all scheduled tokens — a chunk
// of each prefilling request's prompt (chunked prefill under max_batched_tokens) plus one token
// of each decoding request — followed by sampling, detokenisation and stop handling for every
// sequence that produced logits.
//
// Scheduling policy (one step):
//   1. finish cancelled and timed-out requests (their blocks are released at once);
//   2. running sequences in arrival order each get their next token (decode) or next prompt
//      chunk; when the KV cache cannot hold a running sequence's next token, the most recently
//      arrived running sequence is preempted (blocks released, its computed tokens recomputed
//      later as a prompt: prompt + generated so far) and the step retries;
//   3. waiting requests are admitted FCFS (preempted ones first, they keep their arrival order)
//      while running < max_running, the token budget has room and blocks are available; a new
//      request first takes its longest cached prefix (prefix cache);
//   4. the batch runs; logits are computed only for rows that complete a prompt or decode.
// A request whose prompt + max_tokens exceeds the cache entirely is refused at submit().
// Never deadlocks on a full cache: a single running sequence always fits (submit() refuses
// requests that could not fit alone), and preemption frees blocks of later arrivals first.
//
// Thread-safety: submit(), cancel(), stats(), begin_shutdown() and wait_idle() may be called
// from any thread. Event callbacks run on the engine thread: they must be quick and must not
// call back into the engine except cancel().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/models/model_options.h"
#include "engine/runtime/grammar.h"
#include "engine/runtime/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace sampan::runtime {

struct EngineOptions {
  int threads = 0;                   // compute threads; 0: one per available core
  int64_t max_model_len = 0;         // per-sequence tokens (prompt + generated); 0: the model's
                                     // max_position_embeddings, capped at 8192
  int64_t block_size = 16;           // tokens per KV block
  int64_t num_kv_blocks = 0;         // > 0: exactly this many blocks
  int64_t kv_cache_bytes = 1LL << 30;  // used when num_kv_blocks == 0
  int max_running = 64;              // sequences in one step (decode batch size limit)
  int64_t max_batched_tokens = 512;  // tokens in one step (chunked-prefill budget); >= 1
  int max_waiting = 256;             // queued requests beyond which submit() refuses
  bool prefix_cache = true;
  double request_timeout_s = 0;      // default per-request limit; 0: none
  bool optimize = true;              // graph fusion passes
  models::ModelBuildOptions build;   // quantization, rotation, KV-cache format
  // Where the graph runs and the KV pools live (weights uploaded at load). Sampling stays on
  // the host: only the logit rows of a step are copied back. runtime/device_select.h checks it.
  Device device = Device::cpu();
  // On a CUDA device, decode-only steps are padded to a few fixed shapes and replayed as CUDA
  // graphs (graph/executor.h): one launch per step instead of one per node, recorded on the
  // second step of each shape. Padded shapes: batch 1, 2, 4, 8, then multiples of 8 (padding
  // tokens write one spare KV block that no sequence owns, and their logits are dropped), block
  // tables as wide as max_model_len. Steps with prompt tokens run node by node. Off: every step
  // runs node by node, unpadded.
  bool cuda_graphs = true;
  // Pads decode-only steps as above without graphs (implied by cuda_graphs on CUDA). On the CPU
  // it only costs time: it is there to test the padding where no GPU is.
  bool pad_decode_steps = false;
  // On a CUDA device, requests without penalties or logprobs (SamplingParams::logprobs false)
  // are sampled on the GPU and only their ids come back (runtime/device_sampler.h: greedy is
  // the CPU's; seeded draws are reproducible but differ from the CPU's). Off: every row's
  // logits are copied to the host and sampled there.
  bool device_sampling = true;
  // Fault injection, for tests only: when > 0, every Nth forward throws as a failing kernel
  // would, so that tests can check each request of that step gets its kError event and the
  // engine goes on. `sampan serve` reads it from SAMPAN_TEST_FAULT_EVERY_N_STEPS.
  int64_t test_fault_every_n_steps = 0;
};

enum class EngineFinish {
  kStop,       // eos / stop id / stop string
  kLength,     // max_tokens or max_model_len reached
  kCancelled,  // cancel() or the engine shut down
  kTimeout,    // the request's time limit passed
  kError,      // the step failed (message in EngineEvent::error); other requests continue
};
const char* engine_finish_name(EngineFinish f);  // "stop" "length" "cancelled" "timeout" "error"

struct EngineRequest {
  std::string id;                 // caller's request id, for logs
  std::vector<int32_t> prompt;    // token ids, 1 .. max_model_len - 1 of them
  SamplingParams sampling;
  int64_t max_tokens = 16;        // >= 1
  std::vector<std::string> stop;  // stop strings (excluded from the text unless include_stop_str)
  std::vector<int32_t> stop_ids;  // in addition to the model's eos ids unless ignore_eos
  bool ignore_eos = false;
  // vLLM's include_stop_str_in_output: the stop string that ended the text ends it (the text
  // after it in the same token is still dropped).
  bool include_stop_str = false;
  // vLLM's skip_special_tokens: false keeps the text of special tokens generated (control
  // tokens such as a template's turn markers; a stop id's never).
  bool skip_special_tokens = true;
  double timeout_s = 0;           // 0: EngineOptions::request_timeout_s
  // The LoRA adapter the request runs through: an index into EngineOptions::build.lora, -1 for
  // the base model. Requests of every adapter (and none) share one engine step; the prefix cache
  // shares K/V only between requests of the same adapter.
  int32_t lora = -1;
  // JSON mode (OpenAI response_format json_object): only tokens that keep the output a prefix of
  // a JSON object are sampled, and the end-of-sequence ids only once it is complete
  // (json_constraint.h). Sampled on the CPU.
  bool json_object = false;
  // A grammar the output must follow (response_format json_schema, a forced tool call:
  // json_schema.h compiles one), shared by the requests of one call; not with json_object.
  // Sampled on the CPU.
  std::shared_ptr<const Grammar> grammar;
  // Prompt logprobs (OpenAI completions' echo with logprobs, vLLM's prompt_logprobs): -1 none;
  // k in [0, kMaxTopLogprobs]: for every prompt token after the first, its raw logprob given the
  // tokens before it and the k most likely ids there (SampleResult as a drawn token's). The whole
  // prompt is computed for it: the prefix cache is not read on the first admission. Sampled on
  // the CPU.
  int32_t prompt_logprobs = -1;
};

struct EngineUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens served by the prefix cache (first admission)
};

struct EngineTimings {  // seconds since submit()
  double queue_s = 0;        // until first scheduled
  double first_token_s = 0;  // until the first generated token (0 if none)
  double total_s = 0;        // until the final event
};

// One event per generated token (token >= 0), plus exactly one final event (finished = true)
// that may also carry the last token and text. Text deltas concatenate to the full output;
// stop strings and incomplete UTF-8 are held back.
struct EngineEvent {
  int32_t token = -1;         // generated id, or -1
  std::string text;           // newly final text
  SampleResult sample;        // logprob of `token` and top alternatives (sampling.top_logprobs)
  bool finished = false;
  EngineFinish finish = EngineFinish::kLength;
  std::string stop_matched;   // the stop string that ended generation, if any
  // The stop id (eos, stop_ids) that ended generation, or -1; `sample` then holds its logprob
  // (the id is not part of the output, so `token` stays -1).
  int32_t stop_token = -1;
  std::string error;          // kError: one line
  EngineUsage usage;          // filled on the final event
  // EngineRequest::prompt_logprobs >= 0: on the request's first event (a token's, or the final
  // one), entry i scores prompt token i + 1 (n_prompt - 1 entries; none for a 1-token prompt).
  std::vector<SampleResult> prompt_logprobs;
  EngineTimings timings;      // filled on the final event
};
using EventCallback = std::function<void(const EngineEvent&)>;

struct StepStats {        // reported after every step to the step observer
  int n_sequences = 0;    // sequences in the batch
  int n_decode = 0;       // of those, decoding one token
  int64_t n_tokens = 0;   // tokens in the forward
  double seconds = 0;     // wall time of the step
  double output_seconds = 0;  // of which after the forward: sampling, detokenizing, events
};

struct EngineStats {  // a snapshot
  int running = 0;
  int waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_cache_bytes = 0;       // K and V pools of every layer, in the cache's format
  int64_t kv_bytes_per_token = 0;   // one token's K and V rows over all layers
  double kv_usage = 0;               // used / total
  int64_t prefix_query_tokens = 0;   // cumulative
  int64_t prefix_hit_tokens = 0;     // cumulative
  int64_t preemptions = 0;           // cumulative
  int64_t steps = 0;                 // cumulative
  int64_t cuda_graph_replays = 0;    // cumulative: steps run as one replayed CUDA graph
  int64_t cuda_graph_captures = 0;   // cumulative: CUDA graphs recorded (one per step shape)
  // Cumulative, by LoRA adapter (EngineOptions::build.lora order): requests accepted by submit().
  std::vector<int64_t> lora_requests;
  bool accepting = true;
};

class Engine {
 public:
  // Loads config.json, weights and tokenizer.json of `model_dir`, allocates the KV pools and
  // starts the engine thread. Throws Error (one line naming file/tensor/option) on failure.
  static std::unique_ptr<Engine> load(const std::string& model_dir, const EngineOptions& options);
  // Stops the thread; requests still in flight get a final kCancelled event.
  ~Engine();

  // Queues a request; `on_event` receives its events (on the engine thread). Returns a handle
  // for cancel(). Throws Error: kInvalidArgument (empty prompt, prompt of max_model_len tokens or
  // more, a token id outside the vocabulary, max_tokens < 1, prompt_logprobs outside [-1,
  // kMaxTopLogprobs], bad sampling parameters — message
  // names the field), kResourceExhausted (the waiting queue is full), kUnavailable (shutting
  // down). A request that throws gets no events.
  uint64_t submit(EngineRequest request, EventCallback on_event);
  // Cancels a request (no-op if unknown or finished). Its final event (kCancelled) and the
  // release of its KV blocks happen at the start of the next step.
  void cancel(uint64_t handle);

  EngineStats stats() const;
  // Called on the engine thread after every step. Set before submitting work.
  void set_step_observer(std::function<void(const StepStats&)> observer);

  // Refuse new requests from now on (submit() throws kUnavailable); running ones continue.
  void begin_shutdown();
  // Blocks until no request is running or waiting, or the timeout passes; true when idle.
  bool wait_idle(std::chrono::milliseconds timeout);
  // Cancels everything in flight (final events kCancelled).
  void cancel_all();

  // What callers may know of the loaded model (no loader types cross this header).
  struct ModelInfo {
    std::string architecture;  // "LlamaForCausalLM", ...
    int64_t vocab_size = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
    int64_t max_position_embeddings = 0;  // 0: not stated
  };
  const ModelInfo& model_info() const;
  const tok::Tokenizer& tokenizer() const;
  const std::string& model_dir() const;
  int64_t max_model_len() const;
  const EngineOptions& options() const;

  struct Impl;  // engine.cc

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sampan::runtime
