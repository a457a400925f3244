/*
 * config/get.c — typed reads of the effective tree, and plug-in node views.
 *
 * All reads are of the effective tree, so defaults (including l2 per-type
 * defaults and the resolved CPU count) are always there. The public gets
 * read under the config's lock; a returned string lives until
 * kva_config_free, whatever other threads set meanwhile (config.c).
 */
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

/* Effective values with a fallback, for the runtime's own reads (the
 * effective tree has every default, so the fallback is only a safety net). */
int64_t config_i64_or(const kva_config *c, const char *path, int64_t dflt) {
  int64_t v;
  return kva_config_get_i64(c, path, &v) == KVA_OK ? v : dflt;
}
double config_f64_or(const kva_config *c, const char *path, double dflt) {
  double v;
  return kva_config_get_f64(c, path, &v) == KVA_OK ? v : dflt;
}
int config_bool_or(const kva_config *c, const char *path, int dflt) {
  int v;
  return kva_config_get_bool(c, path, &v) == KVA_OK ? v : dflt;
}
const char *config_str_or(const kva_config *c, const char *path, const char *dflt) {
  const char *v;
  return kva_config_get_str(c, path, &v) == KVA_OK ? v : dflt;
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
