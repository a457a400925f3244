/*
 * host_pin.c — cudaHostRegister/cudaHostUnregister reached through dlopen().
 *
 * The library handle is kept open for the life of the process once a device
 * was found (the pool's destroy path still needs cudaHostUnregister); it is
 * closed again when the probe fails.
 */
#include "l1/host_pin.h"

#include <dlfcn.h>
#include <pthread.h>

#include "kvact.h"

/* cudaError_t is an enum; 0 is cudaSuccess. */
typedef int (*cuda_count_fn)(int *count);
typedef int (*cuda_register_fn)(void *p, size_t len, unsigned int flags);
typedef int (*cuda_unregister_fn)(void *p);

/* What the one-time probe found. Written only inside pthread_once, read only
 * after it, so pthread_once's synchronisation is all the ordering needed. */
static struct {
  int available;
  cuda_register_fn reg;
  cuda_unregister_fn unreg;
} cuda;

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

/* Opens the first libcudart that loads: the unversioned name (a toolkit
 * install), then the runtimes of CUDA 13 and 12. NULL when none does. */
static void *host_pin_open(void) {
  static const char *const names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  return NULL;
}

/* Loads the three symbols and asks for the device count; fills `cuda` only
 * when everything worked and at least one device exists. */
static void host_pin_probe(void) {
  void *h = host_pin_open();
  if (!h) return;
  cuda_count_fn count = (cuda_count_fn)dlsym(h, "cudaGetDeviceCount");
  cuda_register_fn reg = (cuda_register_fn)dlsym(h, "cudaHostRegister");
  cuda_unregister_fn unreg = (cuda_unregister_fn)dlsym(h, "cudaHostUnregister");
  int n = 0;
  if (!count || !reg || !unreg || count(&n) != 0 || n <= 0) {
    dlclose(h);
    return;
  }
  cuda.reg = reg;
  cuda.unreg = unreg;
  cuda.available = 1;
}

/* Runs the probe on the first call from any thread; the answer is then fixed. */
int host_pin_available(void) {
  pthread_once(&cuda_once, host_pin_probe);
  return cuda.available;
}

/* Registers the range with default flags (portable pinning is not needed: one
 * process, one context per device). */
int host_pin(void *p, size_t len) {
  if (!host_pin_available() || !p || len == 0) return KVA_EIO;
  return cuda.reg(p, len, 0 /* cudaHostRegisterDefault */) == 0 ? 0 : KVA_EIO;
}

/* Unregisters what host_pin registered; errors are ignored because the only
 * caller is a destroy path that cannot do anything about them. */
void host_unpin(void *p) {
  if (p && host_pin_available()) cuda.unreg(p);
}
