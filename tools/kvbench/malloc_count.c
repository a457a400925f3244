/*
 * malloc_count.c — counts heap allocations of the whole kvbench process
 * (the library included: it is linked statically) by interposing malloc and
 * friends over glibc's. Used to prove "no malloc per message".
 */
#include <ck_pr.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/kvbench/malloc_count.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
/* A sanitizer owns malloc and free (ASan and TSan intercept them; ours on
 * top aborts in free of a posix_memalign block): nothing is counted in
 * those builds, which are for correctness, not figures. */
uint64_t malloc_count(void) {
  return 0;
}
#else
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static uint64_t allocations;

uint64_t malloc_count(void) {
  return ck_pr_load_64(&allocations);
}

void *malloc(size_t n) {
  ck_pr_inc_64(&allocations);
  return __libc_malloc(n);
}

void *calloc(size_t a, size_t b) {
  ck_pr_inc_64(&allocations);
  return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n) {
  ck_pr_inc_64(&allocations);
  return __libc_realloc(p, n);
}

void *aligned_alloc(size_t align, size_t n) {
  ck_pr_inc_64(&allocations);
  return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n) {
  ck_pr_inc_64(&allocations);
  void *p = __libc_memalign(align, n);
  if (!p) return 12; /* ENOMEM */
  *out = p;
  return 0;
}

void free(void *p) {
  __libc_free(p);
}
#endif
