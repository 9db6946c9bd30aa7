// SAMPAN_HD marks the constexpr helpers of kernels/common that CUDA device code calls too; in a
// host-only translation unit it expands to nothing.
#pragma once

#if defined(__CUDACC__)
#define SAMPAN_HD __host__ __device__
#else
#define SAMPAN_HD
#endif
