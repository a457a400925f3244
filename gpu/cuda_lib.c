/*
 * cuda_lib.c — dlopen of libkvact_cuda.so, once per process.
 *
 * The handle stays open for the life of the process once the interface was
 * found: streams and callbacks may outlive any one copy device.
 */
#include "gpu/cuda_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "actors/log.h"

static const cuda_api *api;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* $KVACT_CUDA_LIB, the Bazel runfiles path, then the loader's search. */
static void *cuda_lib_open(char *why, size_t len) {
  const char *env = getenv("KVACT_CUDA_LIB");
  const char *names[] = {env, "gpu/libkvact_cuda.so", "libkvact_cuda.so"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    if (!names[i] || !*names[i]) continue;
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    const char *e = dlerror();
    snprintf(why, len, "%s", e ? e : names[i]);
  }
  return NULL;
}

/* Written only inside pthread_once and read after it: the once call is
 * all the ordering needed. */
static void cuda_lib_load(void) {
  char why[256] = "not found";
  void *h = cuda_lib_open(why, sizeof(why));
  if (!h) {
    LOG_WARN("gpu: CUDA unavailable: cannot load libkvact_cuda.so (%s)", why);
    return;
  }
  cuda_api_fn fn = (cuda_api_fn)dlsym(h, KVA_CUDA_API_SYMBOL);
  const cuda_api *a = fn ? fn() : NULL;
  if (!a || a->version != KVA_CUDA_API_VERSION) {
    LOG_WARN("gpu: CUDA unavailable: libkvact_cuda.so has no %s v%u", KVA_CUDA_API_SYMBOL,
             KVA_CUDA_API_VERSION);
    dlclose(h);
    return;
  }
  api = a;
}

const cuda_api *cuda_lib_api(void) {
  pthread_once(&once, cuda_lib_load);
  return api;
}
