/*
 * common/array.h — growing an array geometrically, with overflow checks.
 *
 * One rule for every growable array of the library and its tools: the
 * capacity doubles (from ARRAY_FIRST_CAP when empty) until the array holds
 * what is needed, so that growing to n elements costs O(n) in all; and a
 * failure (the byte count would pass PTRDIFF_MAX, the most one object may
 * have, or realloc fails) leaves the array and its capacity as they were,
 * so the caller keeps what it had. New elements are not initialised.
 *
 * Internal to kvact (not exported from libkvact.so).
 */
#ifndef KVA_COMMON_ARRAY_H
#define KVA_COMMON_ARRAY_H

#include <stdbool.h>
#include <stddef.h>

#define ARRAY_FIRST_CAP 16 /* capacity of an empty array's first growth (at least) */

/* The capacity, in elements of `size` bytes, that an array of cap elements
 * needs to hold `need`: cap itself when it is enough, else cap doubled
 * (ARRAY_FIRST_CAP when cap is 0) until it is. 0 when that many bytes
 * could not be one object (or size is 0). */
size_t array_next_cap(size_t cap, size_t need, size_t size);

/* Makes *items, an array of *cap elements of `size` bytes, hold at least
 * `need` (array_next_cap): true with *items and *cap updated, or false with
 * both as they were. Nothing to do (true) when need <= *cap. */
bool array_grow(void **items, size_t *cap, size_t need, size_t size);

/* Resizes *items to exactly n elements of `size` bytes (n > 0): false
 * (overflow or ENOMEM) leaves it as it was. For arrays that share one
 * capacity, computed once with array_next_cap. */
bool array_resize(void **items, size_t n, size_t size);

/* The same on a typed array pointer `p` (an lvalue such as t->keys,
 * evaluated more than once): ARRAY_GROW(t->keys, &t->cap, n). */
#define ARRAY_GROW(p, cap, need)                                                                   \
  __extension__({                                                                                  \
    void *array_p_ = (p);                                                                          \
    bool array_ok_ = array_grow(&array_p_, (cap), (need), sizeof *(p));                            \
    if (array_ok_) (p) = array_p_;                                                                 \
    array_ok_;                                                                                     \
  })
#define ARRAY_RESIZE(p, n)                                                                         \
  __extension__({                                                                                  \
    void *array_p_ = (p);                                                                          \
    bool array_ok_ = array_resize(&array_p_, (n), sizeof *(p));                                    \
    if (array_ok_) (p) = array_p_;                                                                 \
    array_ok_;                                                                                     \
  })

#endif
