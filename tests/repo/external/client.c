/*
 * client.c SOCKET — a client of an installed kvactd, compiled the way users
 * compile theirs (cc client.c $(pkg-config --cflags --libs kvact)). It
 * connects, asks for the daemon's storage stats, and says whether it was
 * admitted. tools/clean_root_test.sh runs it as an admitted engine user
 * and as refused ones.
 *
 * Exit status: 0 admitted (prints the daemon's L1 capacity), 3 refused or
 * unreachable (prints why), 1 bad use or a failed start.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c11 */
#include <stdio.h>
#include <time.h>

#include "kvact.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: client SOCKET\n");
    return 1;
  }
  kva_config *cfg = kva_config_default();
  char err[256];
  if (kva_config_set_err(cfg, "client.socket", argv[1], err, sizeof(err)) != KVA_OK) {
    fprintf(stderr, "client.socket: %s\n", err);
    return 1;
  }
  kva_runtime *rt;
  int rc = kva_runtime_start(cfg, &rt); /* starts even while the daemon is away */
  kva_config_free(cfg);
  if (rc != KVA_OK) {
    fprintf(stderr, "start: %s\n", kva_strerror(rc));
    return 1;
  }
  /* the connection comes up in the background: give it two seconds */
  kva_storage_stats st;
  for (int i = 0; i < 40; i++) {
    rc = kva_storage_get_stats(kva_storage_of(rt), &st);
    if (rc == KVA_OK) break;
    nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
  }
  if (rc == KVA_OK)
    printf("admitted: kvactd's L1 holds %llu bytes (libkvact %s)\n",
           (unsigned long long)st.l1_capacity_bytes, kva_version());
  else
    printf("refused: %s\n", kva_strerror(rc));
  kva_runtime_shutdown(rt);
  return rc == KVA_OK ? 0 : 3;
}
