/*
 * common/registry.h — a process-wide table of named values: the one
 * implementation behind kvact's four registries (L2 adapter types, store,
 * prefetch and eviction policies), with one rule for all of them:
 *
 *  - a name is 1..REGISTRY_NAME_MAX bytes; a taken name is refused with
 *    KVA_EINVAL, so nothing is ever replaced (nor removed);
 *  - the built-ins go in first, once, before any other registration or
 *    lookup (pthread_once), so that no registration can shadow them;
 *  - a value is copied in (value_size bytes) and stays at its place for
 *    the life of the process: a pointer from registry_find may be kept.
 *    A value that carries a `const char *name` (name_offset) is pointed at
 *    the registry's own copy of the name;
 *  - one mutex per registry: registering and looking up from several
 *    threads at once is safe.
 *
 * Define one with REGISTRY_DEFINE in the file that owns it.
 */
#ifndef KVA_COMMON_REGISTRY_H
#define KVA_COMMON_REGISTRY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define REGISTRY_NAME_MAX 31 /* bytes of a name, without the NUL */
#define REGISTRY_CAP 64      /* entries of one registry, built-ins included */
#define REGISTRY_NO_NAME SIZE_MAX

typedef struct registry {
  size_t value_size;      /* bytes of one value */
  size_t name_offset;     /* of a value's `const char *name`, or REGISTRY_NO_NAME */
  void (*builtins)(void); /* adds the built-ins with registry_put; run once */
  unsigned char *values;  /* REGISTRY_CAP values (static storage) */
  pthread_once_t once;    /* guards builtins */
  pthread_mutex_t lock;   /* guards n and the entries being added */
  size_t n;               /* entries [0, n) are in use, in registration order */
  char names[REGISTRY_CAP][REGISTRY_NAME_MAX + 1];
} registry;

/* A static registry `var` of values of `type`. builtins_fn (void f(void),
 * declared before) adds the built-ins with registry_put(&var, ...);
 * name_off is offsetof(type, <its name member>) or REGISTRY_NO_NAME. */
#define REGISTRY_DEFINE(var, type, builtins_fn, name_off)                                          \
  static type var##_values[REGISTRY_CAP];                                                          \
  static registry var = {                                                                          \
      .value_size = sizeof(type),                                                                  \
      .name_offset = (name_off),                                                                   \
      .builtins = builtins_fn,                                                                     \
      .values = (unsigned char *)var##_values,                                                     \
      .once = PTHREAD_ONCE_INIT,                                                                   \
      .lock = PTHREAD_MUTEX_INITIALIZER,                                                           \
  }

/* Adds a copy of value under name. KVA_EINVAL for a NULL, empty or too
 * long name or a taken one; KVA_ENOMEM when REGISTRY_CAP are registered. */
int registry_add(registry *r, const char *name, const void *value);
/* registry_add for r's builtins function alone (it runs inside the once
 * that registry_add waits for). */
int registry_put(registry *r, const char *name, const void *value);
/* The value registered as name, or NULL (also for a NULL name). */
const void *registry_find(registry *r, const char *name);
/* The names in registration order, joined by sep, into out (always
 * terminated when len > 0). Returns the length the whole list needs, as
 * snprintf does: out was big enough when it is < len. */
size_t registry_names(registry *r, const char *sep, char *out, size_t len);

#endif
