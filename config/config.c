/*
 * config/config.c — kva_config: loading, setting, copying, freeing.
 *
 * Every change goes through commit(): validate the new explicit tree,
 * build its effective tree and the plug-in node views, and only then
 * replace the old ones. So a failed load returns no config and a failed
 * kva_config_set leaves the config exactly as it was.
 *
 * A config may be shared by threads (kvact.h): one mutex per config
 * serialises set, the typed gets, to_msgpack and the runtime's copy.
 * Config is not a hot path, so a plain mutex is the whole design. A
 * string handed out by kva_config_get_str points into the effective tree;
 * so that another thread's set cannot free it under its reader, a tree
 * that lent strings is retired, not freed, and goes with kva_config_free.
 * Trees that lent nothing are freed at once, so a program that only sets
 * (or reads numbers) keeps one version.
 *
 * kva_config_node_default (at the end) serves a built-in type's defaults
 * to a factory spawned without a config: one node per type, made once.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

/* The embedded default: every schema default plus one disk tier in a
 * temporary file, so that every tool runs without a config file. */
static const char default_json[] = "{\"l2\": [{\"type\": \"disk\"}]}";

struct kva_config_node {
  const config_value *map; /* one entry of the effective l2 array */
};

/* An effective tree kept alive for the strings it lent. */
typedef struct retired_tree {
  struct retired_tree *next;
  config_value tree;
} retired_tree;

struct kva_config {
  pthread_mutex_t lock;   /* guards every field below */
  config_value explicit_; /* what the file or the setters gave */
  config_value effective; /* explicit + defaults: what readers see */
  kva_config_node *nodes; /* views of effective.l2[i] */
  size_t nnodes;
  unsigned ncpu;         /* online CPUs when loaded: the default of runtime.workers */
  bool lent;             /* kva_config_get_str handed out a string of `effective` */
  retired_tree *retired; /* older effective trees that lent strings */
};

void config_lock(const kva_config *c) {
  pthread_mutex_lock(&((kva_config *)c)->lock); /* the lock is never part of the value */
}

void config_unlock(const kva_config *c) {
  pthread_mutex_unlock(&((kva_config *)c)->lock);
}

void config_lend(const kva_config *c) {
  ((kva_config *)c)->lent = true; /* under the lock, like every field */
}

/* The effective tree being replaced: freed, or retired when it lent. */
static void retire_effective(kva_config *c) {
  if (c->lent) {
    retired_tree *r = malloc(sizeof(*r));
    if (r) { /* out of memory: the tree leaks rather than be freed under its reader */
      r->tree = c->effective;
      r->next = c->retired;
      c->retired = r;
    }
  } else {
    config_value_free(&c->effective);
  }
  c->effective = config_value_nil();
  c->lent = false;
}

static int make_nodes(const config_value *eff, kva_config_node **out, size_t *n) {
  const config_value *l2 = config_map_get(eff, "l2");
  *n = l2 ? l2->as.array.len : 0;
  *out = calloc(*n ? *n : 1, sizeof **out);
  if (!*out) return KVA_ENOMEM;
  for (size_t i = 0; i < *n; i++) (*out)[i].map = &l2->as.array.items[i];
  return KVA_OK;
}

/* Takes ownership of *root, whatever the outcome. */
static int commit(kva_config *c, config_value *root, char *err, size_t errlen) {
  config_value eff = config_value_nil();
  kva_config_node *nodes = NULL;
  size_t n = 0;
  int rc = config_validate(root, err, errlen);
  if (rc == KVA_OK) rc = config_effective(root, c->ncpu, &eff);
  if (rc == KVA_OK && (rc = make_nodes(&eff, &nodes, &n))) config_value_free(&eff);
  if (rc) {
    config_value_free(root);
    return rc;
  }
  config_value_free(&c->explicit_);
  retire_effective(c);
  free(c->nodes);
  c->explicit_ = *root;
  c->effective = eff;
  c->nodes = nodes;
  c->nnodes = n;
  *root = config_value_nil();
  return KVA_OK;
}

static kva_config *config_new(unsigned ncpu) {
  kva_config *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  if (pthread_mutex_init(&c->lock, NULL) != 0) {
    free(c);
    return NULL;
  }
  c->explicit_ = config_value_nil();
  c->effective = config_value_nil();
  c->ncpu = ncpu;
  return c;
}

/* Builds a config around an explicit tree (owned); *out only on success. */
static int config_build(config_value *root, unsigned ncpu, kva_config **out, char *err,
                        size_t errlen) {
  kva_config *c = config_new(ncpu);
  if (!c) {
    config_value_free(root);
    return KVA_ENOMEM;
  }
  int rc = commit(c, root, err, errlen);
  if (rc) {
    kva_config_free(c);
    return rc;
  }
  *out = c;
  return KVA_OK;
}

static void clear_err(char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
}

kva_config *kva_config_default(void) {
  config_value root;
  kva_config *c = NULL;
  if (config_json_parse(default_json, sizeof default_json - 1, &root, NULL)) return NULL;
  config_build(&root, config_online_cpus(), &c, NULL, 0);
  return c;
}

int kva_config_from_msgpack(const void *buf, size_t len, kva_config **out, char *err,
                            size_t errlen) {
  config_value root;
  clear_err(err, errlen);
  if (!out) return KVA_EINVAL;
  *out = NULL;
  int rc = config_value_from_msgpack(buf, len, &root, err, errlen);
  if (rc) return rc;
  return config_build(&root, config_online_cpus(), out, err, errlen);
}

int kva_config_from_file(const char *path, kva_config **out, char *err, size_t errlen) {
  void *buf = NULL;
  size_t len = 0;
  clear_err(err, errlen);
  if (!out || !path) return KVA_EINVAL;
  *out = NULL;
  int rc = config_read_file(path, &buf, &len, err, errlen);
  if (rc) return rc;
  rc = kva_config_from_msgpack(buf, len, out, err, errlen);
  free(buf);
  return rc;
}

kva_config *config_copy(const kva_config *src) {
  config_value root;
  kva_config *c = NULL;
  if (!src) return kva_config_default();
  config_lock(src);
  int rc = config_value_copy(&root, &src->explicit_);
  unsigned ncpu = src->ncpu;
  config_unlock(src);
  if (rc) return NULL;
  config_build(&root, ncpu, &c, NULL, 0);
  return c;
}

void kva_config_free(kva_config *c) {
  if (!c) return;
  config_value_free(&c->explicit_);
  config_value_free(&c->effective);
  for (retired_tree *r = c->retired, *next; r; r = next) {
    next = r->next;
    config_value_free(&r->tree);
    free(r);
  }
  free(c->nodes);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

/* Stores *v (owned) at path p of root, making missing parents; an index
 * one past the end of an array appends. */
static int put_at(config_value *root, const config_path *p, config_value *v, char *err,
                  size_t errlen) {
  config_value *cur = root;
  config_path at = *p;
  for (int i = 0; i < p->depth; i++) {
    const config_seg *s = &p->seg[i];
    int last = i == p->depth - 1;
    at.depth = i; /* errors name the parent */
    if (s->key && cur->kind != CONFIG_MAP) {
      config_value_free(v);
      return config_fail(err, errlen, &at, "expected a map, got %s", config_kind_name(cur->kind));
    }
    if (!s->key && cur->kind != CONFIG_ARRAY) {
      config_value_free(v);
      return config_fail(err, errlen, &at, "expected an array, got %s",
                         config_kind_name(cur->kind));
    }
    at.depth = i + 1;
    if (s->key) {
      config_value *child = config_map_find(cur, s->key, s->klen);
      config_value fresh;
      if (child && last) {
        config_value_free(child);
        *child = *v;
        return KVA_OK;
      }
      if (child) {
        cur = child;
        continue;
      }
      if (last) return config_map_put(cur, s->key, s->klen, v);
      /* a missing parent: a map for a key below it, an array for an index */
      int made = p->seg[i + 1].key ? config_value_map(&fresh, 4) : config_value_array(&fresh, 4);
      if (made || config_map_put(cur, s->key, s->klen, &fresh))
        return config_value_free(v), KVA_ENOMEM;
      cur = &cur->as.map.items[cur->as.map.len - 1].value;
      continue;
    }
    if (s->index < cur->as.array.len) {
      cur = &cur->as.array.items[s->index];
      if (!last) continue;
      config_value_free(cur);
      *cur = *v;
      return KVA_OK;
    }
    if (!last || s->index > cur->as.array.len) {
      config_value_free(v);
      return config_fail(err, errlen, &at, "no such element (the array has %zu)",
                         cur->as.array.len);
    }
    return config_array_push(cur, v);
  }
  config_value_free(v); /* the empty path: config_path_parse never makes one */
  return KVA_EINVAL;
}

int kva_config_set_err(kva_config *c, const char *path, const char *value, char *err,
                       size_t errlen) {
  config_path p;
  config_value v, next;
  char shown[160];
  clear_err(err, errlen);
  if (!c || !path || !value) return KVA_EINVAL;
  if (config_path_parse(path, &p)) {
    config_escape(path, strlen(path), 64, shown, sizeof shown);
    config_fail_at(err, errlen, shown, "invalid path");
    return KVA_EINVAL;
  }
  if (strlen(value) > CONFIG_MAX_BYTES)
    return config_fail(err, errlen, &p, "value is over the 1 MiB limit");
  config_lock(c);
  int rc = config_text_parse(&c->explicit_, &p, value, &v, err, errlen);
  if (rc == KVA_OK && (rc = config_value_copy(&next, &c->explicit_))) config_value_free(&v);
  if (rc == KVA_OK && (rc = put_at(&next, &p, &v, err, errlen))) config_value_free(&next);
  if (rc == KVA_OK) rc = commit(c, &next, err, errlen);
  config_unlock(c);
  return rc;
}

int kva_config_set(kva_config *c, const char *path, const char *value) {
  return kva_config_set_err(c, path, value, NULL, 0);
}

int kva_config_to_msgpack(const kva_config *c, void **buf, size_t *len) {
  if (!c || !buf || !len) return KVA_EINVAL;
  config_lock(c);
  int rc = config_value_to_msgpack(&c->effective, buf, len);
  config_unlock(c);
  return rc;
}

const config_value *config_effective_root(const kva_config *c) {
  return &c->effective;
}

size_t config_l2_count(const kva_config *c) {
  return c ? c->nnodes : 0;
}

const kva_config_node *config_l2_node(const kva_config *c, size_t i) {
  return c && i < c->nnodes ? &c->nodes[i] : NULL;
}

const config_value *config_node_get(const kva_config_node *n, const char *key) {
  return n && key ? config_map_get(n->map, key) : NULL;
}

/* kva_config_node_default's nodes, one per built-in type, made on first
 * use and kept for the process: a factory may keep its node's strings. */
typedef struct default_node {
  struct default_node *next;
  kva_config_node node;
  config_value map;
} default_node;

static pthread_mutex_t defaults_lock = PTHREAD_MUTEX_INITIALIZER;
static default_node *defaults; /* guarded by defaults_lock */

static default_node *default_find(const char *type) {
  for (default_node *d = defaults; d; d = d->next)
    if (strcmp(config_map_get(&d->map, "type")->as.str.ptr, type) == 0) return d;
  return NULL;
}

static int put_str(config_value *map, const char *key, const char *s) {
  config_value v;
  int rc = config_value_str(&v, s, strlen(s));
  return rc ? rc : config_map_put(map, key, strlen(key), &v);
}

/* The entry {type, name: type} made effective by the code every config's
 * l2[] entries go through, so that its defaults are the schema's. */
static default_node *default_make(const char *type) {
  default_node *d = calloc(1, sizeof *d);
  config_value entry = config_value_nil();
  int rc = d ? config_value_map(&entry, 2) : KVA_ENOMEM;
  if (rc == KVA_OK) rc = put_str(&entry, "type", type);
  if (rc == KVA_OK) rc = put_str(&entry, "name", type);
  if (rc == KVA_OK) rc = config_effective_tier(&entry, 0, &d->map);
  config_value_free(&entry);
  if (rc != KVA_OK) {
    if (d) config_value_free(&d->map);
    free(d);
    return NULL;
  }
  d->node.map = &d->map;
  return d;
}

const kva_config_node *kva_config_node_default(const char *type) {
  if (!type || !config_schema_is_tier_type(type, strlen(type))) return NULL;
  pthread_mutex_lock(&defaults_lock);
  default_node *d = default_find(type);
  if (!d && (d = default_make(type))) {
    d->next = defaults;
    defaults = d;
  }
  pthread_mutex_unlock(&defaults_lock);
  return d ? &d->node : NULL;
}
