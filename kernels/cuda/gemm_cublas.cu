// cuBLASLt products, the per-device handle / scratch pool, and the heuristic cache. See
// gemm_cublas.cuh for the layout and precision contract.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "kernels/cuda/gemm_cublas.cuh"
#include "kernels/cuda/launch_config.cuh"

namespace sampan::cuda {
namespace {

// cuBLAS's recommendation for Hopper; smaller GPUs simply get algorithms that need less.
constexpr uint64_t kMaxWorkspaceBytes = 32ull << 20;
// Distinct shapes remembered before the cache starts over (prefill chunk lengths vary freely;
// an entry is ~100 bytes and a miss costs one heuristic query, tens of microseconds).
constexpr size_t kMaxCachedShapes = 8192;

struct DeviceState {
  cudaMemPool_t pool = nullptr;
  cublasLtHandle_t lt = nullptr;  // created on the first product
  int sm = 0;
};

std::mutex& state_mutex() {
  static std::mutex m;
  return m;
}

// Never destroyed: tearing handles down from a static destructor races with the CUDA runtime's
// own shutdown, and the process is ending anyway.
std::map<int, DeviceState*>& states() {
  static auto* m = new std::map<int, DeviceState*>();
  return *m;
}

GemmStatus device_state(bool need_lt, DeviceState** out) {
  int dev = 0;
  if (const cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return cuda_status(e);
  std::lock_guard<std::mutex> lock(state_mutex());
  DeviceState*& st = states()[dev];
  if (!st) {
    auto fresh = std::make_unique<DeviceState>();
    int major = 0, minor = 0;
    cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (e != cudaSuccess) return cuda_status(e);
    fresh->sm = major * 10 + minor;
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    if ((e = cudaMemPoolCreate(&fresh->pool, &props)) != cudaSuccess) return cuda_status(e);
    // Keep freed blocks: scratch is needed again at the next layer.
    uint64_t keep = UINT64_MAX;
    if ((e = cudaMemPoolSetAttribute(fresh->pool, cudaMemPoolAttrReleaseThreshold, &keep)) !=
        cudaSuccess) {
      cudaMemPoolDestroy(fresh->pool);
      return cuda_status(e);
    }
    st = fresh.release();
  }
  if (need_lt && !st->lt) {
    if (const cublasStatus_t s = cublasLtCreate(&st->lt); s != CUBLAS_STATUS_SUCCESS) {
      st->lt = nullptr;
      return {0, static_cast<int>(s)};
    }
  }
  *out = st;
  return {};
}

uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return 256;
  const uintptr_t low = a & (~a + 1);
  return static_cast<uint32_t>(low < 256 ? low : 256);
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    case DType::kF8E4M3: return CUDA_R_8F_E4M3;
    case DType::kI8:
    case DType::kI4:
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
    case DType::kBool: break;
  }
  return CUDA_R_32F;  // unreachable: lt_gemm checks the type first
}

// What the heuristic's answer depends on: device, types, sizes, strides and alignments.
using ShapeKey = std::array<int64_t, 13>;
struct CachedAlgo {
  int status = CUBLAS_STATUS_NOT_SUPPORTED;  // the heuristic's answer when nothing was found
  bool found = false;
  cublasLtMatmulAlgo_t algo = {};
  size_t workspace = 0;
};

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::map<ShapeKey, CachedAlgo>& algo_cache() {
  static auto* m = new std::map<ShapeKey, CachedAlgo>();
  return *m;
}

// Owns the descriptors of one call.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

#define SAMPAN_LT_TRY(call)                                                  \
  do {                                                                       \
    if (const cublasStatus_t s_ = (call); s_ != CUBLAS_STATUS_SUCCESS) {     \
      return GemmStatus{0, static_cast<int>(s_)};                            \
    }                                                                        \
  } while (0)

GemmStatus make_descs(const LtGemm& g, LtDescs& ds) {
  const bool fp8 = g.type == DType::kF8E4M3;
  const cudaDataType_t ab = cuda_type(g.type);
  SAMPAN_LT_TRY(cublasLtMatmulDescCreate(&ds.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  SAMPAN_LT_TRY(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  SAMPAN_LT_TRY(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (g.bias && !fp8) {
    // Bias elements have the output type (f32) for every non-integer, non-FP8 kernel.
    const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
    SAMPAN_LT_TRY(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
    const void* bias = g.bias;
    SAMPAN_LT_TRY(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                 sizeof(bias)));
  }
  // Column-major views of row-major memory (see the header).
  SAMPAN_LT_TRY(cublasLtMatrixLayoutCreate(&ds.a, ab, static_cast<uint64_t>(g.k),
                                           static_cast<uint64_t>(g.n), g.ldw));
  SAMPAN_LT_TRY(cublasLtMatrixLayoutCreate(&ds.b, ab, static_cast<uint64_t>(g.k),
                                           static_cast<uint64_t>(g.m), g.ldx));
  SAMPAN_LT_TRY(cublasLtMatrixLayoutCreate(&ds.d, CUDA_R_32F, static_cast<uint64_t>(g.n),
                                           static_cast<uint64_t>(g.m), g.ldy));
  return {};
}

GemmStatus find_algo(cublasLtHandle_t lt, const LtGemm& g, const LtDescs& ds, int dev,
                     CachedAlgo* out) {
  const bool bias = g.bias && g.type != DType::kF8E4M3;
  const ShapeKey key = {dev, static_cast<int64_t>(g.type), g.m, g.n, g.k, g.ldx, g.ldw, g.ldy,
                        bias ? 1 : 0, alignment(g.x), alignment(g.w), alignment(g.y),
                        bias ? alignment(g.bias) : 0};
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto it = algo_cache().find(key);
    if (it != algo_cache().end()) {
      *out = it->second;
      return {};
    }
  }
  LtDescs p;
  SAMPAN_LT_TRY(cublasLtMatmulPreferenceCreate(&p.pref));
  const uint64_t ws = kMaxWorkspaceBytes;
  SAMPAN_LT_TRY(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ws, sizeof(ws)));
  // The default assumes 256-byte aligned buffers; a fused block or a column slice of y is not.
  const uint32_t align_a = alignment(g.w), align_b = alignment(g.x), align_cd = alignment(g.y);
  SAMPAN_LT_TRY(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                     &align_a, sizeof(align_a)));
  SAMPAN_LT_TRY(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                     &align_b, sizeof(align_b)));
  SAMPAN_LT_TRY(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                     &align_cd, sizeof(align_cd)));
  SAMPAN_LT_TRY(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                     &align_cd, sizeof(align_cd)));
  cublasLtMatmulHeuristicResult_t result = {};
  int count = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, ds.op, ds.a, ds.b, ds.d, ds.d, p.pref,
                                                          1, &result, &count);
  CachedAlgo found;
  if (s == CUBLAS_STATUS_SUCCESS && count > 0) {
    found.found = true;
    found.algo = result.algo;
    found.workspace = result.workspaceSize;
  } else if (s != CUBLAS_STATUS_SUCCESS) {
    // Cached too: the same shape gets the same answer, and asking again costs a query per call.
    found.status = static_cast<int>(s);
  }
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    if (algo_cache().size() >= kMaxCachedShapes) algo_cache().clear();
    algo_cache()[key] = found;
  }
  *out = found;
  return {};
}

template <typename T>
__device__ T from_f32(float v);
template <>
__device__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

template <typename T>
__global__ void convert_rows_kernel(int64_t rows, int64_t cols,
                                    const float* __restrict__ x, int64_t ldx,  // [rows, cols]
                                    T* __restrict__ y, int64_t ldy) {          // [rows, cols]
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      y[r * ldy + c] = from_f32<T>(x[r * ldx + c]);
    }
  }
}

}  // namespace

const char* cublas_status_name(int status) {
  return cublasLtGetStatusName(static_cast<cublasStatus_t>(status));
}

int current_sm() {
  DeviceState* st = nullptr;
  return device_state(false, &st).ok() ? st->sm : 0;
}

GemmScratch::~GemmScratch() {
  // Stream-ordered: returns the block to the pool once the queued work has used it. An error
  // here (a dead context) has already been reported by the work itself.
  if (data_) cudaFreeAsync(data_, stream_);
}

int GemmScratch::allocate(size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  DeviceState* st = nullptr;
  const GemmStatus s = device_state(false, &st);
  if (!s.ok()) return s.cuda;
  stream_ = stream;
  return static_cast<int>(cudaMallocFromPoolAsync(&data_, bytes, st->pool, stream));
}

GemmStatus lt_gemm(const LtGemm& g, cudaStream_t stream) {
  if (g.type != DType::kF32 && g.type != DType::kBF16 && g.type != DType::kF16 &&
      g.type != DType::kF8E4M3) {
    return {0, CUBLAS_STATUS_NOT_SUPPORTED};
  }
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) return {};
  int dev = 0;
  if (const cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return cuda_status(e);
  DeviceState* st = nullptr;
  if (const GemmStatus s = device_state(true, &st); !s.ok()) return s;
  LtDescs ds;
  if (const GemmStatus s = make_descs(g, ds); !s.ok()) return s;
  CachedAlgo algo;
  if (const GemmStatus s = find_algo(st->lt, g, ds, dev, &algo); !s.ok()) return s;
  if (!algo.found) return {0, algo.status};
  GemmScratch workspace;
  if (const int e = workspace.allocate(algo.workspace, stream)) return cuda_status(e);
  const float alpha = 1.0f, beta = 0.0f;
  SAMPAN_LT_TRY(cublasLtMatmul(st->lt, ds.op, &alpha, g.w, ds.a, g.x, ds.b, &beta, g.y, ds.d, g.y,
                               ds.d, &algo.algo, workspace.data(), algo.workspace, stream));
  return {};
}

int convert_rows(int64_t rows, int64_t cols, const float* x, int64_t ldx, DType type, void* y,
                 int64_t ldy, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const Grid2 grid = rows_grid(rows, cols, kThreads);
  if (type == DType::kBF16) {
    convert_rows_kernel<<<dim3(grid.x, grid.y), kThreads, 0, stream>>>(
        rows, cols, x, ldx, static_cast<__nv_bfloat16*>(y), ldy);
  } else if (type == DType::kF16) {
    convert_rows_kernel<<<dim3(grid.x, grid.y), kThreads, 0, stream>>>(
        rows, cols, x, ldx, static_cast<__half*>(y), ldy);
  } else {
    return cudaErrorInvalidValue;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace sampan::cuda
