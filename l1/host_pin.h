/*
 * host_pin.h — page-locking host memory for DMA through the CUDA runtime,
 * when there is one.
 *
 * libcudart is opened with dlopen() at the first call, so kvact neither links
 * against CUDA nor needs it installed. Any failure (no library, a missing
 * symbol, cudaGetDeviceCount failing or counting 0 devices) reads as "no CUDA
 * device" and pinning is unavailable. Thread-safe.
 */
#ifndef KVA_L1_HOST_PIN_H
#define KVA_L1_HOST_PIN_H

#include <stddef.h>

/* 1 when a CUDA device was found and memory can be pinned, else 0. The probe
 * runs once (pthread_once); later calls return the cached answer. */
int host_pin_available(void);
/* Page-locks [p, p + len) with cudaHostRegister (default flags). 0, or KVA_EIO
 * when pinning is unavailable or the call fails. */
int host_pin(void *p, size_t len);
/* Undoes host_pin(p, ...); a no-op when pinning is unavailable or p is NULL. */
void host_unpin(void *p);

#endif
