/*
 * opt.c — the table of opt.h turned into getopt_long's array, the values
 * checked and stored, and the usage text.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/kvbench/opt.h"

#define OPT_MAX 64      /* rows a table may have */
#define OPT_LONG 256    /* getopt_long's value for row i: OPT_LONG + i */
#define OPT_HELP_COL 22 /* the help's column, after two spaces */

static const char *opt_dashes(const opt_spec *r) {
  return r->name[1] ? "--" : "-";
}

/* A whole decimal number of at most max, digits alone; -1 if s is not. */
static int opt_u64(const char *s, uint64_t max, uint64_t *out) {
  char *end;
  if (*s < '0' || *s > '9') return -1; /* strtoull takes "-1" and " 1" */
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v > max) return -1;
  *out = v;
  return 0;
}

/* The largest value of a row's integer kind. */
static uint64_t opt_max(opt_kind k) {
  return k == OPT_INT ? INT_MAX : k == OPT_UNSIGNED ? UINT_MAX : UINT64_MAX;
}

static int opt_number(const opt_spec *r, void *f, const char *s) {
  uint64_t v;
  if (opt_u64(s, opt_max(r->kind), &v) || (r->positive && !v)) return -1;
  if (r->kind == OPT_INT) *(int *)f = (int)v;
  if (r->kind == OPT_UNSIGNED) *(unsigned *)f = (unsigned)v;
  if (r->kind == OPT_U64) *(uint64_t *)f = v;
  return 0;
}

static int opt_double(const opt_spec *r, double *f, const char *s) {
  char *end;
  double d = strtod(s, &end);
  if (end == s || *end || !isfinite(d) || d < 0 || (r->positive && !(d > 0))) return -1;
  *f = d;
  return 0;
}

/* Stores s (NULL for a flag) in the row's field of base; -1 if it is not
 * a value of the row's kind. */
static int opt_set(const opt_spec *r, void *base, const char *s) {
  void *f = (char *)base + r->off;
  switch (r->kind) {
  case OPT_FLAG:
  case OPT_QUICK:
    *(int *)f = 1;
    return 0;
  case OPT_INT:
  case OPT_UNSIGNED:
  case OPT_U64:
    return opt_number(r, f, s);
  case OPT_DOUBLE:
    return opt_double(r, f, s);
  case OPT_STR:
    *(const char **)f = s;
    return 0;
  case OPT_LIST:
    ((opt_list *)f)->v[((opt_list *)f)->n++] = (char *)s;
    return 0;
  }
  return -1;
}

/* Every named row goes to getopt, whatever its mode: opt_parse then says
 * which mode takes an option given in the other. */
static void opt_getopt(const opt_spec *t, size_t n, struct option *longs, char *shorts) {
  size_t nl = 0, ns = 0;
  for (size_t i = 0; i < n; i++) {
    if (!t[i].name) continue;
    int arg = t[i].kind != OPT_FLAG && t[i].kind != OPT_QUICK;
    if (t[i].name[1]) {
      longs[nl++] = (struct option){t[i].name, arg, NULL, OPT_LONG + (int)i};
      continue;
    }
    shorts[ns++] = t[i].name[0];
    if (arg) shorts[ns++] = ':';
  }
  longs[nl] = (struct option){0, 0, 0, 0};
  shorts[ns] = 0;
}

/* The row getopt_long answered c for; -1 for '?' (it said why). */
static int opt_row(const opt_spec *t, size_t n, int c) {
  if (c >= OPT_LONG) return c - OPT_LONG;
  for (size_t i = 0; i < n; i++)
    if (t[i].name && !t[i].name[1] && t[i].name[0] == c) return (int)i;
  return -1;
}

/* The defaults of the mode's rows, and room in its lists. */
static int opt_defaults(const opt_spec *t, size_t n, unsigned mode, int argc, void *base) {
  for (size_t i = 0; i < n; i++) {
    if (!(t[i].mode & mode)) continue;
    if (t[i].kind == OPT_LIST) {
      opt_list *l = (opt_list *)((char *)base + t[i].off);
      if (!(l->v = calloc((size_t)argc + 1, sizeof(char *)))) return -1;
    }
    if (t[i].def && opt_set(&t[i], base, t[i].def)) return -1;
  }
  return 0;
}

/* Why row r's argument s was refused. */
static void opt_refuse(const opt_spec *r, unsigned mode, const char *s) {
  if (!(r->mode & mode)) {
    fprintf(stderr, "kvbench: %s%s is an option of %s\n", opt_dashes(r), r->name,
            r->mode & OPT_SUITE ? "--suite" : "the simulation (no --suite)");
    return;
  }
  const char *want = r->kind == OPT_DOUBLE ? "a number" : "a whole number";
  fprintf(stderr, "kvbench: %s%s \"%s\": want %s%s\n", opt_dashes(r), r->name, s, want,
          r->positive ? " above 0" : "");
}

int opt_parse(const opt_spec *t, size_t n, unsigned mode, int argc, char **argv, void *base) {
  struct option longs[OPT_MAX + 1];
  char shorts[2 * OPT_MAX + 1];
  int given[OPT_MAX] = {0}, quick = 0, c;
  if (n > OPT_MAX || opt_defaults(t, n, mode, argc, base)) {
    fprintf(stderr, "kvbench: the option table: too many rows, a bad default, no memory\n");
    return 2;
  }
  opt_getopt(t, n, longs, shorts);
  optind = 1;
  while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
    int i = opt_row(t, n, c);
    if (i < 0) {
      fprintf(stderr, "kvbench: the options: kvbench --help\n");
      return 2;
    }
    if (!(t[i].mode & mode) || opt_set(&t[i], base, optarg)) {
      opt_refuse(&t[i], mode, optarg);
      return 2;
    }
    given[i] = 1;
    quick |= t[i].kind == OPT_QUICK;
  }
  if (optind < argc) {
    fprintf(stderr, "kvbench: unexpected argument \"%s\"\n", argv[optind]);
    return 2;
  }
  /* after the options, so that an option given wins over --quick in any order */
  for (size_t i = 0; quick && i < n; i++)
    if ((t[i].mode & mode) && t[i].quick && !given[i]) opt_set(&t[i], base, t[i].quick);
  return 0;
}

void opt_usage(FILE *f, const opt_spec *t, size_t n, unsigned mode) {
  for (size_t i = 0; i < n; i++) {
    const opt_spec *r = &t[i];
    if (!r->name || !r->help || r->mode != mode) continue;
    char head[64];
    snprintf(head, sizeof head, "%s%s%s%s", opt_dashes(r), r->name, r->arg ? " " : "",
             r->arg ? r->arg : "");
    fprintf(f, "  %-*s ", OPT_HELP_COL - 1, head);
    for (const char *h = r->help; *h; h++) {
      fputc(*h, f);
      if (*h == '\n') fprintf(f, "%*s", OPT_HELP_COL + 2, "");
    }
    if (r->def && r->kind != OPT_FLAG && r->kind != OPT_QUICK) fprintf(f, " (%s)", r->def);
    fputc('\n', f);
  }
}
