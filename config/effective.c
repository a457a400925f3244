/*
 * config/effective.c — the effective tree: explicit values plus defaults.
 *
 * Built once per load or successful set, so that getters return stable
 * pointers and never compute anything. Keys come out in schema order
 * whatever order the file used, l2 entries get their per-type defaults and
 * their name, and numbers of float keys become floats, so that two configs
 * meaning the same thing have the same effective tree (and the same
 * kva_config_to_msgpack bytes). Plug-in keys keep their original order.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config/config_internal.h"

/* Clamped to runtime.workers' range so that the effective tree validates. */
unsigned config_online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) return 1;
  return n > 1024 ? 1024 : (unsigned)n;
}

static int put_value(config_value *map, const char *key, const config_key *k,
                     const config_value *given, unsigned ncpu) {
  config_value v;
  int rc = given ? config_value_copy(&v, given) : config_default_value(k, ncpu, &v);
  if (rc) return rc;
  if (k->type == CONFIG_T_FLOAT && v.kind == CONFIG_UINT) v = config_value_float((double)v.as.u);
  if (k->type == CONFIG_T_FLOAT && v.kind == CONFIG_INT) v = config_value_float((double)v.as.i);
  return config_map_put(map, key, strlen(key), &v);
}

static int tier_name(const config_value *entry, size_t i, config_value *out) {
  const config_value *name = config_map_get(entry, "name");
  char buf[64];
  if (name) return config_value_copy(out, name);
  int n = snprintf(buf, sizeof buf, "%s%zu", config_map_get(entry, "type")->as.str.ptr, i);
  return config_value_str(out, buf, n > 0 ? (size_t)n : 0);
}

/* Everything but type and name, as given: a plug-in's keys. */
static int copy_plugin_keys(const config_value *entry, config_value *m) {
  for (size_t i = 0; i < entry->as.map.len; i++) {
    const config_entry *e = &entry->as.map.items[i];
    config_value v;
    if (config_schema_find("*", e->key, e->klen)) continue;
    if (config_value_copy(&v, &e->value) || config_map_put(m, e->key, e->klen, &v))
      return KVA_ENOMEM;
  }
  return KVA_OK;
}

static int builtin_keys(const config_value *entry, const char *type, config_value *m) {
  for (size_t i = 0; i < config_schema_count(); i++) {
    const config_key *k = config_schema_at(i);
    if (!k->scope || strcmp(k->scope, type) != 0) continue;
    int rc = put_value(m, k->path, k, config_map_get(entry, k->path), 0);
    if (rc) return rc;
  }
  return KVA_OK;
}

int config_effective_tier(const config_value *entry, size_t i, config_value *m) {
  const config_value *type = config_map_get(entry, "type");
  config_value t, name;
  int rc = config_value_map(m, entry->as.map.len + 8);
  if (rc || (rc = config_value_copy(&t, type)) || (rc = config_map_put(m, "type", 4, &t)))
    return rc;
  if ((rc = tier_name(entry, i, &name)) || (rc = config_map_put(m, "name", 4, &name))) return rc;
  if (config_schema_is_tier_type(type->as.str.ptr, type->as.str.len))
    return builtin_keys(entry, type->as.str.ptr, m);
  return copy_plugin_keys(entry, m);
}

static int tiers(const config_value *l2, config_value *out) {
  size_t n = l2 ? l2->as.array.len : 0;
  int rc = config_value_array(out, n);
  for (size_t i = 0; rc == KVA_OK && i < n; i++) {
    config_value m;
    rc = config_effective_tier(&l2->as.array.items[i], i, &m);
    if (rc == KVA_OK)
      rc = config_array_push(out, &m);
    else
      config_value_free(&m);
  }
  return rc;
}

/* "section.key" rows go into the section's map, made on first use. */
static int section_value(const config_value *root, const config_key *k, unsigned ncpu,
                         config_value *out) {
  const char *dot = strchr(k->path, '.');
  size_t slen = (size_t)(dot - k->path);
  config_value *sec = config_map_find(out, k->path, slen);
  if (!sec) {
    config_value m;
    int rc = config_value_map(&m, 8);
    if (rc || (rc = config_map_put(out, k->path, slen, &m))) return rc;
    sec = &out->as.map.items[out->as.map.len - 1].value;
  }
  const config_value *given = config_map_get(config_map_find(root, k->path, slen), dot + 1);
  return put_value(sec, dot + 1, k, given, ncpu);
}

static int top_value(const config_value *root, const config_key *k, unsigned ncpu,
                     config_value *out) {
  if (strchr(k->path, '.')) return section_value(root, k, ncpu, out);
  if (k->type != CONFIG_T_TIERS)
    return put_value(out, k->path, k, config_map_get(root, k->path), ncpu);
  config_value l2;
  int rc = tiers(config_map_get(root, k->path), &l2);
  if (rc) return config_value_free(&l2), rc;
  return config_map_put(out, k->path, strlen(k->path), &l2);
}

int config_effective(const config_value *root, unsigned ncpu, config_value *out) {
  int rc = config_value_map(out, 16);
  for (size_t i = 0; rc == KVA_OK && i < config_schema_count(); i++) {
    const config_key *k = config_schema_at(i);
    if (!k->scope) rc = top_value(root, k, ncpu, out);
  }
  if (rc) config_value_free(out);
  return rc;
}
