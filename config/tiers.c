/*
 * config/tiers.c — validation of the l2 array.
 *
 * Each entry is a map with a required `type`. Built-in types (those with
 * rows in the schema: the built-in adapters') are checked key by key; any other
 * type is a plug-in registered at run time, whose keys besides type and
 * name are its own business and pass through untouched. Tier names
 * (explicit or the default type + index) must be unique, because
 * kva_lookup reports hits and kva_set_tier_bypass selects tiers by name.
 */
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

#define MAX_KEYS 64

static int check_type(const config_value *entry, config_path *p, char *err, size_t errlen) {
  const config_value *type = config_map_get(entry, "type");
  char got[160];
  int rc;
  config_path_key(p, "type", 4);
  if (!type) return config_fail(err, errlen, p, "missing required key");
  if ((rc = config_validate_leaf(config_schema_find("*", "type", 4), type, p, err, errlen)))
    return rc;
  if (type->as.str.len == 0 || type->as.str.len > CONFIG_NAME_MAX) {
    config_value_describe(type, got, sizeof got);
    return config_fail(err, errlen, p, "expected a tier type of 1 to %d bytes, got %s",
                       CONFIG_NAME_MAX, got);
  }
  config_path_pop(p);
  return KVA_OK;
}

/* The keys a built-in type accepts, for "did you mean". */
static size_t type_keys(const char *type, config_name *out) {
  size_t n = 0;
  for (size_t i = 0; i < config_schema_count() && n < MAX_KEYS; i++) {
    const config_key *k = config_schema_at(i);
    if (k->scope && (!strcmp(k->scope, "*") || !strcmp(k->scope, type)))
      out[n++] = (config_name){k->path, strlen(k->path)};
  }
  return n;
}

static int check_keys(const config_value *entry, const char *type, config_path *p, char *err,
                      size_t errlen) {
  int builtin = config_schema_is_tier_type(type, strlen(type));
  config_name names[MAX_KEYS];
  for (size_t i = 0; i < entry->as.map.len; i++) {
    const config_entry *e = &entry->as.map.items[i];
    const config_key *k = config_schema_tier_key(type, e->key, e->klen);
    int rc = KVA_OK;
    if (k && k->flags & CONFIG_F_REQUIRED) continue; /* type: checked first */
    config_path_key(p, e->key, e->klen);
    if (k)
      rc = config_validate_leaf(k, &e->value, p, err, errlen);
    else if (builtin)
      rc = config_unknown_key(names, type_keys(type, names), p, err, errlen);
    if (rc) return rc;
    config_path_pop(p);
  }
  return KVA_OK;
}

/* The effective name: explicit, or type + index ("disk0"). */
static int tier_name(const config_value *entry, size_t i, config_path *p, char name[32], char *err,
                     size_t errlen) {
  const config_value *n = config_map_get(entry, "name");
  if (n) {
    snprintf(name, 32, "%s", n->as.str.ptr);
    return KVA_OK;
  }
  const char *type = config_map_get(entry, "type")->as.str.ptr;
  int len = snprintf(name, 32, "%s%zu", type, i);
  if (len >= 0 && len <= CONFIG_NAME_MAX) return KVA_OK;
  config_path_key(p, "name", 4);
  return config_fail(err, errlen, p,
                     "the default name \"%s%zu\" is longer than %d bytes; set a name", type, i,
                     CONFIG_NAME_MAX);
}

static int check_tier(const config_value *entry, size_t i, config_path *p, char name[32], char *err,
                      size_t errlen) {
  int rc;
  if (entry->kind != CONFIG_MAP)
    return config_fail(err, errlen, p, "expected a map, got %s", config_kind_name(entry->kind));
  if ((rc = check_type(entry, p, err, errlen))) return rc;
  if ((rc = check_keys(entry, config_map_get(entry, "type")->as.str.ptr, p, err, errlen)))
    return rc;
  return tier_name(entry, i, p, name, err, errlen);
}

int config_validate_tiers(const config_value *l2, config_path *p, char *err, size_t errlen) {
  char names[CONFIG_MAX_TIERS][32];
  if (l2->kind != CONFIG_ARRAY)
    return config_fail(err, errlen, p, "expected an array of tier maps, got %s",
                       config_kind_name(l2->kind));
  if (l2->as.array.len > CONFIG_MAX_TIERS)
    return config_fail(err, errlen, p, "at most %d tiers, got %zu", CONFIG_MAX_TIERS,
                       l2->as.array.len);
  for (size_t i = 0; i < l2->as.array.len; i++) {
    int rc;
    config_path_index(p, i);
    if ((rc = check_tier(&l2->as.array.items[i], i, p, names[i], err, errlen))) return rc;
    for (size_t j = 0; j < i; j++) {
      if (strcmp(names[i], names[j]) != 0) continue;
      char shown[160];
      config_escape(names[i], strlen(names[i]), 64, shown, sizeof shown);
      config_path_key(p, "name", 4);
      return config_fail(err, errlen, p, "duplicate tier name \"%s\"", shown);
    }
    config_path_pop(p);
  }
  return KVA_OK;
}
