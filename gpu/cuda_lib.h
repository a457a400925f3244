/*
 * cuda_lib.h — finding and opening libkvact_cuda.so (see cuda_api.h).
 */
#ifndef KVA_GPU_CUDA_LIB_H
#define KVA_GPU_CUDA_LIB_H

#include "gpu/cuda_api.h"

/* The library's interface, or NULL when it cannot be loaded (no file, a
 * placeholder built without nvcc, no libcudart, a version mismatch); the
 * reason is logged once. Loaded once per process; thread-safe. */
const cuda_api *cuda_lib_api(void);

#endif
