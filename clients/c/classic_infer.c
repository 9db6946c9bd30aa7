/* Sampan C API example: run a classic model (ONNX) the way Paddle Inference programs do.
 *
 *   sampan_c_classic_infer MODEL [--input NAME=D0xD1x...[:FILE]]... [--fill VALUE]
 *                          [--threads N] [--print N]
 *
 * MODEL is an .onnx file or a directory holding one. Every input of the model gets a shape and
 * data: --input NAME=DIMS gives its shape (e.g. images=2x3x16x16) and, after a colon, a file of
 * raw native-endian elements in the input's model dtype (numel * element size bytes, e.g. a
 * numpy array's tofile()); without a file, every element is --fill (default 1). An input not
 * named must have a fully fixed declared shape, which is used. The flow:
 * config -> predictor -> input names -> handle -> reshape -> copy_from_cpu -> run -> output
 * handles -> shape, dtype -> copy_to_cpu.
 *
 * Output lines (stable, parsed by tests/e2e/test_capi_classic.py):
 *   input[i]: NAME DTYPE [DIM, ...]        the declared shape, symbolic dims by name
 *   output[i]: NAME DTYPE [DIM, ...]
 *   result[i]: NAME DTYPE D0 D1 ...        after the run: the actual shape
 *   values[i]: V V V ...                   the first --print values (default 8), %.9g
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampan.h"

#define MAX_RANK 8
#define MAX_ARGS 64

static void check(SampanStatus status, const char* what) {
  if (status != SAMPAN_OK) {
    fprintf(stderr, "error: %s: %s: %s\n", what, sampan_status_name(status), sampan_last_error());
    exit(1);
  }
}

static void die(const char* message, const char* detail) {
  fprintf(stderr, "error: %s%s\n", message, detail);
  exit(2);
}

static const char* dtype_name(SampanDType dtype) {
  switch (dtype) {
    case SAMPAN_DTYPE_F32: return "f32";
    case SAMPAN_DTYPE_I32: return "i32";
    case SAMPAN_DTYPE_I64: return "i64";
    case SAMPAN_DTYPE_BOOL: return "bool";
    case SAMPAN_DTYPE_U8: return "u8";
    default: return "undefined";
  }
}

static size_t dtype_size(SampanDType dtype) {
  switch (dtype) {
    case SAMPAN_DTYPE_F32: case SAMPAN_DTYPE_I32: return 4;
    case SAMPAN_DTYPE_I64: return 8;
    case SAMPAN_DTYPE_BOOL: case SAMPAN_DTYPE_U8: return 1;
    default: return 0;
  }
}

/* "[batch, 3, h, w]": the declared shape of a tensor. */
static void print_declared(SampanTensor* t) {
  int64_t dims[MAX_RANK];
  int32_t rank = 0, d;
  check(sampan_tensor_get_model_shape(t, dims, MAX_RANK, &rank), "sampan_tensor_get_model_shape");
  printf("[");
  for (d = 0; d < rank; ++d) {
    const char* sym = "";
    check(sampan_tensor_get_dim_name(t, d, &sym), "sampan_tensor_get_dim_name");
    if (dims[d] < 0) printf("%s%s", d ? ", " : "", sym);
    else printf("%s%lld", d ? ", " : "", (long long)dims[d]);
  }
  printf("]\n");
}

/* Parses "2x3x16x16" into dims; returns the rank, 0 on a malformed text. */
static int32_t parse_dims(const char* text, int64_t* dims) {
  int32_t rank = 0;
  const char* p = text;
  while (*p != '\0') {
    char* end = NULL;
    long long v;
    errno = 0;
    v = strtoll(p, &end, 10);
    if (end == p || errno != 0 || v < 0 || rank == MAX_RANK) return 0;
    dims[rank++] = (int64_t)v;
    p = end;
    if (*p == 'x') ++p;
    else if (*p != '\0') return 0;
  }
  return rank;
}

static void* read_file(const char* path, size_t want) {
  FILE* f = fopen(path, "rb");
  void* data;
  long size;
  if (f == NULL) die("cannot open ", path);
  if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    die("cannot read ", path);
  }
  if ((size_t)size != want) {
    fprintf(stderr, "error: %s holds %ld bytes, the input's shape and dtype need %lu\n", path,
            size, (unsigned long)want);
    exit(2);
  }
  data = malloc(want > 0 ? want : 1);
  if (data == NULL) die("out of memory for ", path);
  if (want > 0 && fread(data, 1, want, f) != want) die("cannot read ", path);
  fclose(f);
  return data;
}

static void fill(void* data, SampanDType dtype, size_t numel, double value) {
  size_t i;
  for (i = 0; i < numel; ++i) {
    switch (dtype) {
      case SAMPAN_DTYPE_F32: ((float*)data)[i] = (float)value; break;
      case SAMPAN_DTYPE_I32: ((int32_t*)data)[i] = (int32_t)value; break;
      case SAMPAN_DTYPE_I64: ((int64_t*)data)[i] = (int64_t)value; break;
      case SAMPAN_DTYPE_BOOL: ((uint8_t*)data)[i] = value != 0.0; break;
      case SAMPAN_DTYPE_U8: ((uint8_t*)data)[i] = (uint8_t)value; break;
      default: break;
    }
  }
}

static void print_values(int32_t index, const void* data, SampanDType dtype, size_t n) {
  size_t i;
  printf("values[%d]:", index);
  for (i = 0; i < n; ++i) {
    switch (dtype) {
      case SAMPAN_DTYPE_F32: printf(" %.9g", (double)((const float*)data)[i]); break;
      case SAMPAN_DTYPE_I32: printf(" %d", (int)((const int32_t*)data)[i]); break;
      case SAMPAN_DTYPE_I64: printf(" %lld", (long long)((const int64_t*)data)[i]); break;
      default: printf(" %u", (unsigned)((const uint8_t*)data)[i]); break;
    }
  }
  printf("\n");
}

int main(int argc, char** argv) {
  const char* specs[MAX_ARGS];
  int n_specs = 0, i;
  int32_t threads = 0, n_inputs = 0, n_outputs = 0, k;
  long n_print = 8;
  double fill_value = 1.0;
  SampanConfig* config = NULL;
  SampanPredictor* predictor = NULL;

  if (argc < 2 || argv[1][0] == '-') {
    fprintf(stderr,
            "usage: %s MODEL [--input NAME=D0xD1x...[:FILE]]... [--fill VALUE] [--threads N] "
            "[--print N]\n",
            argv[0]);
    return 2;
  }
  for (i = 2; i < argc; ++i) {
    if (strcmp(argv[i], "--input") == 0 && i + 1 < argc) {
      if (n_specs == MAX_ARGS) die("too many --input", "");
      specs[n_specs++] = argv[++i];
    } else if (strcmp(argv[i], "--fill") == 0 && i + 1 < argc) {
      fill_value = atof(argv[++i]);
    } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = (int32_t)atoi(argv[++i]);
    } else if (strcmp(argv[i], "--print") == 0 && i + 1 < argc) {
      n_print = atol(argv[++i]);
      if (n_print < 0) n_print = 0;
    } else {
      die("unknown or incomplete argument ", argv[i]);
    }
  }

  check(sampan_config_create(&config), "sampan_config_create");
  check(sampan_config_set_model_dir(config, argv[1]), "sampan_config_set_model_dir");
  check(sampan_config_set_threads(config, threads), "sampan_config_set_threads");
  check(sampan_predictor_create(config, &predictor), "sampan_predictor_create");
  check(sampan_config_destroy(config), "sampan_config_destroy");

  /* The model's inputs and outputs, as it declares them. */
  check(sampan_predictor_get_input_num(predictor, &n_inputs), "sampan_predictor_get_input_num");
  check(sampan_predictor_get_output_num(predictor, &n_outputs), "sampan_predictor_get_output_num");
  for (k = 0; k < n_inputs + n_outputs; ++k) {
    const int is_input = k < n_inputs;
    const int32_t index = is_input ? k : k - n_inputs;
    const char* name = NULL;
    SampanTensor* t = NULL;
    SampanDType dtype = SAMPAN_DTYPE_UNDEFINED;
    if (is_input) {
      check(sampan_predictor_get_input_name(predictor, index, &name), "get_input_name");
      check(sampan_predictor_get_input_handle(predictor, name, &t), "get_input_handle");
    } else {
      check(sampan_predictor_get_output_name(predictor, index, &name), "get_output_name");
      check(sampan_predictor_get_output_handle(predictor, name, &t), "get_output_handle");
    }
    check(sampan_tensor_get_model_dtype(t, &dtype), "sampan_tensor_get_model_dtype");
    printf("%s[%d]: %s %s ", is_input ? "input" : "output", index, name, dtype_name(dtype));
    print_declared(t);
  }

  /* Every input: reshape, then copy its data in. */
  for (k = 0; k < n_inputs; ++k) {
    const char* name = NULL;
    const char* spec = NULL;
    const char* file = NULL;
    SampanTensor* t = NULL;
    SampanDType dtype = SAMPAN_DTYPE_UNDEFINED;
    int64_t dims[MAX_RANK];
    int32_t rank = 0, d;
    size_t numel = 1, bytes;
    void* data;
    char dims_text[256];
    check(sampan_predictor_get_input_name(predictor, k, &name), "get_input_name");
    check(sampan_predictor_get_input_handle(predictor, name, &t), "get_input_handle");
    check(sampan_tensor_get_model_dtype(t, &dtype), "sampan_tensor_get_model_dtype");
    for (i = 0; i < n_specs; ++i) {
      const size_t len = strlen(name);
      if (strncmp(specs[i], name, len) == 0 && specs[i][len] == '=') spec = specs[i] + len + 1;
    }
    if (spec != NULL) {
      const char* colon = strchr(spec, ':');
      const size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
      if (len >= sizeof dims_text) die("--input dims too long: ", spec);
      memcpy(dims_text, spec, len);
      dims_text[len] = '\0';
      rank = parse_dims(dims_text, dims);
      if (rank == 0) die("--input: malformed dims (expected e.g. 2x3x16x16): ", spec);
      if (colon != NULL) file = colon + 1;
    } else {
      check(sampan_tensor_get_model_shape(t, dims, MAX_RANK, &rank), "get_model_shape");
      for (d = 0; d < rank; ++d) {
        if (dims[d] < 0) die("give the shape of this input with --input NAME=DIMS: ", name);
      }
    }
    for (d = 0; d < rank; ++d) numel *= (size_t)dims[d];
    bytes = numel * dtype_size(dtype);
    if (file != NULL) {
      data = read_file(file, bytes);
    } else {
      data = malloc(bytes > 0 ? bytes : 1);
      if (data == NULL) die("out of memory for input ", name);
      fill(data, dtype, numel, fill_value);
    }
    check(sampan_tensor_reshape(t, dims, rank), "sampan_tensor_reshape");
    check(sampan_tensor_copy_from_cpu(t, dtype, data, bytes), "sampan_tensor_copy_from_cpu");
    free(data);
  }

  check(sampan_predictor_run(predictor), "sampan_predictor_run");

  /* Every output: its shape and dtype after the run, then its data. */
  for (k = 0; k < n_outputs; ++k) {
    const char* name = NULL;
    SampanTensor* t = NULL;
    SampanDType dtype = SAMPAN_DTYPE_UNDEFINED;
    int64_t dims[MAX_RANK];
    int32_t rank = 0, d;
    size_t numel = 1, bytes;
    void* data;
    check(sampan_predictor_get_output_name(predictor, k, &name), "get_output_name");
    check(sampan_predictor_get_output_handle(predictor, name, &t), "get_output_handle");
    check(sampan_tensor_get_shape(t, dims, MAX_RANK, &rank), "sampan_tensor_get_shape");
    check(sampan_tensor_get_dtype(t, &dtype), "sampan_tensor_get_dtype");
    printf("result[%d]: %s %s", k, name, dtype_name(dtype));
    for (d = 0; d < rank; ++d) {
      printf(" %lld", (long long)dims[d]);
      numel *= (size_t)dims[d];
    }
    printf("\n");
    bytes = numel * dtype_size(dtype);
    data = malloc(bytes > 0 ? bytes : 1);
    if (data == NULL) die("out of memory for output ", name);
    check(sampan_tensor_copy_to_cpu(t, dtype, data, bytes), "sampan_tensor_copy_to_cpu");
    print_values(k, data, dtype, numel < (size_t)n_print ? numel : (size_t)n_print);
    free(data);
  }
  check(sampan_predictor_destroy(predictor), "sampan_predictor_destroy");
  return 0;
}
