/*
 * storage.h — the storage facade's life, for what composes a process:
 * kva_runtime_start/shutdown (runtime_start.c at the root) and kvactd's
 * server (server/).
 */
#ifndef KVA_STORAGE_STORAGE_H
#define KVA_STORAGE_STORAGE_H

#include "kvact.h"

/* Whether the config makes this process a client of kvactd. */
int storage_is_client(const kva_config *c);
/* Starts the storage of rt (its actors, or, with client.socket, the
 * connection to the daemon). */
int storage_open(kva_runtime *rt, kva_storage **out);
/* Refuses new calls, waits for those running, drains the controllers. */
void storage_close(kva_storage *s);
/* After the runtime has stopped the actors. */
void storage_free(kva_storage *s);

#endif
