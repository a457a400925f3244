/*
 * common/array.c — geometric growth of arrays (array.h).
 */
#include "common/array.h"

#include <stdint.h>
#include <stdlib.h>

size_t array_next_cap(size_t cap, size_t need, size_t size) {
  if (size == 0) return 0;
  size_t max = (size_t)PTRDIFF_MAX / size; /* elements one object can hold */
  if (need > max) return 0;
  if (need <= cap) return cap;
  size_t n = cap ? cap : ARRAY_FIRST_CAP;
  while (n < need) n = n > max / 2 ? max : n * 2;
  return n > max ? max : n;
}

bool array_resize(void **items, size_t n, size_t size) {
  if (n == 0 || size == 0 || n > (size_t)PTRDIFF_MAX / size) return false;
  void *p = realloc(*items, n * size);
  if (!p) return false;
  *items = p;
  return true;
}

bool array_grow(void **items, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return true;
  size_t n = array_next_cap(*cap, need, size);
  if (n == 0 || !array_resize(items, n, size)) return false;
  *cap = n;
  return true;
}
