/*
 * registry.h — process-wide registries by name: L2 adapter types, store
 * policies and prefetch policies (kva_l2_register, kva_*_policy_register).
 *
 * Registration is meant to happen before kva_runtime_start; lookups are
 * made at start. Both take one mutex, so registering from several threads
 * is safe too.
 */
#ifndef KVA_L2_REGISTRY_H
#define KVA_L2_REGISTRY_H

#include <stddef.h>

#include "kvact.h"

#define REGISTRY_NAME_MAX 31

kva_l2_factory l2_factory_find(const char *type);
/* Copies of the registered policy (its name points into the registry). */
int store_policy_find(const char *name, kva_store_policy *out);
int prefetch_policy_find(const char *name, kva_prefetch_policy *out);
/* "default skip_l1 ..." for error messages. */
void store_policy_names(char *out, size_t len);
void prefetch_policy_names(char *out, size_t len);

/* Registers the built-in adapter types through add (defined by
 * l2/adapters/builtin.c, the one file that names them; the registry calls
 * it once, before any other registration). */
void l2_builtin_adapters(int (*add)(const char *type, kva_l2_factory f));

#endif
