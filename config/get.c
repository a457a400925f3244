/*
 * config/get.c — typed reads of the effective tree, and plug-in node views.
 *
 * All reads are of the effective tree, so defaults (including l2 per-type
 * defaults and the resolved CPU count) are always there, and the runtime's
 * own getters (config_i64 and the rest) take none: a default is written
 * once, in schema.c. The public gets
 * read under the config's lock; a returned string lives until
 * kva_config_free, whatever other threads set meanwhile (config.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

const config_value *config_get(const kva_config *c, const char *path) {
  config_path p;
  if (!c || !path || config_path_parse(path, &p)) return NULL;
  return config_value_at(config_effective_root(c), &p);
}

/* Integers above INT64_MAX (only seeds can hold them) come back as their
 * two's-complement bit pattern, so (uint64_t) of the result is exact. */
static int as_i64(const config_value *v, int64_t *out) {
  if (!v || !out) return KVA_EINVAL;
  if (v->kind == CONFIG_UINT)
    *out = (int64_t)v->as.u;
  else if (v->kind == CONFIG_INT)
    *out = v->as.i;
  else
    return KVA_EINVAL;
  return KVA_OK;
}

/* Integers read as numbers too, as float keys accept them. */
static int as_f64(const config_value *v, double *out) {
  if (!v || !out) return KVA_EINVAL;
  if (v->kind == CONFIG_FLOAT)
    *out = v->as.f;
  else if (v->kind == CONFIG_UINT)
    *out = (double)v->as.u;
  else if (v->kind == CONFIG_INT)
    *out = (double)v->as.i;
  else
    return KVA_EINVAL;
  return KVA_OK;
}

static int as_bool(const config_value *v, int *out) {
  if (!v || !out || v->kind != CONFIG_BOOL) return KVA_EINVAL;
  *out = v->as.b;
  return KVA_OK;
}

static int as_str(const config_value *v, const char **out) {
  if (!v || !out || v->kind != CONFIG_STR) return KVA_EINVAL;
  *out = v->as.str.ptr;
  return KVA_OK;
}

static int as_u64(const config_value *v, uint64_t *out) {
  if (!v || !out || v->kind != CONFIG_UINT) return KVA_EINVAL;
  *out = v->as.u;
  return KVA_OK;
}

/* Each public get reads under the config's lock (a NULL config has none). */
int kva_config_get_i64(const kva_config *c, const char *path, int64_t *out) {
  if (!c) return KVA_EINVAL;
  config_lock(c);
  int rc = as_i64(config_get(c, path), out);
  config_unlock(c);
  return rc;
}

int kva_config_get_f64(const kva_config *c, const char *path, double *out) {
  if (!c) return KVA_EINVAL;
  config_lock(c);
  int rc = as_f64(config_get(c, path), out);
  config_unlock(c);
  return rc;
}

int kva_config_get_bool(const kva_config *c, const char *path, int *out) {
  if (!c) return KVA_EINVAL;
  config_lock(c);
  int rc = as_bool(config_get(c, path), out);
  config_unlock(c);
  return rc;
}

/* The string points into the effective tree, which is kept for it. */
int kva_config_get_str(const kva_config *c, const char *path, const char **out) {
  if (!c) return KVA_EINVAL;
  config_lock(c);
  int rc = as_str(config_get(c, path), out);
  if (rc == KVA_OK) config_lend(c);
  config_unlock(c);
  return rc;
}

int config_get_u64(const kva_config *c, const char *path, uint64_t *out) {
  if (!c) return KVA_EINVAL;
  config_lock(c);
  int rc = as_u64(config_get(c, path), out);
  config_unlock(c);
  return rc;
}

/* A getter's path is not in the effective tree, or holds another type:
 * the caller's bug (its path is a literal, and the effective tree has a
 * value for every schema key), never the user's. Debug builds stop here
 * and name it; release builds (NDEBUG) go on with the type's zero value,
 * rather than take the host process down for a key that every debug test
 * run starting a runtime would have caught. */
static void missing(const char *path, const char *type) {
#ifndef NDEBUG
  fprintf(stderr,
          "kvact: bug: config key \"%s\" is not %s in the effective tree: add it to "
          "config/schema.c or fix the path\n",
          path ? path : "(null)", type);
  abort();
#else
  (void)path, (void)type;
#endif
}

/* The runtime's own reads: the effective value, whose default lives in the
 * schema alone. */
int64_t config_i64(const kva_config *c, const char *path) {
  int64_t v = 0;
  if (kva_config_get_i64(c, path, &v) != KVA_OK) missing(path, "an integer");
  return v;
}

double config_f64(const kva_config *c, const char *path) {
  double v = 0;
  if (kva_config_get_f64(c, path, &v) != KVA_OK) missing(path, "a number");
  return v;
}

bool config_bool(const kva_config *c, const char *path) {
  int v = 0;
  if (kva_config_get_bool(c, path, &v) != KVA_OK) missing(path, "a boolean");
  return v != 0;
}

const char *config_str(const kva_config *c, const char *path) {
  const char *v = "";
  if (kva_config_get_str(c, path, &v) != KVA_OK) missing(path, "a string");
  return v;
}

/* "auto" is the string the schema's CONFIG_T_PINNED type allows. */
config_tristate config_bool_auto(const kva_config *c, const char *path) {
  int b;
  const char *s;
  if (kva_config_get_bool(c, path, &b) == KVA_OK) return b ? CONFIG_TRUE : CONFIG_FALSE;
  if (kva_config_get_str(c, path, &s) == KVA_OK && strcmp(s, "auto") == 0) return CONFIG_AUTO;
  missing(path, "true, false or \"auto\"");
  return CONFIG_AUTO;
}

int kva_config_node_str(const kva_config_node *n, const char *key, const char **out) {
  return as_str(config_node_get(n, key), out);
}

int kva_config_node_u64(const kva_config_node *n, const char *key, uint64_t *out) {
  return as_u64(config_node_get(n, key), out);
}

int kva_config_node_bool(const kva_config_node *n, const char *key, int *out) {
  return as_bool(config_node_get(n, key), out);
}

int kva_config_node_f64(const kva_config_node *n, const char *key, double *out) {
  return as_f64(config_node_get(n, key), out);
}

int kva_config_node_str_at(const kva_config_node *n, const char *key, size_t i, const char **out) {
  const config_value *v = config_node_get(n, key);
  if (!v || v->kind != CONFIG_ARRAY || i >= v->as.array.len) return KVA_EINVAL;
  return as_str(&v->as.array.items[i], out);
}
