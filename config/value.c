/*
 * config/value.c — owned trees of config values.
 *
 * Every tree comes from a bounded source (a msgpack buffer of at most
 * CONFIG_MAX_BYTES nested at most CONFIG_MAX_DEPTH deep, a JSON text of the
 * same bounds, or the schema's defaults), so the recursive walks below have
 * bounded depth.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "config/config_internal.h"

config_value config_value_nil(void) {
  config_value v;
  memset(&v, 0, sizeof v);
  v.kind = CONFIG_NIL;
  return v;
}

config_value config_value_bool(int b) {
  config_value v = config_value_nil();
  v.kind = CONFIG_BOOL;
  v.as.b = b ? 1 : 0;
  return v;
}

/* Non-negative integers are always CONFIG_UINT, so that equal numbers have
 * one representation whichever way they were written. */
config_value config_value_int(int64_t i) {
  if (i >= 0) return config_value_uint((uint64_t)i);
  config_value v = config_value_nil();
  v.kind = CONFIG_INT;
  v.as.i = i;
  return v;
}

config_value config_value_uint(uint64_t u) {
  config_value v = config_value_nil();
  v.kind = CONFIG_UINT;
  v.as.u = u;
  return v;
}

config_value config_value_float(double f) {
  config_value v = config_value_nil();
  v.kind = CONFIG_FLOAT;
  v.as.f = f;
  return v;
}

int config_value_str(config_value *out, const char *s, size_t len) {
  char *p = malloc(len + 1);
  if (!p) return KVA_ENOMEM;
  if (len) memcpy(p, s, len);
  p[len] = '\0';
  *out = config_value_nil();
  out->kind = CONFIG_STR;
  out->as.str.ptr = p;
  out->as.str.len = len;
  return KVA_OK;
}

int config_value_array(config_value *out, size_t cap) {
  *out = config_value_nil();
  out->kind = CONFIG_ARRAY;
  if (cap == 0) return KVA_OK;
  out->as.array.items = calloc(cap, sizeof(config_value));
  if (!out->as.array.items) return KVA_ENOMEM;
  out->as.array.cap = cap;
  return KVA_OK;
}

int config_value_map(config_value *out, size_t cap) {
  *out = config_value_nil();
  out->kind = CONFIG_MAP;
  if (cap == 0) return KVA_OK;
  out->as.map.items = calloc(cap, sizeof(config_entry));
  if (!out->as.map.items) return KVA_ENOMEM;
  out->as.map.cap = cap;
  return KVA_OK;
}

void config_value_free(config_value *v) {
  size_t i;
  switch (v->kind) {
  case CONFIG_STR:
    free(v->as.str.ptr);
    break;
  case CONFIG_ARRAY:
    for (i = 0; i < v->as.array.len; i++) config_value_free(&v->as.array.items[i]);
    free(v->as.array.items);
    break;
  case CONFIG_MAP:
    for (i = 0; i < v->as.map.len; i++) {
      free(v->as.map.items[i].key);
      config_value_free(&v->as.map.items[i].value);
    }
    free(v->as.map.items);
    break;
  default:
    break;
  }
  *v = config_value_nil();
}

int config_array_push(config_value *arr, config_value *item) {
  if (!ARRAY_GROW(arr->as.array.items, &arr->as.array.cap, arr->as.array.len + 1)) {
    config_value_free(item);
    return KVA_ENOMEM;
  }
  arr->as.array.items[arr->as.array.len++] = *item;
  *item = config_value_nil();
  return KVA_OK;
}

int config_map_put(config_value *map, const char *key, size_t klen, config_value *val) {
  char *k = malloc(klen + 1);
  if (!k || !ARRAY_GROW(map->as.map.items, &map->as.map.cap, map->as.map.len + 1)) {
    free(k);
    config_value_free(val);
    return KVA_ENOMEM;
  }
  if (klen) memcpy(k, key, klen); /* msgpack-c gives NULL for empty strings */
  k[klen] = '\0';
  config_entry *e = &map->as.map.items[map->as.map.len++];
  e->key = k;
  e->klen = klen;
  e->value = *val;
  *val = config_value_nil();
  return KVA_OK;
}

config_value *config_map_find(const config_value *map, const char *key, size_t klen) {
  if (!map || map->kind != CONFIG_MAP) return NULL;
  for (size_t i = 0; i < map->as.map.len; i++) {
    config_entry *e = &map->as.map.items[i];
    if (e->klen == klen && (klen == 0 || memcmp(e->key, key, klen) == 0)) return &e->value;
  }
  return NULL;
}

config_value *config_map_get(const config_value *map, const char *key) {
  return config_map_find(map, key, strlen(key));
}

static int copy_children(config_value *dst, const config_value *src) {
  size_t i;
  if (src->kind == CONFIG_ARRAY) {
    if (config_value_array(dst, src->as.array.len)) return KVA_ENOMEM;
    for (i = 0; i < src->as.array.len; i++) {
      config_value c;
      if (config_value_copy(&c, &src->as.array.items[i]) || config_array_push(dst, &c))
        return KVA_ENOMEM;
    }
    return KVA_OK;
  }
  if (config_value_map(dst, src->as.map.len)) return KVA_ENOMEM;
  for (i = 0; i < src->as.map.len; i++) {
    const config_entry *e = &src->as.map.items[i];
    config_value c;
    if (config_value_copy(&c, &e->value) || config_map_put(dst, e->key, e->klen, &c))
      return KVA_ENOMEM;
  }
  return KVA_OK;
}

int config_value_copy(config_value *dst, const config_value *src) {
  int rc;
  switch (src->kind) {
  case CONFIG_STR:
    return config_value_str(dst, src->as.str.ptr, src->as.str.len);
  case CONFIG_ARRAY:
  case CONFIG_MAP:
    rc = copy_children(dst, src);
    if (rc) config_value_free(dst); /* a partial copy is freed, not leaked */
    return rc;
  default:
    *dst = *src;
    return KVA_OK;
  }
}

/* Sorts pointers to entries: they live in one array, so comparing the
 * pointers orders equal keys by position and needs no global context. */
static int cmp_entry(const void *x, const void *y) {
  const config_entry *a = *(const config_entry *const *)x, *b = *(const config_entry *const *)y;
  size_t n = a->klen < b->klen ? a->klen : b->klen;
  int c = n ? memcmp(a->key, b->key, n) : 0;
  if (c) return c;
  if (a->klen != b->klen) return a->klen < b->klen ? -1 : 1;
  return a < b ? -1 : a > b;
}

static int same_key(const config_entry *a, const config_entry *b) {
  return a->klen == b->klen && memcmp(a->key, b->key, a->klen) == 0;
}

/* Small maps (every schema map) are checked pairwise without allocating;
 * large ones (plug-in data) are sorted. */
long config_map_duplicate(const config_value *map) {
  size_t n = map->as.map.len, i, j;
  const config_entry *e = map->as.map.items;
  long found = -1;
  if (n <= 32) {
    for (j = 1; j < n; j++)
      for (i = 0; i < j; i++)
        if (same_key(&e[i], &e[j])) return (long)j;
    return -1;
  }
  const config_entry **sorted = malloc(n * sizeof *sorted);
  if (!sorted) return KVA_ENOMEM;
  for (i = 0; i < n; i++) sorted[i] = &e[i];
  qsort(sorted, n, sizeof *sorted, cmp_entry);
  for (i = 1; i < n; i++) {
    long at = (long)(sorted[i] - e);
    if (same_key(sorted[i - 1], sorted[i]) && (found < 0 || at < found)) found = at;
  }
  free(sorted);
  return found;
}

int config_value_depth(const config_value *v) {
  int d = 0, c;
  size_t i;
  if (v->kind == CONFIG_ARRAY)
    for (i = 0; i < v->as.array.len; i++)
      if ((c = config_value_depth(&v->as.array.items[i])) > d) d = c;
  if (v->kind == CONFIG_MAP)
    for (i = 0; i < v->as.map.len; i++)
      if ((c = config_value_depth(&v->as.map.items[i].value)) > d) d = c;
  return v->kind == CONFIG_ARRAY || v->kind == CONFIG_MAP ? d + 1 : 0;
}

const char *config_kind_name(config_kind k) {
  switch (k) {
  case CONFIG_NIL:
    return "nil";
  case CONFIG_BOOL:
    return "boolean";
  case CONFIG_UINT:
  case CONFIG_INT:
    return "integer";
  case CONFIG_FLOAT:
    return "float";
  case CONFIG_STR:
    return "string";
  case CONFIG_ARRAY:
    return "array";
  case CONFIG_MAP:
    return "map";
  }
  return "unknown";
}

void config_escape(const char *s, size_t len, size_t max, char *buf, size_t cap) {
  size_t o = 0, i;
  if (cap == 0) return;
  for (i = 0; i < len && o + 5 < cap; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (i == max) {
      o += (size_t)snprintf(buf + o, cap - o, "...");
      break;
    }
    if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\')
      buf[o++] = (char)ch;
    else if (ch == '"' || ch == '\\')
      o += (size_t)snprintf(buf + o, cap - o, "\\%c", ch);
    else
      o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", ch);
  }
  buf[o < cap ? o : cap - 1] = '\0';
}

void config_value_describe(const config_value *v, char *buf, size_t cap) {
  char tmp[160];
  switch (v->kind) {
  case CONFIG_NIL:
    snprintf(buf, cap, "nil");
    break;
  case CONFIG_BOOL:
    snprintf(buf, cap, "%s", v->as.b ? "true" : "false");
    break;
  case CONFIG_UINT:
    snprintf(buf, cap, "%llu", (unsigned long long)v->as.u);
    break;
  case CONFIG_INT:
    snprintf(buf, cap, "%lld", (long long)v->as.i);
    break;
  case CONFIG_FLOAT:
    snprintf(buf, cap, "%g", v->as.f);
    break;
  case CONFIG_STR:
    config_escape(v->as.str.ptr, v->as.str.len, 64, tmp, sizeof tmp);
    snprintf(buf, cap, "\"%s\"", tmp);
    break;
  case CONFIG_ARRAY:
    snprintf(buf, cap, "an array");
    break;
  case CONFIG_MAP:
    snprintf(buf, cap, "a map");
    break;
  }
}
