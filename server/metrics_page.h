/*
 * metrics_page.h — what the files of kvactd's Prometheus page share; its
 * readers are metrics.c (the page, the storage and client families, the
 * HTTP server) and metrics_l2.c (the L2 tiers' and their servers'
 * families):
 *
 *   - the page writer: snprintf's contract over many appends (len counts
 *     what would have been written, so a page too big for its buffer says
 *     how big it is), label values escaped as the format requires, and a
 *     family's # HELP and # TYPE lines;
 *   - the L2 part, read whole before the page's first family is written
 *     (metrics.c's rule), then written.
 */
#ifndef KVA_SERVER_METRICS_PAGE_H
#define KVA_SERVER_METRICS_PAGE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvact.h"

typedef struct page {
  char *buf;
  size_t cap, len; /* len counts what would have been written */
} page;

void page_put(page *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* v with \, " and newline escaped. */
void page_label_value(page *p, const char *v);
void page_family(page *p, const char *name, const char *type, const char *help);

/* The uint64_t at byte off of a stats struct. */
static inline uint64_t page_u64_at(const void *base, size_t off) {
  uint64_t v;
  memcpy(&v, (const char *)base + off, sizeof(v));
  return v;
}

/* metrics_l2.c: every tier's stats, keys and servers, read from storage s
 * (NULL when out of memory: the page then has no L2 families), written,
 * freed (NULL is fine). */
typedef struct metrics_l2 metrics_l2;
metrics_l2 *metrics_l2_read(kva_storage *s);
void metrics_l2_put(page *p, const metrics_l2 *v);
void metrics_l2_free(metrics_l2 *v);

#endif
