// One Model for every runtime: a graph, its typed signature and its weight source, made by
// load_model() through a registry of builders keyed by format and architecture.
//
// Every runtime starts here: runtime::Engine (continuous batching), runtime::CausalLm (one
// sequence, the CLI) and the C API predictor. None of them names a graph input by string or
// calls a builder: they find inputs by role in the signature, upload constants with
// Model::upload_constants and size KV pools with Model::allocate_kv_pools.
//
// Adding an architecture is one builder file that calls register_model_builder (see llama.cc);
// adding a format (GGUF, ONNX, Paddle) is one source reader in model.cc plus its builders.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/tensor.h"
#include "engine/graph/graph.h"
#include "engine/graph/passes/passes.h"
#include "engine/loaders/hf_config.h"
#include "engine/loaders/weight_store.h"
#include "engine/models/model_options.h"

namespace sampan::models {

// What a graph input or output is for, so that runtimes bind by meaning, not by name.
enum class TensorRole : uint8_t {
  kTokenIds,     // [n_tokens] i32: the tokens of one forward (any number of sequences)
  kPositions,    // [n_tokens] i32: each token's position in its sequence
  kSeqIds,       // [n_tokens] i32: each token's row of the block tables
  kBlockTables,  // [n_seqs, max_blocks] i32: physical KV blocks per sequence
  kLogitRows,    // [n_out] i32: the rows whose logits are returned
  kKCache,       // [n_blocks, block_size, row] one layer's K pool, written in place
  kVCache,       // [n_blocks, block_size, row] one layer's V pool, written in place
  kLogits,       // [n_out, vocab] f32
  kData,         // anything else a caller feeds or reads (classic models)
  kLoraIds,      // [n_tokens] i32: each token's LoRA adapter (ModelBuildOptions::lora), -1: none
};
const char* tensor_role_name(TensorRole role);

struct TensorSpec {
  std::string name;      // the graph value's name
  std::string api_name;  // the name callers see (C API predictor): "input_ids", "logits"
  TensorRole role = TensorRole::kData;
  DType dtype = DType::kF32;
  std::vector<graph::Dim> shape;  // symbolic dimensions by name ("n_tokens")
  int64_t layer = -1;             // kKCache / kVCache: the layer
};

struct Signature {
  std::vector<TensorSpec> inputs, outputs;

  // The input (output) with `role` (and `layer` for the KV pools); nullptr when there is none.
  const TensorSpec* find_input(TensorRole role, int64_t layer = -1) const;
  const TensorSpec* find_output(TensorRole role) const;
  std::string str() const;  // one line per tensor: role name dtype shape
};

// The names a decoder runtime binds every forward, resolved once from the signature. Throws
// Error(kUnsupported) naming the model when the signature lacks a decoder role.
struct DecoderBindings {
  std::string ids, positions, seq_ids, block_tables, logit_rows;
  std::vector<std::string> k_cache, v_cache;  // per layer
  std::string lora_ids;  // empty when the model was built without LoRA adapters
  size_t logits_output = 0;                   // index among the graph's outputs

  static DecoderBindings from(const Signature& sig, const std::string& model);
};

// The KV pools of a decoder: one K and one V tensor per layer, in the graph's pool contract.
struct KvPools {
  std::vector<Tensor> k, v;
  int64_t bytes() const;
};

// Classic models' compute precision (issue 16). kF32, the default: everything in f32. kBf16:
// conv2d and matmul by a constant weight run on bf16-rounded inputs with f32 sums and f32
// epilogues (the convert_precision_bf16 pass, engine/graph/passes/precision_passes.h); every
// other op and every tensor between ops stays f32. Runs on any x86-64 CPU: with AVX512-BF16 on
// vdpbf16ps, without it on a portable loop of the same rounding (slower than f32). Decoder (hf)
// models ignore it; their weight formats are ModelBuildOptions'.
enum class Precision { kF32, kBf16 };
// "f32", "bf16"; false (out unchanged) for anything else.
bool parse_precision(const std::string& name, Precision* out);

struct LoadOptions {
  ModelBuildOptions build;  // quantization, rotation, KV-cache format
  bool optimize = true;     // run the graph passes
  Precision precision = Precision::kF32;  // classic models (with optimize)
};

class Model {
 public:
  std::string path;          // as given to load_model
  std::string format;        // "hf" (config.json + safetensors), "gguf", "onnx", "paddle"
  std::string architecture;  // "LlamaForCausalLM", ...; "onnx (pytorch)" for an imported graph
  HfConfig config;           // decoder hyper-parameters (hf and gguf)
  graph::Graph graph;
  Signature signature;
  graph::passes::PassReport pass_report;
  // A decoder's KV pool format: one token row per layer and cache of kv_row_width elements of
  // kv_pool_dtype (f32 values, or the raw bytes of a quantized KvDtype as i8).
  KvDtype kv_dtype = KvDtype::kF32;
  DType kv_pool_dtype = DType::kF32;
  int64_t kv_row_width = 0;
  int64_t n_kv_layers = 0;

  // Bytes of one token row of one cache (K or V) of one layer.
  int64_t kv_row_bytes() const { return kv_row_width * dtype_storage_bytes(kv_pool_dtype, 1); }
  // Bytes of one block of block_size tokens over every layer, K and V.
  int64_t kv_block_bytes(int64_t block_size) const {
    return 2 * n_kv_layers * block_size * kv_row_bytes();
  }
  // [n_blocks, block_size, kv_row_width] per layer on `device`; an allocation failure is
  // Error(kOutOfMemory) naming `what`, the pool and the sizes.
  KvPools allocate_kv_pools(int64_t n_blocks, int64_t block_size, Device device, bool zero,
                            const std::string& what) const;
  // Feeds for the pools: name of layer l's K (V) input -> pools.k[l] (v[l]).
  void bind_kv_pools(const KvPools& pools, std::map<std::string, Tensor>& feeds) const;

  // Replaces the graph's host constants with copies on `device`, each distinct tensor once
  // (tied weights stay one copy), so every executor over this model (and clones of a C API
  // predictor) uses them as they are. An allocation failure is Error(kOutOfMemory) naming the
  // weight; what was uploaded before stays. On the CPU: localize_mapped_constants().
  void upload_constants(Device device);

  // Copies every constant of 2 MiB or more that views a file mapping (safetensors, GGUF) into
  // the CPU allocator's buffers, which sit on 2 MiB pages, and drops the copied pages of the
  // mapping from the process (so resident memory does not double). Decode streams the weights
  // once per token, and on the page cache's 4 KiB pages that stream is also one page walk and
  // one hardware-prefetch restart per 4 KiB: bf16 decode (TinyLlama shape) measured 1.07-1.10x
  // from the copies. Off with SAMPAN_HUGE_PAGES=0 (weights then stay mapped, as the LoRA
  // trainer always keeps them). Costs a copy at load (memory speed).
  void localize_mapped_constants();
  int64_t huge_page_weights = 0;  // distinct tensors copied by localize_mapped_constants

  // What keeps the graph's constants valid: the mapped files and the builder's own tensors.
  // `store` is the safetensors weight store of an "hf" model, null for every other format.
  std::shared_ptr<const WeightStore> store;
  std::shared_ptr<const void> builder_state;
};

// Reads the model at `path` (a registered format's file, see ModelFormat, or a directory with
// config.json and safetensors files) and builds it with the registered builder of its format and
// architecture, then runs the passes. Errors name the file.
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options);

// What a format reader found, handed to the builder.
struct ModelSource {
  std::string path, format, architecture;
  HfConfig config;
  std::shared_ptr<const WeightStore> store;
};
// Fills model.graph, model.signature and the KV fields (and builder_state); load_model runs
// the passes and checks the signature against the graph afterwards.
using ModelBuildFn = std::function<void(const ModelSource& source, const LoadOptions& options,
                                        Model& model)>;

// A model format with its own files (ONNX, Paddle): `detect` returns the file to read when
// `path` is in the format (a file, or a directory holding one), nullopt otherwise; `load` fills
// the Model's graph, signature, format, architecture and builder_state from that file.
// load_model asks each registered format in order and falls back to a Hugging Face directory.
struct ModelFormat {
  std::string name;
  std::optional<std::string> (*detect)(const std::string& path);
  void (*load)(const std::string& file, const LoadOptions& options, Model& model);
  // The format holds decoder LLMs (GGUF): `load` fills config and the KV fields too, and the
  // LLM front doors (run, chat, logits, serve's OpenAI routes) take it like a Hugging Face
  // directory. False for classic models (ONNX, Paddle).
  bool decoder = false;
};
void register_model_format(ModelFormat format);
// The name of the registered format that claims `path`, or "hf" when none does (reads no
// weights; a directory holding several candidate files is an error naming them).
std::string model_format_of(const std::string& path);
// Whether models of `format` (a model_format_of answer) are decoder LLMs: "hf" and every
// format registered with decoder = true.
bool is_decoder_format(const std::string& format);

// Registers a builder; static registration from the builder's file (see llama.cc).
void register_model_builder(const std::string& format, const std::string& architecture,
                            ModelBuildFn build);
// "hf/LlamaForCausalLM", ... in registration order.
std::vector<std::string> registered_model_builders();

}  // namespace sampan::models
