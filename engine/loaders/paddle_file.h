// Paddle inference models (paddle.jit.save / paddle.static.save_inference_model): the program
// (PIR json, the 3.x default, or the legacy ProgramDesc protobuf *.pdmodel) and the combined
// parameters file (*.pdiparams).
//
// The *.pdiparams layout (checked against files paddle 3.3.1 writes: save_combine): the
// persistable tensors one after another, in the order of their sorted names (pir_io.py sorts
// the names; the legacy io sorts them too), each serialized as a DenseTensor:
//   uint32 version (0) | uint64 lod_level | lod_level x (uint64 bytes, that many bytes of
//   size_t offsets) | uint32 tensor version (0) | int32 desc_size | desc_size bytes of a
//   VarType.TensorDesc protobuf (data_type, dims) | the raw data, little endian, row-major.
// No names, no padding, no trailer: a file is only readable against the program's list.
//
// What a caller may rely on: every error is one line naming the file (and the parameter where
// there is one); nothing is read past the end of the file: a params file shorter than the
// program declares names the first parameter that does not fit.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/tensor.h"


namespace sampan::paddle_format {
class ProgramDesc;
}

namespace sampan::paddle {

// Where a model's two files are: from a directory (holding one program and one .pdiparams), a
// prefix ("out/inference" -> out/inference.json or .pdmodel + out/inference.pdiparams) or the
// program file itself (the params file next to it, same stem).
struct PaddlePaths {
  std::string program;  // *.json or *.pdmodel
  std::string params;   // *.pdiparams (may not exist: reading it names the problem)
  bool pir = true;      // program is PIR json
};
// nullopt when `path` is no Paddle model; throws when it is ambiguous (a directory holding
// several programs).
std::optional<PaddlePaths> paddle_paths(const std::string& path);

// One parameter as the program declares it.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> dims;  // as declared; -1 / empty: not checked
  DType dtype = DType::kF32;
};

// Reads `path` against `params` (any order; read in sorted-name order). Tensors are CPU copies.
// Errors: missing file, a tensor header or data past the end of the file ("ends inside
// parameter 'x' (3 of 24): needs N bytes at offset O, the file has S"), a TensorDesc that is not
// one, a data type Sampan cannot hold, dims other than declared, bytes left over.
std::map<std::string, Tensor> read_pdiparams(const std::string& path, std::vector<ParamSpec> params);
// The same on the file's bytes (`path` only names it in messages).
std::map<std::string, Tensor> parse_pdiparams(const std::string& bytes, const std::string& path,
                                              std::vector<ParamSpec> params);

// Paddle's VarType.Type as a Sampan DType (FP64 and FP16 become f32 when tensors are read);
// throws Error(kUnsupported) naming `what`.
DType paddle_dtype(int32_t var_type, const std::string& what);
// "float32", "int64", ... (PIR's a_dtype spelling) as a DType.
DType paddle_dtype_name(const std::string& name, const std::string& what);

// The legacy program (*.pdmodel), parsed; errors name the file.
std::shared_ptr<const paddle_format::ProgramDesc> read_pdmodel(const std::string& path);
std::shared_ptr<const paddle_format::ProgramDesc> parse_pdmodel(const std::string& bytes, const std::string& path);
// The persistable variables of block 0 (the parameters *.pdiparams holds, feed/fetch excluded)
// with their declared dims and data types; errors name the file.
std::vector<ParamSpec> pdmodel_params(const paddle_format::ProgramDesc& prog, const std::string& path);

// Reads a whole file; errors name it.
std::string read_file_bytes(const std::string& path, const char* what);

}  // namespace sampan::paddle
