/*
 * server.h — kvactd's side of multi-process mode (docs/multiprocess.md):
 * with server.socket set, kva_runtime_start serves its storage to other
 * processes on that Unix socket.
 */
#ifndef KVA_SERVER_SERVER_H
#define KVA_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

typedef struct server server;

/* Binds server.socket (a stale file of a dead daemon is replaced; a live
 * daemon there, or a file that is not a socket, is KVA_ECONFIG), starts
 * the listener, the control threads and, with server.metrics_addr, the
 * metrics endpoint. On failure *out may hold a server to stop and free. */
int server_start(kva_runtime *rt, kva_storage *s, server **out);
/* Accepts no more clients and removes the socket file, if it is still the
 * one this daemon bound (same device and inode: not a second daemon's made
 * after the first's was removed); kvactd's SIGTERM, before it flushes.
 * Idempotent. */
void server_stop_accepting(server *sv);
/* Ends every session (each releases its client's locks) and the control
 * threads; before the storage closes. */
void server_stop(server *sv);
/* After the runtime has stopped the actors. */
void server_free(server *sv);

/* The connected clients (server/metrics.h's metrics_client): fills up to
 * cap of them; returns how many there are. */
struct metrics_client;
size_t server_clients(void *sv, struct metrics_client *out, size_t cap);

#endif
