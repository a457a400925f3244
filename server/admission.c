/*
 * admission.c — who may connect to kvactd (docs/multiprocess.md): a peer
 * whose uid (SO_PEERCRED) is the daemon's own or in server.allowed_uids,
 * or whose gid or one of whose supplementary groups (SO_PEERGROUPS) is a
 * group named in server.allowed_groups.
 *
 * Group names are resolved to gids once, at start (a name no group has
 * stops the start: a typo must not quietly lock every engine out). The
 * check runs once per connection, when the listener accepts it; no
 * message of a session goes through here.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actors/log.h"
#include "server/server_internal.h"

#define GR_BUF_MAX (1u << 20)  /* a group entry's strings: LDAP groups list many members */
#define PEER_GROUPS_STACK 64   /* supplementary groups read without an allocation */
#define PEER_GROUPS_MAX 65536u /* Linux's NGROUPS_MAX: no peer has more */

static int read_uids(server *sv, const kva_config *c) {
  for (size_t i = 0;; i++) {
    char path[64];
    int64_t v;
    snprintf(path, sizeof(path), "server.allowed_uids[%zu]", i);
    if (kva_config_get_i64(c, path, &v) != KVA_OK) return KVA_OK;
    uid_t *a = realloc(sv->allowed, (i + 1) * sizeof(*a));
    if (!a) return KVA_ENOMEM;
    sv->allowed = a;
    sv->allowed[sv->nallowed++] = (uid_t)v;
  }
}

/* getgrnam_r into a buffer that doubles on ERANGE, up to GR_BUF_MAX:
 * 0 with *found NULL is "no such group", like getgrnam_r's. */
static int lookup_group(const char *name, gid_t *gid, int *found) {
  long hint = sysconf(_SC_GETGR_R_SIZE_MAX);
  size_t cap = hint > 0 ? (size_t)hint : 1024;
  struct group gr, *res = NULL;
  int err;
  for (;;) {
    char *buf = malloc(cap);
    if (!buf) return ENOMEM;
    err = getgrnam_r(name, &gr, buf, cap, &res);
    if (res) *gid = gr.gr_gid;
    free(buf);
    if (err != ERANGE || cap >= GR_BUF_MAX) break;
    cap *= 2;
  }
  *found = res != NULL;
  return res ? 0 : err;
}

static int read_groups(server *sv, const kva_config *c) {
  for (size_t i = 0;; i++) {
    char path[64];
    const char *name;
    gid_t gid = 0;
    int found = 0;
    snprintf(path, sizeof(path), "server.allowed_groups[%zu]", i);
    if (kva_config_get_str(c, path, &name) != KVA_OK) return KVA_OK;
    int err = lookup_group(name, &gid, &found);
    if (err == ENOMEM) return KVA_ENOMEM;
    if (!found) {
      if (err)
        LOG_ERROR("kvactd: %s: cannot look up the group \"%s\": %s", path, name, strerror(err));
      else
        LOG_ERROR("kvactd: %s: no group is named \"%s\" on this host", path, name);
      return KVA_ECONFIG;
    }
    gid_t *a = realloc(sv->groups, (i + 1) * sizeof(*a));
    if (!a) return KVA_ENOMEM;
    sv->groups = a;
    sv->groups[sv->ngroups++] = gid;
  }
}

int admission_load(server *sv, const kva_config *c) {
  int rc = read_uids(sv, c);
  return rc == KVA_OK ? read_groups(sv, c) : rc;
}

static bool uid_allowed(const server *sv, uid_t uid) {
  if (uid == sv->uid) return true;
  for (size_t i = 0; i < sv->nallowed; i++)
    if (sv->allowed[i] == uid) return true;
  return false;
}

static bool gid_allowed(const server *sv, gid_t gid) {
  for (size_t i = 0; i < sv->ngroups; i++)
    if (sv->groups[i] == gid) return true;
  return false;
}

static bool any_gid_allowed(const server *sv, const gid_t *g, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (gid_allowed(sv, g[i])) return true;
  return false;
}

/* The peer's supplementary groups, as they were when it connected (the
 * kernel keeps the connect-time credentials, so they cannot grow between
 * two reads). A short buffer is ERANGE with the size needed in len: one
 * retry with that size, bounded by NGROUPS_MAX. A kernel before 4.13
 * (ENOPROTOOPT) has no SO_PEERGROUPS: only the gid counts then. */
static bool peer_groups_allowed(const server *sv, int fd, pid_t pid) {
  gid_t stack[PEER_GROUPS_STACK], *g = stack;
  socklen_t len = sizeof(stack);
  int rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len);
  if (rc != 0 && errno == ERANGE && len <= PEER_GROUPS_MAX * sizeof(gid_t)) {
    if (!(g = malloc(len))) {
      LOG_WARN("kvactd: no memory for the groups of pid %d", (int)pid);
      return false;
    }
    rc = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len);
  }
  bool ok = false;
  if (rc == 0)
    ok = any_gid_allowed(sv, g, len / sizeof(gid_t));
  else
    LOG_WARN("kvactd: cannot read the supplementary groups of pid %d (SO_PEERGROUPS: %s); only "
             "its gid is checked against server.allowed_groups",
             (int)pid, strerror(errno));
  if (g != stack) free(g);
  return ok;
}

bool admission_allows(const server *sv, int fd, const struct ucred *cred) {
  if (uid_allowed(sv, cred->uid)) return true;
  if (!sv->ngroups) return false;
  return gid_allowed(sv, cred->gid) || peer_groups_allowed(sv, fd, cred->pid);
}

void admission_free(server *sv) {
  free(sv->allowed);
  free(sv->groups);
}
