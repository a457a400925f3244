/*
 * config/validate.c — checks an explicit tree against the schema.
 *
 * Errors stop at the first problem and name its path. The messages are part
 * of the interface (tests and users match on them):
 *   <path>: unknown key (did you mean "<path>"?)
 *   <path>: expected integer, got string
 *   <path>: 1.5 is out of range [0, 1]
 *   <path>: "<text>" is not one of <choices>
 * The l2 array has its own rules in tiers.c.
 */
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

#define MAX_NAMES 64 /* siblings considered for a suggestion */

static int wrong_type(const config_path *p, const char *want, const config_value *v, char *err,
                      size_t errlen) {
  return config_fail(err, errlen, p, "expected %s, got %s", want, config_kind_name(v->kind));
}

static int out_of_range_int(const config_key *k, const config_value *v, const config_path *p,
                            char *err, size_t errlen) {
  char got[64];
  config_value_describe(v, got, sizeof got);
  return config_fail(err, errlen, p, "%s is out of range [%lld, %llu]", got, (long long)k->min,
                     (unsigned long long)k->max);
}

static int check_int(const config_key *k, const config_value *v, const config_path *p, char *err,
                     size_t errlen) {
  if (v->kind != CONFIG_UINT && v->kind != CONFIG_INT)
    return wrong_type(p, "integer", v, err, errlen);
  if (v->kind == CONFIG_INT && v->as.i < k->min) return out_of_range_int(k, v, p, err, errlen);
  if (v->kind == CONFIG_UINT && ((k->min > 0 && v->as.u < (uint64_t)k->min) || v->as.u > k->max))
    return out_of_range_int(k, v, p, err, errlen);
  if ((k->flags & CONFIG_F_POW2) && (v->as.u & (v->as.u - 1)))
    return config_fail(err, errlen, p, "%llu is not a power of two", (unsigned long long)v->as.u);
  return KVA_OK;
}

/* Written so that NaN is out of every range. */
static int check_float(const config_key *k, const config_value *v, const config_path *p, char *err,
                       size_t errlen) {
  double x;
  char got[64];
  if (v->kind == CONFIG_FLOAT)
    x = v->as.f;
  else if (v->kind == CONFIG_UINT)
    x = (double)v->as.u;
  else if (v->kind == CONFIG_INT)
    x = (double)v->as.i;
  else
    return wrong_type(p, "number", v, err, errlen);
  if (x >= k->fmin && x <= k->fmax) return KVA_OK;
  config_value_describe(v, got, sizeof got);
  return config_fail(err, errlen, p, "%s is out of range [%g, %g]", got, k->fmin, k->fmax);
}

static int check_name(const config_value *v, const config_path *p, char *err, size_t errlen) {
  char got[160];
  config_value_describe(v, got, sizeof got);
  if (v->as.str.len == 0) return config_fail(err, errlen, p, "must not be empty");
  if (v->as.str.len > CONFIG_NAME_MAX)
    return config_fail(err, errlen, p, "%s is longer than %d bytes", got, CONFIG_NAME_MAX);
  if (strcmp(v->as.str.ptr, "L1") == 0)
    return config_fail(err, errlen, p, "\"L1\" is reserved for the L1 tier");
  return KVA_OK;
}

static int check_str(const config_key *k, const config_value *v, const config_path *p, char *err,
                     size_t errlen) {
  char got[160], choices[128];
  if (v->kind != CONFIG_STR) return wrong_type(p, "string", v, err, errlen);
  if (memchr(v->as.str.ptr, 0, v->as.str.len))
    return config_fail(err, errlen, p, "string contains a NUL byte");
  if (k->flags & CONFIG_F_TIER_NAME) return check_name(v, p, err, errlen);
  if (k->type != CONFIG_T_ENUM || config_schema_choice(k, v->as.str.ptr, v->as.str.len))
    return KVA_OK;
  config_value_describe(v, got, sizeof got);
  config_schema_choices(k, choices, sizeof choices);
  return config_fail(err, errlen, p, "%s is not one of %s", got, choices);
}

static int check_pinned(const config_value *v, const config_path *p, char *err, size_t errlen) {
  char got[160];
  if (v->kind == CONFIG_BOOL) return KVA_OK;
  if (v->kind != CONFIG_STR) return wrong_type(p, "boolean or \"auto\"", v, err, errlen);
  if (v->as.str.len == 4 && memcmp(v->as.str.ptr, "auto", 4) == 0) return KVA_OK;
  config_value_describe(v, got, sizeof got);
  return config_fail(err, errlen, p, "%s is not one of auto, true, false", got);
}

static int check_devices(const config_key *k, const config_value *v, config_path *p, char *err,
                         size_t errlen) {
  char got[160];
  if (v->kind == CONFIG_STR && v->as.str.len == 3 && memcmp(v->as.str.ptr, "all", 3) == 0)
    return KVA_OK;
  if (v->kind != CONFIG_ARRAY) {
    if (v->kind == CONFIG_STR)
      config_value_describe(v, got, sizeof got);
    else
      snprintf(got, sizeof got, "%s", config_kind_name(v->kind));
    return config_fail(err, errlen, p, "expected \"all\" or an array of integers, got %s", got);
  }
  for (size_t i = 0; i < v->as.array.len; i++) {
    config_path_index(p, i);
    int rc = check_int(k, &v->as.array.items[i], p, err, errlen);
    if (rc) return rc;
    config_path_pop(p);
  }
  return KVA_OK;
}

static int check_ints(const config_key *k, const config_value *v, config_path *p, char *err,
                      size_t errlen) {
  if (v->kind != CONFIG_ARRAY) return wrong_type(p, "array of integers", v, err, errlen);
  for (size_t i = 0; i < v->as.array.len; i++) {
    config_path_index(p, i);
    int rc = check_int(k, &v->as.array.items[i], p, err, errlen);
    if (rc) return rc;
    config_path_pop(p);
  }
  return KVA_OK;
}

/* Each string min..max bytes: names (group names), never empty, never
 * cut short by a NUL when handed to the C functions that look them up. */
static int check_strs(const config_key *k, const config_value *v, config_path *p, char *err,
                      size_t errlen) {
  char got[160];
  if (v->kind != CONFIG_ARRAY) return wrong_type(p, "array of strings", v, err, errlen);
  for (size_t i = 0; i < v->as.array.len; i++) {
    const config_value *s = &v->as.array.items[i];
    config_path_index(p, i);
    if (s->kind != CONFIG_STR) return wrong_type(p, "string", s, err, errlen);
    if (memchr(s->as.str.ptr, 0, s->as.str.len))
      return config_fail(err, errlen, p, "string contains a NUL byte");
    if (s->as.str.len < (uint64_t)k->min || s->as.str.len > k->max) {
      config_value_describe(s, got, sizeof got);
      return config_fail(err, errlen, p, "%s is not %lld..%llu bytes long", got, (long long)k->min,
                         (unsigned long long)k->max);
    }
    config_path_pop(p);
  }
  return KVA_OK;
}

/* "host:port": the port after the last ':' (so "[::1]:6379" works). */
static int is_host_port(const config_value *v) {
  if (v->kind != CONFIG_STR || memchr(v->as.str.ptr, 0, v->as.str.len)) return 0;
  const char *s = v->as.str.ptr, *colon = strrchr(s, ':');
  if (!colon || colon == s || !colon[1] || strlen(colon + 1) > 5) return 0;
  unsigned port = 0;
  for (const char *c = colon + 1; *c; c++) {
    if (*c < '0' || *c > '9') return 0;
    port = port * 10 + (unsigned)(*c - '0');
  }
  return port >= 1 && port <= 65535;
}

static int check_addrs(const config_value *v, config_path *p, char *err, size_t errlen) {
  char got[160];
  if (v->kind != CONFIG_ARRAY)
    return wrong_type(p, "an array of \"host:port\" strings", v, err, errlen);
  if (v->as.array.len == 0)
    return config_fail(err, errlen, p, "expected at least one \"host:port\" address");
  for (size_t i = 0; i < v->as.array.len; i++) {
    const config_value *a = &v->as.array.items[i];
    if (is_host_port(a)) continue;
    config_path_index(p, i);
    config_value_describe(a, got, sizeof got);
    return config_fail(err, errlen, p, "expected \"host:port\", got %s", got);
  }
  return KVA_OK;
}

int config_validate_leaf(const config_key *k, const config_value *v, config_path *p, char *err,
                         size_t errlen) {
  switch (k->type) {
  case CONFIG_T_INT:
    return check_int(k, v, p, err, errlen);
  case CONFIG_T_FLOAT:
    return check_float(k, v, p, err, errlen);
  case CONFIG_T_BOOL:
    return v->kind == CONFIG_BOOL ? KVA_OK : wrong_type(p, "boolean", v, err, errlen);
  case CONFIG_T_STR:
  case CONFIG_T_ENUM:
    return check_str(k, v, p, err, errlen);
  case CONFIG_T_PINNED:
    return check_pinned(v, p, err, errlen);
  case CONFIG_T_DEVICES:
    return check_devices(k, v, p, err, errlen);
  case CONFIG_T_INTS:
    return check_ints(k, v, p, err, errlen);
  case CONFIG_T_STRS:
    return check_strs(k, v, p, err, errlen);
  case CONFIG_T_ADDRS:
    return check_addrs(v, p, err, errlen);
  case CONFIG_T_TIERS:
    return config_validate_tiers(v, p, err, errlen);
  }
  return KVA_OK;
}

/* Distance capped at 4: only "<= 3" matters, and a key may be 1 MiB long. */
static size_t distance(const char *a, size_t n, const char *b, size_t m) {
  size_t row[MAX_NAMES + 1], i, j;
  if (m > MAX_NAMES || n > m + 3 || m > n + 3) return 4;
  for (j = 0; j <= m; j++) row[j] = j;
  for (i = 1; i <= n; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (j = 1; j <= m; j++) {
      size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[m];
}

int config_unknown_key(const config_name *names, size_t n, const config_path *p, char *err,
                       size_t errlen) {
  const config_seg *last = &p->seg[p->depth - 1];
  size_t best = 4, at = 0;
  for (size_t i = 0; i < n; i++) {
    size_t d = distance(last->key, last->klen, names[i].s, names[i].len);
    if (d < best) best = d, at = i;
  }
  if (best > 3) return config_fail(err, errlen, p, "unknown key");
  config_path near = *p;
  char where[512];
  near.seg[near.depth - 1].key = names[at].s;
  near.seg[near.depth - 1].klen = names[at].len;
  config_path_format(&near, where, sizeof where);
  return config_fail(err, errlen, p, "unknown key (did you mean \"%s\"?)", where);
}

/* Names directly under a section ("" = the root) of the top-level rows. */
static size_t section_names(const char *sec, size_t slen, config_name *out) {
  size_t n = 0;
  for (size_t i = 0; i < config_schema_count() && n < MAX_NAMES; i++) {
    const config_key *k = config_schema_at(i);
    const char *rest = k->path + (slen ? slen + 1 : 0);
    if (k->scope) continue;
    if (slen && (strncmp(k->path, sec, slen) != 0 || k->path[slen] != '.')) continue;
    size_t len = strcspn(rest, ".");
    size_t j = 0;
    while (j < n && !(out[j].len == len && memcmp(out[j].s, rest, len) == 0)) j++;
    if (j == n) out[n++] = (config_name){rest, len};
  }
  return n;
}

static int unknown(const char *sec, size_t slen, const config_path *p, char *err, size_t errlen) {
  config_name names[MAX_NAMES];
  size_t n = section_names(sec, slen, names);
  return config_unknown_key(names, n, p, err, errlen);
}

static int validate_section(const config_entry *sec, config_path *p, char *err, size_t errlen) {
  char path[160];
  const config_value *m = &sec->value;
  if (m->kind != CONFIG_MAP) return wrong_type(p, "a map", m, err, errlen);
  for (size_t i = 0; i < m->as.map.len; i++) {
    const config_entry *e = &m->as.map.items[i];
    int n = snprintf(path, sizeof path, "%s.%s", sec->key, e->key);
    const config_key *k = n > 0 && (size_t)n < sizeof path && !memchr(e->key, 0, e->klen)
                              ? config_schema_find(NULL, path, (size_t)n)
                              : NULL;
    config_path_key(p, e->key, e->klen);
    int rc = k ? config_validate_leaf(k, &e->value, p, err, errlen)
               : unknown(sec->key, sec->klen, p, err, errlen);
    if (rc) return rc;
    config_path_pop(p);
  }
  return KVA_OK;
}

int config_validate(const config_value *root, char *err, size_t errlen) {
  config_path p;
  config_path_init(&p);
  if (root->kind != CONFIG_MAP) return wrong_type(&p, "a map", root, err, errlen);
  if (config_value_depth(root) > CONFIG_MAX_DEPTH)
    return config_fail(err, errlen, &p, "nesting deeper than %d levels", CONFIG_MAX_DEPTH);
  for (size_t i = 0; i < root->as.map.len; i++) {
    const config_entry *e = &root->as.map.items[i];
    const config_key *k = config_schema_find(NULL, e->key, e->klen);
    int rc;
    config_path_key(&p, e->key, e->klen);
    if (k)
      rc = config_validate_leaf(k, &e->value, &p, err, errlen);
    else if (config_schema_is_section(e->key, e->klen))
      rc = validate_section(e, &p, err, errlen);
    else
      rc = unknown("", 0, &p, err, errlen);
    if (rc) return rc;
    config_path_pop(&p);
  }
  return KVA_OK;
}
