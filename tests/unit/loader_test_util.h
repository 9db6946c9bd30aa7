// Helpers shared by the loader tests: a scratch directory, a tiny safetensors writer that is
// independent of the reader under test, and a check for the one-line sampan::Error.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/tensor.h"

namespace sampan::test {

// A fresh directory under the system temp dir, named sampan_test_<tag>_XXXXXX, removed with
// everything in it.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    std::string templ =
        (std::filesystem::temp_directory_path() / ("sampan_test_" + tag + "_XXXXXX")).string();
    REQUIRE(::mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path.string(); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// ---- a tiny safetensors writer, independent of the reader under test ----

struct Spec {
  std::string name;
  std::string dtype;  // safetensors spelling
  Shape shape;
  std::vector<uint8_t> bytes;
};

inline size_t element_size(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  if (dtype == "I64" || dtype == "F64") return 8;
  return 1;
}

// `n` distinct bytes so a mix-up between tensors shows in the values.
inline std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 31 * i);
  return v;
}

inline Spec spec(const std::string& name, const std::string& dtype, const Shape& shape,
                 uint8_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return {name, dtype, shape, pattern(static_cast<size_t>(n) * element_size(dtype), seed)};
}

inline void write_raw(const std::string& path, uint64_t header_len, const std::string& header,
                      const std::vector<uint8_t>& data) {
  std::ofstream out(path, std::ios::binary);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(header_len >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  REQUIRE(out.good());
}

inline void write_header_and_data(const std::string& path, const std::string& header,
                                  const std::vector<uint8_t>& data) {
  write_raw(path, header.size(), header, data);
}

// Lays the tensors out back to back in the given order; pads the header with spaces to a
// multiple of `pad` bytes (1: no padding).
inline void write_safetensors(const std::string& path, const std::vector<Spec>& specs,
                              const std::optional<nlohmann::json>& metadata = std::nullopt,
                              size_t pad = 8) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<uint8_t> data;
  for (const Spec& s : specs) {
    const uint64_t begin = data.size();
    data.insert(data.end(), s.bytes.begin(), s.bytes.end());
    header[s.name] = {
        {"dtype", s.dtype}, {"shape", s.shape}, {"data_offsets", {begin, data.size()}}};
  }
  if (metadata) header["__metadata__"] = *metadata;
  std::string text = header.dump();
  while (text.size() % pad != 0) text += ' ';
  write_header_and_data(path, text, data);
}

// ---- errors ----

// Runs `fn`, which must throw sampan::Error with `code`; returns the message after checking it
// is one line and names every string in `needles`.
template <typename Fn>
std::string expect_error(Fn&& fn, ErrorCode code, const std::vector<std::string>& needles) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    INFO("message: " << msg);
    CHECK(e.code() == code);
    CHECK(msg.find('\n') == std::string::npos);
    for (const auto& n : needles) CHECK(msg.find(n) != std::string::npos);
    return msg;
  }
  FAIL("no sampan::Error thrown");
  return {};
}

}  // namespace sampan::test
