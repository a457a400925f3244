/*
 * config/schema_doc.c — the configuration reference, generated from the
 * schema table so that it cannot drift from what the loader accepts.
 * `kvconf schema [--markdown]` prints it; config/SCHEMA.md is its output,
 * and a test checks that the two agree. The lists of registered names
 * (adapter types, policies) come from the caller, who asks the registries
 * (config_doc_lists), so that no copy of them is written by hand.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "config/config_internal.h"

typedef struct out {
  char *p;
  size_t len, cap;
  int failed;
} out;

__attribute__((format(printf, 2, 3))) static void put(out *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (o->failed || n < 0) return;
  if (!ARRAY_GROW(o->p, &o->cap, o->len + (size_t)n + 1)) {
    o->failed = 1;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
  va_end(ap);
  o->len += (size_t)n;
}

/* The markers of config_doc_lists, by config_list. */
static const char *const list_marker[CONFIG_LISTS] = {
    "{tier_types}",
    "{eviction_policies}",
    "{store_policies}",
    "{prefetch_policies}",
};

/* s with each marker replaced by its list (kept as written when the
 * list was not given). */
static void put_doc(out *o, const char *s, const config_doc_lists *lists) {
  while (*s) {
    size_t n = strcspn(s, "{");
    put(o, "%.*s", (int)n, s);
    s += n;
    if (!*s) return;
    size_t i = 0;
    while (i < CONFIG_LISTS && strncmp(s, list_marker[i], strlen(list_marker[i])) != 0) i++;
    const char *names = i < CONFIG_LISTS && lists ? lists->names[i] : NULL;
    size_t skip = i < CONFIG_LISTS ? strlen(list_marker[i]) : 1;
    put(o, "%.*s", (int)(names ? strlen(names) : skip), names ? names : s);
    s += skip;
  }
}

static char *finish(out *o) {
  if (o->failed) {
    free(o->p);
    return NULL;
  }
  return o->p;
}

static void key_name(const config_key *k, int md, char *buf, size_t cap) {
  const char *q = md ? "`" : "";
  if (!k->scope)
    snprintf(buf, cap, "%s%s%s", q, k->path, q);
  else if (!strcmp(k->scope, "*"))
    snprintf(buf, cap, "%sl2[i].%s%s", q, k->path, q);
  else
    snprintf(buf, cap, "%sl2[i].%s%s (%s)", q, k->path, q, k->scope);
}

static const char *type_name(const config_key *k) {
  switch (k->type) {
  case CONFIG_T_INT:
    return "integer";
  case CONFIG_T_FLOAT:
    return "number";
  case CONFIG_T_BOOL:
    return "boolean";
  case CONFIG_T_STR:
  case CONFIG_T_ENUM:
    return "string";
  case CONFIG_T_PINNED:
    return "boolean or \"auto\"";
  case CONFIG_T_DEVICES:
    return "\"all\" or array of integers";
  case CONFIG_T_INTS:
    return "array of integers";
  case CONFIG_T_STRS:
    return "array of strings";
  case CONFIG_T_ADDRS:
    return "array of \"host:port\"";
  case CONFIG_T_TIERS:
    return "array of maps";
  }
  return "";
}

static void bound(uint64_t v, int neg, char *buf, size_t cap) {
  if (v == UINT64_MAX && !neg)
    snprintf(buf, cap, "2^64-1");
  else if (v == (uint64_t)INT64_MAX && !neg)
    snprintf(buf, cap, "2^63-1");
  else
    snprintf(buf, cap, "%s%llu", neg ? "-" : "", (unsigned long long)v);
}

static void int_range(const config_key *k, char *buf, size_t cap) {
  char lo[32], hi[32];
  bound(k->min < 0 ? (uint64_t) - (k->min + 1) + 1 : (uint64_t)k->min, k->min < 0, lo, sizeof lo);
  bound(k->max, 0, hi, sizeof hi);
  snprintf(buf, cap, "%s%s..%s", k->flags & CONFIG_F_POW2 ? "power of two, " : "", lo, hi);
}

static void allowed(const config_key *k, const config_doc_lists *lists, char *buf, size_t cap) {
  switch (k->type) {
  case CONFIG_T_INT:
    int_range(k, buf, cap);
    return;
  case CONFIG_T_FLOAT:
    snprintf(buf, cap, "%g..%g", k->fmin, k->fmax);
    return;
  case CONFIG_T_BOOL:
    snprintf(buf, cap, "true, false");
    return;
  case CONFIG_T_ENUM:
    config_schema_choices(k, buf, cap);
    return;
  case CONFIG_T_PINNED:
    snprintf(buf, cap, "true, false, \"auto\"");
    return;
  case CONFIG_T_DEVICES:
    snprintf(buf, cap, "\"all\", or ordinals %lld..%llu", (long long)k->min,
             (unsigned long long)k->max);
    return;
  case CONFIG_T_INTS:
    snprintf(buf, cap, "integers %lld..%llu", (long long)k->min, (unsigned long long)k->max);
    return;
  case CONFIG_T_STRS:
    snprintf(buf, cap, "strings of %lld..%llu bytes", (long long)k->min,
             (unsigned long long)k->max);
    return;
  case CONFIG_T_ADDRS:
    snprintf(buf, cap, "at least one; port 1..65535");
    return;
  case CONFIG_T_TIERS:
    snprintf(buf, cap, "at most %d entries", CONFIG_MAX_TIERS);
    return;
  case CONFIG_T_STR:
    break;
  }
  if (k->flags & CONFIG_F_TIER_NAME)
    snprintf(buf, cap, "1..%d bytes, unique", CONFIG_NAME_MAX);
  else if (k->flags & CONFIG_F_REQUIRED) { /* type: the one required key */
    const char *types = lists ? lists->names[CONFIG_LIST_TIER_TYPES] : NULL;
    snprintf(buf, cap, "%s, or a plug-in type", types ? types : list_marker[0]);
  } else
    snprintf(buf, cap, "any");
}

/* Strings quoted like JSON; numbers, booleans and JSON as written. */
static void default_text(const config_key *k, int md, char *buf, size_t cap) {
  const char *q = md ? "`" : "";
  int quoted = k->type == CONFIG_T_STR || k->type == CONFIG_T_ENUM ||
               (k->def && (!strcmp(k->def, "auto") || !strcmp(k->def, "all")));
  if (k->flags & CONFIG_F_REQUIRED)
    snprintf(buf, cap, "required");
  else if (k->def_doc)
    snprintf(buf, cap, "%s", k->def_doc);
  else if (quoted)
    snprintf(buf, cap, "%s\"%s\"%s", q, k->def, q);
  else
    snprintf(buf, cap, "%s%s%s", q, k->def, q);
}

char *config_schema_markdown(const config_doc_lists *lists) {
  out o = {0};
  char key[96], range[256], def[96];
  put(&o, "| Key | Type | Allowed | Default | Description |\n");
  put(&o, "|-----|------|---------|---------|-------------|\n");
  for (size_t i = 0; i < config_schema_count(); i++) {
    const config_key *k = config_schema_at(i);
    key_name(k, 1, key, sizeof key);
    allowed(k, lists, range, sizeof range);
    default_text(k, 1, def, sizeof def);
    put(&o, "| %s | %s | %s | %s | ", key, type_name(k), range, def);
    put_doc(&o, k->doc, lists);
    put(&o, " |\n");
  }
  return finish(&o);
}

char *config_schema_text(const config_doc_lists *lists) {
  out o = {0};
  char key[96], range[256], def[96];
  for (size_t i = 0; i < config_schema_count(); i++) {
    const config_key *k = config_schema_at(i);
    key_name(k, 0, key, sizeof key);
    allowed(k, lists, range, sizeof range);
    default_text(k, 0, def, sizeof def);
    put(&o, "%-30s %s; %s; default %s\n    ", key, type_name(k), range, def);
    put_doc(&o, k->doc, lists);
    put(&o, "\n");
  }
  return finish(&o);
}
