#include "server/model_dir_out.h"

#include <filesystem>

#include "engine/core/error.h"

namespace sampan::cli {
namespace {

namespace fs = std::filesystem;

bool is_weight_file(const fs::path& p) {
  const std::string name = p.filename().string();
  for (const std::string e : {".safetensors", ".bin", ".pt", ".pth", ".gguf", ".index.json", ".tmp"}) {
    if (name.size() >= e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

void check_output_dir(const std::string& model_dir, const std::string& out_dir) {
  std::error_code ec;
  SAMPAN_CHECK(fs::is_directory(model_dir, ec), ErrorCode::kNotFound,
               "--model: {} is not a model directory", model_dir);
  const fs::path in = fs::canonical(model_dir, ec);
  const fs::path out = fs::weakly_canonical(out_dir, ec);
  SAMPAN_CHECK(!ec && in != out, ErrorCode::kInvalidArgument,
               "--out: {} is the input model directory; refusing to overwrite it", out_dir);
  if (fs::exists(out, ec)) {
    SAMPAN_CHECK(fs::is_directory(out, ec) && fs::is_empty(out, ec), ErrorCode::kInvalidArgument,
                 "--out: {} exists and is not an empty directory", out_dir);
  }
}

void copy_support_files(const std::string& model_dir, const std::string& out_dir,
                        bool skip_config) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(model_dir)) {
    if (!entry.is_regular_file() || is_weight_file(entry.path()) ||
        (skip_config && entry.path().filename() == "config.json")) {
      continue;
    }
    fs::copy_file(entry.path(), fs::path(out_dir) / entry.path().filename(),
                  fs::copy_options::overwrite_existing, ec);
    SAMPAN_CHECK(!ec, ErrorCode::kIo, "cannot copy {} to {}: {}", entry.path().string(), out_dir,
                 ec.message());
  }
}

}  // namespace sampan::cli
