/*
 * runtime_start.c — kva_runtime_start and kva_runtime_shutdown: the
 * runtime, the storage it serves (its own actors, or a connection to
 * kvactd with client.socket) and, with server.socket, the listener that
 * serves it to other processes (server/).
 *
 * Shutdown runs in the reverse order: the server first (no new client;
 * every session ends and releases its locks), then the storage facade
 * (no new call; the controllers drain), then the actors.
 */
#include "actors/log.h"
#include "actors/runtime_internal.h"
#include "config/config_internal.h"
#include "server/server.h"
#include "storage/storage.h"

/* The config's mode: embedded, a daemon (server.socket) or a client. */
static int check_mode(const kva_config *c) {
  int serves = config_str(c, "server.socket")[0] != 0;
  if (serves && storage_is_client(c)) {
    LOG_ERROR(
        "runtime: server.socket and client.socket are both set; a process is one or the other");
    return KVA_ECONFIG;
  }
  if (serves && config_i64(c, "l1.size_bytes") == 0) {
    LOG_ERROR("runtime: server.socket is set but l1.size_bytes is 0: there is no storage to serve");
    return KVA_ECONFIG;
  }
  return KVA_OK;
}

static int start_storage(kva_runtime *rt) {
  const kva_config *c = rt->cfg;
  int rc = check_mode(c);
  if (rc != KVA_OK) return rc;
  if (config_i64(c, "l1.size_bytes") == 0 && !storage_is_client(c)) return KVA_OK;
  kva_storage *s = NULL;
  if ((rc = storage_open(rt, &s)) != KVA_OK) return rc;
  rt->storage = s;
  if (config_str(c, "server.socket")[0] == 0) return KVA_OK;
  server *sv = NULL;
  rc = server_start(rt, s, &sv);
  rt->server = sv;
  return rc;
}

int kva_runtime_start(const kva_config *cfg, kva_runtime **out) {
  int rc = runtime_create(cfg, out);
  if (rc != KVA_OK) return rc;
  rc = start_storage(*out);
  if (rc != KVA_OK) {
    kva_runtime_shutdown(*out);
    *out = NULL;
  }
  return rc;
}

void kva_runtime_shutdown(kva_runtime *rt) {
  if (!rt) return;
  /* a child of fork(): the threads to stop and the locks to take are the
   * parent's, and so are the socket, the segment and the files: nothing
   * is touched (the child's copy goes with the child) */
  if (runtime_forked(rt)) return;
  kva_storage *s = rt->storage;
  server *sv = rt->server;
  if (sv) server_stop(sv);
  if (s) storage_close(s);
  runtime_destroy(rt);
  if (sv) server_free(sv);
  if (s) storage_free(s);
}

kva_storage *kva_storage_of(kva_runtime *rt) {
  return rt ? rt->storage : NULL;
}
