// Helpers shared by the libFuzzer targets (tests/fuzz/fuzz_*.cc). Each target feeds its input to
// one parser; a sampan::Error (or the server's RequestError) is the expected refusal of bad
// input, anything else — a crash, a sanitizer report, another exception, a hang — is a bug.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

namespace sampan::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The loaders take paths: writes the input to `name` in a private directory of this process
// and returns its path (overwritten on every call).
inline std::string write_temp(const std::string& name, std::string_view bytes) {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::filesystem::path d = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") /
                              ("sampan-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  const std::filesystem::path p = dir / name;
  std::FILE* f = std::fopen(p.c_str(), "wb");
  if (!f) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
  return p.string();
}

// Splits the input at the first NUL byte: (before, after); no NUL gives (all, nothing).
inline std::pair<std::string_view, std::string_view> split_at_nul(std::string_view in) {
  const size_t at = in.find('\0');
  if (at == std::string_view::npos) return {in, {}};
  return {in.substr(0, at), in.substr(at + 1)};
}

// The repository root, for targets that load real tokenizers or templates once.
inline std::filesystem::path source_dir() { return SAMPAN_SOURCE_DIR; }

}  // namespace sampan::fuzz
