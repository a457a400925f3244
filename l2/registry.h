/*
 * registry.h — process-wide registries by name: L2 adapter types, store
 * policies and prefetch policies (kva_l2_register, kva_*_policy_register).
 *
 * Registration is meant to happen before kva_runtime_start; lookups are
 * made at start. The rule is common/registry.h's: names of 1..31 bytes, a
 * taken name (built-ins included) refused with KVA_EINVAL, KVA_ENOMEM
 * past REGISTRY_CAP entries; safe from several threads.
 */
#ifndef KVA_L2_REGISTRY_H
#define KVA_L2_REGISTRY_H

#include <stddef.h>

#include "kvact.h"

/* The built-in prefetch policy whose plan the controller cuts to the
 * prefix worth loading (load_plan.h). */
#define PREFETCH_LOAD_OR_RECOMPUTE "load_or_recompute"

kva_l2_factory l2_factory_find(const char *type);
/* Copies of the registered policy (its name points into the registry). */
int store_policy_find(const char *name, kva_store_policy *out);
int prefetch_policy_find(const char *name, kva_prefetch_policy *out);
/* The registered names, built-ins first, joined by sep (" " for error
 * messages, ", " for the reference); the length the whole list needs, as
 * registry_names. */
size_t l2_adapter_names(const char *sep, char *out, size_t len);
size_t store_policy_names(const char *sep, char *out, size_t len);
size_t prefetch_policy_names(const char *sep, char *out, size_t len);

/* Registers the built-in adapter types through add (defined by
 * l2/adapters/builtin.c, the one file that names them; the registry calls
 * it once, before any other registration). */
void l2_builtin_adapters(int (*add)(const char *type, kva_l2_factory f));

#endif
