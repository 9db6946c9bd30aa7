/* sampan.h: the C API of the Sampan inference engine (libsampan.so).
 *
 * Pure C (C99 and C++), ABI-stable: every object is an opaque handle, every integer has a fixed
 * width, and no struct crosses the boundary (options are set and read through functions), so a
 * program built against this header keeps working with a newer libsampan of the same
 * SAMPAN_ABI_VERSION.
 *
 * Two families of calls:
 *   - Tensor models, in the shape Paddle Inference users know: SampanConfig -> SampanPredictor
 *     -> SampanTensor handles by name -> reshape -> copy_from_cpu -> run -> copy_to_cpu.
 *     Two kinds of model:
 *       - classic models (ONNX today): the predictor's inputs and outputs are the model's own,
 *         by name, in its dtypes (f32, i32, i64, bool, u8), any rank; a dim the model leaves
 *         symbolic ("batch", "sequence") is whatever the caller reshapes to, the same value in
 *         every input that names it. sampan_tensor_get_model_shape/_dtype/_dim_name tell what
 *         the model declares.
 *       - decoder language models (a Hugging Face directory): one input "input_ids"
 *         [batch, seq] (i32 or i64) and one output "logits" [batch, seq, vocab] (f32); every
 *         batch row is an independent sequence starting at position 0.
 *   - Generation: SampanEngine (continuous batching over a paged KV cache, one engine thread)
 *     -> SampanRequest per prompt, tokens delivered through a callback or by polling.
 *
 * Errors. Every function returns a SampanStatus (SAMPAN_OK = 0) unless documented otherwise;
 * on failure it changes no output parameter and sampan_last_error() holds a one-line message.
 * No C++ exception ever leaves the library. Handles are checked against a registry of live
 * objects: a destroyed handle, a handle of the wrong type or any foreign pointer gives
 * SAMPAN_ERROR_INVALID_HANDLE, never a crash (handle values are never reused). A NULL handle
 * gives SAMPAN_ERROR_INVALID_HANDLE, except for the *_destroy functions, where it is a no-op.
 * A NULL output pointer or a bad value gives SAMPAN_ERROR_INVALID_ARGUMENT.
 *
 * Strings passed in are copied; the caller keeps ownership. Strings returned (const char**) are
 * owned by the library and stay valid for as long as documented at each function.
 *
 * Thread-safety, in general: functions on different handles may be called concurrently from
 * any threads. Each section says what holds for one handle.
 */
#ifndef SAMPAN_CAPI_SAMPAN_H_
#define SAMPAN_CAPI_SAMPAN_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#if defined(SAMPAN_BUILDING_LIBRARY)
#define SAMPAN_API __declspec(dllexport)
#else
#define SAMPAN_API __declspec(dllimport)
#endif
#else
#define SAMPAN_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version and errors ------------------------------------------------------------------ */

/* Bumped on any incompatible change of this header; a program should compare it with
 * sampan_abi_version() at start-up. */
#define SAMPAN_ABI_VERSION 1

/* The library's version, e.g. "0.1.0" (static storage). Thread-safe. */
SAMPAN_API const char* sampan_version(void);
/* The SAMPAN_ABI_VERSION the library was built with. Thread-safe. */
SAMPAN_API int32_t sampan_abi_version(void);

typedef int32_t SampanStatus;
enum {
  SAMPAN_OK = 0,
  /* The engine's error codes (sampan::ErrorCode), one to one. */
  SAMPAN_ERROR_INVALID_ARGUMENT = 1,   /* wrong value, shape, dtype, byte size, NULL pointer */
  SAMPAN_ERROR_NOT_FOUND = 2,          /* a file, model directory or tensor name */
  SAMPAN_ERROR_INVALID_MODEL = 3,      /* a malformed or inconsistent model */
  SAMPAN_ERROR_UNSUPPORTED = 4,        /* valid, but not in this build (e.g. device "cuda") */
  SAMPAN_ERROR_OUT_OF_MEMORY = 5,
  SAMPAN_ERROR_IO = 6,
  SAMPAN_ERROR_INTERNAL = 7,           /* a bug in Sampan */
  SAMPAN_ERROR_RESOURCE_EXHAUSTED = 8, /* a limit is reached now (queue full); retry later */
  SAMPAN_ERROR_UNAVAILABLE = 9,        /* the engine no longer accepts work */
  SAMPAN_ERROR_CANCELLED = 10,
  SAMPAN_ERROR_DEADLINE_EXCEEDED = 11,
  /* The C API's own. */
  SAMPAN_ERROR_INVALID_HANDLE = 12,    /* NULL, destroyed, wrong type or foreign pointer */
  SAMPAN_ERROR_TIMEOUT = 13,           /* sampan_request_poll/wait: nothing within the timeout */
  SAMPAN_ERROR_END_OF_STREAM = 14      /* sampan_request_poll: the final event was delivered */
};

/* A short constant name of a status ("SAMPAN_ERROR_INVALID_HANDLE"); "SAMPAN_UNKNOWN" for an
 * unknown value. Static storage; thread-safe. */
SAMPAN_API const char* sampan_status_name(SampanStatus status);

/* The message of the last call made on THIS thread: empty after a successful call, one line
 * after a failed one. Owned by the library; valid until the next Sampan call on this thread.
 * Never NULL. Thread-safe (per-thread storage). */
SAMPAN_API const char* sampan_last_error(void);

/* ---- handles ----------------------------------------------------------------------------- */

typedef struct SampanConfig SampanConfig;       /* options for predictors and engines */
typedef struct SampanPredictor SampanPredictor; /* a loaded tensor model + its buffers */
typedef struct SampanTensor SampanTensor;       /* an input or output of one predictor */
typedef struct SampanEngine SampanEngine;       /* a generation engine with its thread */
typedef struct SampanParams SampanParams;       /* sampling and stopping parameters */
typedef struct SampanRequest SampanRequest;     /* one submitted generation request */
typedef struct SampanEvent SampanEvent;         /* one streamed generation event */

/* ---- config -------------------------------------------------------------------------------
 * Thread-safety: one config may be read and written from several threads (calls are
 * serialised); predictors and engines copy it at creation, so later changes do not affect
 * them. Ownership: sampan_config_create's caller destroys it with sampan_config_destroy. */

/* A config with the defaults: no model dir, device "cpu", threads 0 (one per core), precision
 * "bf16" (weights as stored), KV cache "f32", max_model_len 0 (the model's, capped at 8192),
 * kv_cache_bytes 1 GiB, max_batch_size 64, int4 group size 128. */
SAMPAN_API SampanStatus sampan_config_create(SampanConfig** out);
SAMPAN_API SampanStatus sampan_config_destroy(SampanConfig* config);
/* The model (Paddle's SetModel(dir)). Accepted today:
 *   - a directory with config.json and *.safetensors (+ tokenizer.json for an engine): a
 *     decoder language model;
 *   - an ONNX file (a path ending in .onnx), or a directory without config.json holding exactly
 *     one .onnx file: a classic model (predictor only).
 * Not checked here: creating a predictor or engine reports SAMPAN_ERROR_NOT_FOUND. */
SAMPAN_API SampanStatus sampan_config_set_model_dir(SampanConfig* config, const char* dir);
/* Paddle's SetModel(prog_file, params_file): the model (as sampan_config_set_model_dir) and a
 * separate params file (NULL or "": none). No format Sampan loads today takes a params file:
 * a predictor made from a config with one fails with UNSUPPORTED (NOT_FOUND if the file does
 * not exist); it is reserved for Paddle's program + params files. */
SAMPAN_API SampanStatus sampan_config_set_model(SampanConfig* config, const char* model,
                                                const char* params_file);
/* Paddle's SetParamsFile: only the params file ("" clears it). */
SAMPAN_API SampanStatus sampan_config_set_params_file(SampanConfig* config,
                                                      const char* params_file);
/* "cpu", "cuda" (or "gpu", "cuda:N"). A CUDA device is SAMPAN_ERROR_UNSUPPORTED in a build
 * without CUDA or where that GPU is not visible (the message says which). Predictors and
 * engines both run on it: weights and KV caches live on the GPU, outputs come back to the host.
 * Anything else is SAMPAN_ERROR_INVALID_ARGUMENT. */
SAMPAN_API SampanStatus sampan_config_set_device(SampanConfig* config, const char* device);
/* Compute threads, >= 0 (0: one per available core). */
SAMPAN_API SampanStatus sampan_config_set_threads(SampanConfig* config, int32_t threads);
/* Weight precision, applied on load: "f32" or "bf16" keep the stored weights, "fp8" quantizes
 * to FP8 E4M3 (per output channel scales), "int4" to group-wise INT4 (see group size).
 * Classic models (ONNX, Paddle) compute in f32 unless this is called with "bf16": then convs
 * and matmuls by constant weights run on bf16-rounded inputs with f32 sums (AMX tiles where
 * the CPU has AMX-BF16, else AVX512-BF16 vdpbf16ps where it has that, else a slower loop with
 * the same rounding). Anything else is
 * SAMPAN_ERROR_INVALID_ARGUMENT. */
SAMPAN_API SampanStatus sampan_config_set_precision(SampanConfig* config, const char* precision);
/* Group size of "int4": 32, 64 or 128 (it must divide every projection's input width). */
SAMPAN_API SampanStatus sampan_config_set_int4_group_size(SampanConfig* config, int32_t size);
/* KV cache element format: "f32", "bf16", "fp8", "int8" or "int4". */
SAMPAN_API SampanStatus sampan_config_set_kv_cache_dtype(SampanConfig* config, const char* dtype);
/* Engine: tokens per sequence (prompt + generated), >= 0 (0: the model's, capped at 8192).
 * Predictor: when > 0, the longest seq it accepts. */
SAMPAN_API SampanStatus sampan_config_set_max_model_len(SampanConfig* config, int64_t tokens);
/* Engine: bytes of KV cache to allocate, > 0. */
SAMPAN_API SampanStatus sampan_config_set_kv_cache_bytes(SampanConfig* config, int64_t bytes);
/* Engine: most sequences decoded in one step, >= 1. */
SAMPAN_API SampanStatus sampan_config_set_max_batch_size(SampanConfig* config, int32_t n);

/* LoRA adapters (PEFT format: adapter_config.json + adapter_model.safetensors) that an engine
 * serves besides the base model; a request picks one by name (sampan_params_set_lora). Requests
 * of different adapters and of the base run together in one engine step. `name` must be
 * non-empty and unique in the config (INVALID_ARGUMENT otherwise); the directory is read and
 * checked against the model by sampan_engine_create: NOT_FOUND for a missing directory or file,
 * INVALID_ARGUMENT for an adapter that is malformed or does not fit the model, with a message
 * naming the file, key or tensor. Predictors ignore adapters. */
SAMPAN_API SampanStatus sampan_config_add_lora(SampanConfig* config, const char* name,
                                               const char* dir);
SAMPAN_API SampanStatus sampan_config_clear_loras(SampanConfig* config);

/* Getters. Returned strings are owned by the config and valid until the same field is set
 * again (for adapters: until sampan_config_clear_loras) or the config is destroyed. */
SAMPAN_API SampanStatus sampan_config_get_lora_count(const SampanConfig* config, int32_t* out);
/* Adapter `index` in [0, count): its name and directory. */
SAMPAN_API SampanStatus sampan_config_get_lora(const SampanConfig* config, int32_t index,
                                               const char** name, const char** dir);
SAMPAN_API SampanStatus sampan_config_get_model_dir(const SampanConfig* config, const char** out);
SAMPAN_API SampanStatus sampan_config_get_params_file(const SampanConfig* config,
                                                      const char** out);
SAMPAN_API SampanStatus sampan_config_get_device(const SampanConfig* config, const char** out);
SAMPAN_API SampanStatus sampan_config_get_threads(const SampanConfig* config, int32_t* out);
SAMPAN_API SampanStatus sampan_config_get_precision(const SampanConfig* config, const char** out);
SAMPAN_API SampanStatus sampan_config_get_int4_group_size(const SampanConfig* config,
                                                          int32_t* out);
SAMPAN_API SampanStatus sampan_config_get_kv_cache_dtype(const SampanConfig* config,
                                                         const char** out);
SAMPAN_API SampanStatus sampan_config_get_max_model_len(const SampanConfig* config, int64_t* out);
SAMPAN_API SampanStatus sampan_config_get_kv_cache_bytes(const SampanConfig* config, int64_t* out);
SAMPAN_API SampanStatus sampan_config_get_max_batch_size(const SampanConfig* config, int32_t* out);

/* ---- predictor (tensor models) ------------------------------------------------------------
 * Thread-safety: a predictor and its tensors are meant for one thread at a time; calls on one
 * predictor (or its tensors) from several threads are serialised internally, so misuse cannot
 * corrupt memory, but the threads then overwrite each other's inputs. For parallel inference
 * give each thread its own sampan_predictor_clone (clones share the weights, read-only).
 * Ownership: the creator destroys a predictor with sampan_predictor_destroy; its tensor handles
 * belong to it and become invalid (SAMPAN_ERROR_INVALID_HANDLE) when it is destroyed. */

typedef int32_t SampanDType;
enum {
  SAMPAN_DTYPE_UNDEFINED = 0, /* an input no data was copied into yet */
  SAMPAN_DTYPE_F32 = 1,
  SAMPAN_DTYPE_I32 = 2,
  SAMPAN_DTYPE_I64 = 3,
  SAMPAN_DTYPE_BOOL = 4, /* one byte per element, 0 or 1 (any non-zero byte fed in is 1) */
  SAMPAN_DTYPE_U8 = 5
};

/* Loads the model of `config` (weights memory-mapped, quantized on load if asked). Errors:
 * NOT_FOUND (no model dir or file), INVALID_MODEL, UNSUPPORTED (architecture, an op, device,
 * precision fp8/int4 for a classic model, a params file), INVALID_ARGUMENT (no model set, an
 * option the model cannot take, a malformed ONNX file). A classic model uses device and
 * threads, and precision "bf16" when it was set explicitly (see sampan_config_set_precision). */
SAMPAN_API SampanStatus sampan_predictor_create(const SampanConfig* config,
                                                SampanPredictor** out);
/* A predictor sharing this one's weights with its own buffers and threads; inputs are not
 * copied. Cheap (no weight is loaded again). */
SAMPAN_API SampanStatus sampan_predictor_clone(SampanPredictor* predictor, SampanPredictor** out);
SAMPAN_API SampanStatus sampan_predictor_destroy(SampanPredictor* predictor);

SAMPAN_API SampanStatus sampan_predictor_get_input_num(SampanPredictor* predictor, int32_t* out);
SAMPAN_API SampanStatus sampan_predictor_get_output_num(SampanPredictor* predictor, int32_t* out);
/* Names by index (0 .. num-1; else INVALID_ARGUMENT); valid while the predictor lives. */
SAMPAN_API SampanStatus sampan_predictor_get_input_name(SampanPredictor* predictor, int32_t index,
                                                        const char** out);
SAMPAN_API SampanStatus sampan_predictor_get_output_name(SampanPredictor* predictor,
                                                         int32_t index, const char** out);
/* The tensor handle of an input or output by name (NOT_FOUND for an unknown name). The same
 * name always gives the same handle; it belongs to the predictor (never destroy it). */
SAMPAN_API SampanStatus sampan_predictor_get_input_handle(SampanPredictor* predictor,
                                                          const char* name, SampanTensor** out);
SAMPAN_API SampanStatus sampan_predictor_get_output_handle(SampanPredictor* predictor,
                                                           const char* name, SampanTensor** out);
/* Runs the model on the data copied into every input; fills the outputs. INVALID_ARGUMENT when
 * an input has no data, a shape the model cannot take, or a value it cannot take; the one-line
 * message names the input (or, for a fault found while running, the node: e.g. a Gather index
 * out of range). Decoders: input_ids has rank 2, batch >= 1, 1 <= seq <= the model's
 * max_position_embeddings, ids in [0, vocab). Classic models: every input's rank and fixed dims
 * are the model's, every symbolic dim is >= 1 and has one value across the inputs naming it.
 * Other run failures keep their status (UNSUPPORTED, OUT_OF_MEMORY, ...). On failure the
 * outputs are left empty (rank 0). */
SAMPAN_API SampanStatus sampan_predictor_run(SampanPredictor* predictor);

/* ---- tensor ---------------------------------------------------------------------------------
 * Thread-safety and ownership: those of the predictor it belongs to. */

/* Sets an input's shape (rank 1..8, every dim >= 0); drops any data copied before.
 * INVALID_ARGUMENT on an output tensor. */
SAMPAN_API SampanStatus sampan_tensor_reshape(SampanTensor* tensor, const int64_t* dims,
                                              int32_t rank);
/* Copies `byte_size` bytes of `dtype` elements into an input. The byte size must equal
 * numel(shape) * element size (INVALID_ARGUMENT otherwise, naming both), so reshape first;
 * the dtype must be one the input takes (INVALID_ARGUMENT otherwise): input_ids of a decoder
 * I32 or I64; a classic model's input its model dtype, or for an I64 (I32) input also I32
 * (I64, checked to fit at run), for a BOOL (U8) input also U8 (BOOL). An input of a dtype
 * outside the enum (f16, ...) is UNSUPPORTED. `data` may be NULL only when byte_size is 0. */
SAMPAN_API SampanStatus sampan_tensor_copy_from_cpu(SampanTensor* tensor, SampanDType dtype,
                                                    const void* data, uint64_t byte_size);
/* Copies the tensor's data out: `dtype` must be the tensor's dtype and byte_size exactly its
 * numel * element size. INVALID_ARGUMENT when there is no data (an output before a successful
 * run, an input before copy_from_cpu). */
SAMPAN_API SampanStatus sampan_tensor_copy_to_cpu(SampanTensor* tensor, SampanDType dtype,
                                                  void* data, uint64_t byte_size);
/* The shape: *rank receives the rank (0 for a tensor with no shape yet) and `dims` the dims.
 * dims NULL with capacity 0 asks for the rank only. INVALID_ARGUMENT when capacity < rank
 * otherwise (*rank is still written, so the caller can retry with enough room). */
SAMPAN_API SampanStatus sampan_tensor_get_shape(SampanTensor* tensor, int64_t* dims,
                                                int32_t capacity, int32_t* rank);
/* SAMPAN_DTYPE_UNDEFINED for a tensor without data (an input before copy_from_cpu, an output
 * before a successful run). */
SAMPAN_API SampanStatus sampan_tensor_get_dtype(SampanTensor* tensor, SampanDType* out);
/* Valid while the predictor lives. */
SAMPAN_API SampanStatus sampan_tensor_get_name(SampanTensor* tensor, const char** out);
/* What the model declares for this tensor, readable at any time: the shape with -1 for every
 * dim the caller chooses (a symbolic dim; input_ids: [-1, -1], logits: [-1, -1, vocab]);
 * arguments as sampan_tensor_get_shape. A classic model's output shape may be declared
 * partly or not at all (rank 0): the shape after a run is the truth. */
SAMPAN_API SampanStatus sampan_tensor_get_model_shape(SampanTensor* tensor, int64_t* dims,
                                                      int32_t capacity, int32_t* rank);
/* The name of a symbolic dim ("batch", "sequence"), "" for a fixed one; dim in [0, rank of the
 * model shape) (else INVALID_ARGUMENT). Valid while the predictor lives. */
SAMPAN_API SampanStatus sampan_tensor_get_dim_name(SampanTensor* tensor, int32_t dim,
                                                   const char** out);
/* The dtype the model takes (an input; see copy_from_cpu for the others it accepts) or gives
 * back (an output; a model output of a dtype outside the enum comes back as F32). UNDEFINED
 * for an input of a dtype the C API cannot feed. */
SAMPAN_API SampanStatus sampan_tensor_get_model_dtype(SampanTensor* tensor, SampanDType* out);

/* ---- generation engine ---------------------------------------------------------------------
 * Thread-safety: every engine and request function may be called from any thread, concurrently,
 * on the same engine (submit from many threads, poll each request from its own, cancel from
 * anywhere). Ownership: sampan_engine_destroy frees the engine; requests still in flight are
 * cancelled (each gets its final CANCELLED event) but their handles stay valid until
 * sampan_request_destroy. */

/* Loads the model dir of `config` (config.json, weights, tokenizer.json), allocates the KV cache
 * and starts the engine thread. Uses threads, precision, int4 group size, kv_cache_dtype,
 * max_model_len, kv_cache_bytes and max_batch_size. Errors as sampan_predictor_create, and
 * INVALID_ARGUMENT when the KV cache cannot hold one sequence of max_model_len. */
SAMPAN_API SampanStatus sampan_engine_create(const SampanConfig* config, SampanEngine** out);
/* Cancels what is in flight and stops the engine thread (blocks until it stopped). Must not be
 * called from a callback (INVALID_ARGUMENT). */
SAMPAN_API SampanStatus sampan_engine_destroy(SampanEngine* engine);
SAMPAN_API SampanStatus sampan_engine_get_vocab_size(SampanEngine* engine, int64_t* out);
/* The sequence limit in tokens (prompt + generated). */
SAMPAN_API SampanStatus sampan_engine_get_max_model_len(SampanEngine* engine, int64_t* out);
/* Tokenizes `text` (NUL-terminated UTF-8) as a text prompt is (add_special != 0: with BOS as
 * the tokenizer's post-processor adds it). *n_ids receives the count and `ids` the ids; ids
 * NULL with capacity 0 asks for the count only. INVALID_ARGUMENT when capacity < count
 * otherwise (*n_ids is still written). */
SAMPAN_API SampanStatus sampan_engine_tokenize(SampanEngine* engine, const char* text,
                                               int32_t add_special, int32_t* ids,
                                               int64_t capacity, int64_t* n_ids);

/* Sampling parameters. Thread-safety: like a config; submit copies them.
 * Defaults: temperature 1, top_k 0 (off), top_p 1 (off), no seed (random), max_tokens 16,
 * no stop strings, ignore_eos 0. */
SAMPAN_API SampanStatus sampan_params_create(SampanParams** out);
SAMPAN_API SampanStatus sampan_params_destroy(SampanParams* params);
/* In [0, 1e6]; 0 is greedy. */
SAMPAN_API SampanStatus sampan_params_set_temperature(SampanParams* params, float temperature);
/* >= 0; 0 is off. */
SAMPAN_API SampanStatus sampan_params_set_top_k(SampanParams* params, int32_t top_k);
/* In (0, 1]; 1 is off. */
SAMPAN_API SampanStatus sampan_params_set_top_p(SampanParams* params, float top_p);
/* The same seed, prompt and model give the same tokens. */
SAMPAN_API SampanStatus sampan_params_set_seed(SampanParams* params, uint64_t seed);
/* >= 1. */
SAMPAN_API SampanStatus sampan_params_set_max_tokens(SampanParams* params, int64_t max_tokens);
/* Adds a stop string (non-empty, NUL-terminated); generation ends before it, it is not output. */
SAMPAN_API SampanStatus sampan_params_add_stop(SampanParams* params, const char* stop);
SAMPAN_API SampanStatus sampan_params_clear_stops(SampanParams* params);
/* OpenAI's logit_bias: adds `bias` (in [-100, 100]; -100 bans the token, +100 forces it) to
 * token `token_id`'s logit before penalties and temperature. Repeatable; a token added twice
 * gets both. An id outside the vocabulary fails at submit with INVALID_ARGUMENT naming
 * logit_bias. */
SAMPAN_API SampanStatus sampan_params_add_logit_bias(SampanParams* params, int32_t token_id,
                                                     float bias);
SAMPAN_API SampanStatus sampan_params_clear_logit_bias(SampanParams* params);
/* Non-zero: JSON mode (OpenAI's response_format json_object): the output is one JSON object,
 * or a prefix of one when max_tokens cuts it. */
SAMPAN_API SampanStatus sampan_params_set_json_object(SampanParams* params, int32_t json_object);
/* OpenAI's response_format json_schema: `schema` a JSON Schema as NUL-terminated JSON text (the
 * supported keywords: engine/runtime/json_schema.h); the output is a JSON value it admits, or a
 * prefix of one when max_tokens cuts it. Compiled here: a schema that is not JSON or uses an
 * unsupported keyword fails with INVALID_ARGUMENT naming the keyword. NULL or "" clears it.
 * Setting a schema clears JSON mode and JSON mode clears the schema. */
SAMPAN_API SampanStatus sampan_params_set_json_schema(SampanParams* params, const char* schema);
/* Non-zero: keep generating past the end-of-sequence token (until max_tokens or a stop). */
SAMPAN_API SampanStatus sampan_params_set_ignore_eos(SampanParams* params, int32_t ignore_eos);
/* Non-zero: score the prompt (for perplexity, reranking, loglikelihood): the request's first
 * event carries, for every prompt token after the first, its log-probability given the tokens
 * before it (sampan_event_get_prompt_logprobs). The whole prompt is computed for it (the prefix
 * cache is not read) and the request is sampled on the CPU. */
SAMPAN_API SampanStatus sampan_params_set_prompt_logprobs(SampanParams* params,
                                                          int32_t prompt_logprobs);
/* The LoRA adapter (a name given to sampan_config_add_lora) the request runs through; NULL or
 * "" is the base model (the default). An unknown name fails at submit with INVALID_ARGUMENT
 * naming it. */
SAMPAN_API SampanStatus sampan_params_set_lora(SampanParams* params, const char* name);

/* Called on the engine thread for every event of a request, in order, the last one with
 * finished = 1. `event` is valid only during the call. The callback must return quickly (it
 * holds up every request of the engine) and may only call sampan_event_* on `event`,
 * sampan_request_cancel (on any request) and sampan_last_error; engine calls made from it
 * (submit, destroy, tokenize) and sampan_request_poll/wait fail with INVALID_ARGUMENT. */
typedef void (*SampanEventCallback)(SampanRequest* request, const SampanEvent* event,
                                    void* user_data);

/* Queues a request. With a callback the events go to it (and poll fails); with callback NULL
 * they are queued for sampan_request_poll. `params` may be NULL (defaults). Errors:
 * INVALID_ARGUMENT (empty prompt, prompt too long for max_model_len, an id outside the
 * vocabulary, a bad parameter: the message names it), RESOURCE_EXHAUSTED (queue full),
 * UNAVAILABLE. On error no request is created and no callback is made. The caller destroys
 * *out with sampan_request_destroy. */
SAMPAN_API SampanStatus sampan_engine_submit_text(SampanEngine* engine, const char* prompt,
                                                  const SampanParams* params,
                                                  SampanEventCallback callback, void* user_data,
                                                  SampanRequest** out);
SAMPAN_API SampanStatus sampan_engine_submit_tokens(SampanEngine* engine, const int32_t* ids,
                                                    int64_t n_ids, const SampanParams* params,
                                                    SampanEventCallback callback,
                                                    void* user_data, SampanRequest** out);

/* Asks the engine to stop the request; it ends with a CANCELLED final event (unless it
 * finished first). A no-op on a finished request. Any thread, also from a callback. */
SAMPAN_API SampanStatus sampan_request_cancel(SampanRequest* request);
/* Poll mode only: waits up to timeout_ms (0: do not wait; < 0: wait without limit) for the next
 * event. *out is valid until the next poll of this request or its destruction. Returns
 * SAMPAN_ERROR_TIMEOUT when none came in time, SAMPAN_ERROR_END_OF_STREAM after the final event
 * was returned. One thread at a time per request. */
SAMPAN_API SampanStatus sampan_request_poll(SampanRequest* request, int32_t timeout_ms,
                                            const SampanEvent** out);
/* Waits up to timeout_ms (< 0: no limit) until the request finished (its final event was
 * produced, in either mode). SAMPAN_ERROR_TIMEOUT otherwise. */
SAMPAN_API SampanStatus sampan_request_wait(SampanRequest* request, int32_t timeout_ms);
/* Cancels the request if still running and frees it. Once it returns, the callback is never
 * called again for this request (it waits for a callback in progress on another thread). */
SAMPAN_API SampanStatus sampan_request_destroy(SampanRequest* request);

typedef int32_t SampanFinishReason;
enum {
  SAMPAN_FINISH_NONE = 0,      /* not the final event */
  SAMPAN_FINISH_STOP = 1,      /* end-of-sequence token or a stop string */
  SAMPAN_FINISH_LENGTH = 2,    /* max_tokens or max_model_len */
  SAMPAN_FINISH_CANCELLED = 3, /* sampan_request_cancel, destroy, or the engine destroyed */
  SAMPAN_FINISH_TIMEOUT = 4,
  SAMPAN_FINISH_ERROR = 5      /* the step failed; sampan_event_get_error says why */
};

/* Event getters: valid handles only while the event is (see the callback and poll). */
/* The generated token id, or -1 when the event carries none (a final event may or may not). */
SAMPAN_API SampanStatus sampan_event_get_token(const SampanEvent* event, int32_t* out);
/* Newly final UTF-8 text (deltas concatenate to the output; may be empty). NUL-terminated;
 * *len (may be NULL) receives its byte length. Valid as long as the event. */
SAMPAN_API SampanStatus sampan_event_get_text(const SampanEvent* event, const char** text,
                                              uint64_t* len);
SAMPAN_API SampanStatus sampan_event_get_logprob(const SampanEvent* event, float* out);
/* With sampan_params_set_prompt_logprobs, on the request's first event: *n = prompt tokens - 1
 * log-probabilities (*logprobs[i] scores prompt token i + 1), valid as long as the event; on
 * every other event, or without it, *n = 0 and *logprobs = NULL. */
SAMPAN_API SampanStatus sampan_event_get_prompt_logprobs(const SampanEvent* event,
                                                         const float** logprobs, int64_t* n);
/* 1 on the final event of a request, else 0. */
SAMPAN_API SampanStatus sampan_event_is_finished(const SampanEvent* event, int32_t* out);
SAMPAN_API SampanStatus sampan_event_get_finish_reason(const SampanEvent* event,
                                                       SampanFinishReason* out);
/* "stop" "length" "cancelled" "timeout" "error" on the final event, "" before. Static. */
SAMPAN_API SampanStatus sampan_event_get_finish_name(const SampanEvent* event, const char** out);
/* Token counts, filled on the final event (0 before). Any pointer may be NULL. */
SAMPAN_API SampanStatus sampan_event_get_usage(const SampanEvent* event, int64_t* prompt_tokens,
                                               int64_t* completion_tokens,
                                               int64_t* cached_prompt_tokens);
/* FINISH_ERROR: one line; else "". */
SAMPAN_API SampanStatus sampan_event_get_error(const SampanEvent* event, const char** out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SAMPAN_CAPI_SAMPAN_H_ */
