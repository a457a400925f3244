/*
 * hello.c — a program outside the build, compiled the way users compile
 * theirs: cc hello.c -I<repo> -L<repo>/bazel-bin -lkvact. It spawns an
 * actor, talks to it from a port, and shuts down.
 */
#include <stdio.h>
#include <string.h>

#include "kvact.h"

enum { HELLO = KVA_MSG_USER, REPLY };

static void greeter(kva_actor *self, void *state, const kva_msg *m) {
  (void)state;
  char out[64];
  int n = snprintf(out, sizeof(out), "hello, %.*s", (int)m->len, (const char *)m->data);
  kva_send(m->from, REPLY, out, (uint32_t)n + 1, self, m->tag);
}

int main(void) {
  kva_config *cfg = kva_config_default();
  char err[256];
  if (kva_config_set_err(cfg, "l1.size_bytes", "0", err, sizeof(err)) != KVA_OK) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  kva_runtime *rt;
  int rc = kva_runtime_start(cfg, &rt);
  kva_config_free(cfg);
  if (rc != KVA_OK) {
    fprintf(stderr, "start: %s\n", kva_strerror(rc));
    return 1;
  }
  static const kva_behavior b = {"greeter", greeter, NULL};
  kva_actor *a = kva_spawn(rt, &b, NULL, NULL);
  kva_port *p = kva_port_open(rt, "main");
  kva_send(a, HELLO, "kvact", 5, kva_port_actor(p), 7);
  kva_msg m;
  char buf[64];
  rc = kva_port_recv(p, &m, buf, sizeof(buf), 5000);
  if (rc == KVA_OK) printf("%s (tag %llu)\n", buf, (unsigned long long)m.tag);
  kva_port_close(p);
  kva_runtime_shutdown(rt);
  return rc == KVA_OK && strcmp(buf, "hello, kvact") == 0 ? 0 : 1;
}
