// Writing a model directory derived from another (`sampan quantize`, `sampan merge-lora`): the
// output path checks and the copy of the files that are not weights.
#pragma once

#include <string>

namespace sampan::cli {

// --model must be a directory; --out must not be it and, if it exists, must be an empty
// directory. Each failure is one Error naming the flag.
void check_output_dir(const std::string& model_dir, const std::string& out_dir);

// Copies every regular file of model_dir that is not a weight file (safetensors, .bin, .pt,
// .pth, .gguf, shard indexes, temporaries) into out_dir: tokenizer, generation config, chat
// template; config.json too unless `skip_config`.
void copy_support_files(const std::string& model_dir, const std::string& out_dir,
                        bool skip_config);

}  // namespace sampan::cli
