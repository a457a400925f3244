/*
 * kvactd — kvact's storage daemon: one L1 pool and the L2 tiers shared by
 * every engine process on the host (docs/multiprocess.md).
 *
 *   kvactd [--config FILE] [-o key=value ...] [--quiet]
 *   kvactd --version | --help
 *
 * Runs the embedded default config (or FILE) with -o overrides applied in
 * order, plus server.socket = $XDG_RUNTIME_DIR/kvact.sock (else
 * /tmp/kvact-<uid>.sock) unless the config sets it. Logs one line per
 * client connect and disconnect. On SIGTERM or SIGINT: accepts no more
 * clients and removes the socket, flushes pending L1 -> L2 stores for at
 * most server.shutdown_flush_ms, shuts the storage down (the disk tier
 * saves its index), exits 0. Exit status 1: bad arguments or config;
 * 2: the storage did not start (the log says why).
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actors/runtime_internal.h"
#include "kvact.h"
#include "server/server.h"
#include "tools/tool_version.h"

static void usage(FILE *f) {
  fprintf(f, "usage: kvactd [--config FILE] [-o key=value ...] [--quiet]\n"
             "  --config FILE   msgpack config (default: the embedded default)\n"
             "  -o key=value    set a config key (repeatable; applied in order)\n"
             "  --quiet         log warnings and errors only (default: also connects,\n"
             "                  disconnects and lifecycle)\n"
             "  --version       print kvactd's and libkvact's versions, exit\n"
             "  --help          this text\n");
}

static int set_default_socket(kva_config *c) {
  const char *sock = "";
  kva_config_get_str(c, "server.socket", &sock);
  if (sock[0]) return KVA_OK;
  char path[108];
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  if (xdg && xdg[0])
    snprintf(path, sizeof(path), "%s/kvact.sock", xdg);
  else
    snprintf(path, sizeof(path), "/tmp/kvact-%u.sock", (unsigned)getuid());
  return kva_config_set(c, "server.socket", path);
}

static int load_config(int argc, char **argv, kva_config **out) {
  static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                       {"quiet", no_argument, NULL, 'q'},
                                       {"help", no_argument, NULL, 'h'},
                                       {"version", no_argument, NULL, 'V'},
                                       {NULL, 0, NULL, 0}};
  const char *file = NULL;
  int quiet = 0, ch;
  char err[512];
  /* the file first, then the overrides in order */
  while ((ch = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
    if (ch == 'c') file = optarg;
    if (ch == 'q') quiet = 1;
    if (ch == 'h') {
      usage(stdout);
      exit(0);
    }
    if (ch == 'V') exit(tool_version("kvactd"));
    if (ch == '?') return 1;
  }
  if (optind < argc) {
    fprintf(stderr, "kvactd: unexpected argument %s\n", argv[optind]);
    return 1;
  }
  kva_config *c = NULL;
  if (file ? kva_config_from_file(file, &c, err, sizeof(err)) != KVA_OK
           : !(c = kva_config_default())) {
    fprintf(stderr, "kvactd: %s\n", file ? err : "out of memory");
    return 1;
  }
  optind = 1;
  while ((ch = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
    if (ch != 'o') continue;
    char *eq = strchr(optarg, '=');
    if (!eq) {
      fprintf(stderr, "kvactd: -o %s: expected key=value\n", optarg);
      kva_config_free(c);
      return 1;
    }
    *eq = 0;
    if (kva_config_set_err(c, optarg, eq + 1, err, sizeof(err)) != KVA_OK) {
      fprintf(stderr, "kvactd: -o %s=%s: %s\n", optarg, eq + 1, err);
      kva_config_free(c);
      return 1;
    }
  }
  if (set_default_socket(c) != KVA_OK) {
    fprintf(stderr, "kvactd: cannot set the default server.socket\n");
    kva_config_free(c);
    return 1;
  }
  if (!quiet) kva_log_set(NULL, NULL, KVA_LOG_INFO);
  *out = c;
  return 0;
}

int main(int argc, char **argv) {
  kva_config *c = NULL;
  if (load_config(argc, argv, &c) != 0) {
    usage(stderr);
    return 1;
  }
  /* every thread of the runtime inherits the mask: the signals wait here */
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, NULL);
  kva_runtime *rt = NULL;
  int rc = kva_runtime_start(c, &rt);
  int64_t flush_ms = 10000;
  kva_config_get_i64(c, "server.shutdown_flush_ms", &flush_ms);
  kva_config_free(c);
  if (rc != KVA_OK) {
    fprintf(stderr, "kvactd: cannot start: %s\n", kva_strerror(rc));
    return 2;
  }
  int sig = 0;
  sigwait(&stop, &sig);
  kva_log(KVA_LOG_INFO, "kvactd: %s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  server_stop_accepting(rt->server);
  rc = kva_flush(kva_storage_of(rt), (int)flush_ms);
  if (rc != KVA_OK)
    kva_log(KVA_LOG_WARN, "kvactd: pending L2 stores not flushed in %ld ms (%s)", (long)flush_ms,
            kva_strerror(rc));
  kva_runtime_shutdown(rt);
  kva_log(KVA_LOG_INFO, "kvactd: stopped");
  return 0;
}
