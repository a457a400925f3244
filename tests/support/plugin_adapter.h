/*
 * plugin_adapter.h — "tiny", a user's own L2 adapter written only against
 * kvact.h (the README's "Writing your own L2 adapter" example): up to
 * PLUGIN_TINY_MAX objects in a linear table with lock counts, built on
 * kvact.h's adapter kit as the built-in adapters are. It refuses a
 * malformed request as they do (KVA_EINVAL, a warning through kva_log),
 * refuses to replace a locked key (KVA_EAGAIN), misses a LOAD of another
 * layout and reports a full table as KVA_ENOMEM; it never evicts. Shared by l2_plugin_test (the
 * whole stack over it) and the L2 contract suite (the protocol, request by request).
 */
#ifndef KVA_TESTS_PLUGIN_ADAPTER_H
#define KVA_TESTS_PLUGIN_ADAPTER_H

#include <stddef.h>

#include "kvact.h"

#define PLUGIN_TINY_MAX 64 /* objects the table holds */

/* The factory (kva_l2_factory). Config: "refuse": 1 makes it fail, with
 * a message in err, to test a start that a factory stops. cfg may be NULL
 * (the tier is then named "tiny"). */
kva_actor *plugin_tiny_factory(kva_runtime *rt, const kva_config_node *cfg, char *err,
                               size_t errlen);
/* kva_l2_register("tiny", plugin_tiny_factory): KVA_OK the first time in a
 * process, KVA_EINVAL once it is registered. */
int plugin_tiny_register(void);
/* Receives of any "tiny" tier so far that ran outside deterministic mode
 * on a thread that is not the runtime's (kva_thread_sigpipe_blocked 0):
 * kvact.h says there are none. */
unsigned plugin_tiny_unguarded_turns(void);

#endif
