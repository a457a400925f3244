/*
 * redis_start.c — the redis adapter's config and its check at start
 * (redis_internal.h).
 *
 * At start the seeds are dialled synchronously (blocking hiredis, bounded
 * by timeout_ms), in order, until one answers: AUTH when a password is
 * set, then PING, then, in cluster mode, CLUSTER SLOTS for the map. What
 * the server refuses (a wrong password, NOAUTH, no cluster support) is a
 * config error: kva_runtime_start fails with KVA_ECONFIG and the message
 * names the address and the server's words. A server that cannot be
 * reached is not: a cache tier that is down must not keep the engine from
 * starting, so the tier starts failing (its requests fail, it is bypassed
 * and probed) and serves once the server comes.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "l2/adapters/redis/redis_internal.h"

/* "host:port", in the form the schema checked ("[v6]:port" too); false
 * for a host longer than the adapter keeps. */
static bool parse_addr(const char *s, redis_addr *a) {
  const char *colon = strrchr(s, ':');
  size_t hl = (size_t)(colon - s);
  if (s[0] == '[' && hl >= 2 && s[hl - 1] == ']') s++, hl -= 2;
  if (hl >= sizeof(a->host)) return false;
  memcpy(a->host, s, hl);
  a->host[hl] = 0;
  a->port = atoi(colon + 1);
  return true;
}

static const char *read_addrs(redis_cfg *c, const kva_config_node *cfg) {
  const char *s;
  for (size_t i = 0;
       c->nseeds < REDIS_MAX_SEEDS && kva_config_node_str_at(cfg, "addrs", i, &s) == KVA_OK; i++)
    if (!parse_addr(s, &c->seeds[c->nseeds++])) return "addrs: a host longer than 255 bytes";
  return NULL;
}

static const char *read_str(const kva_config_node *cfg, const char *key, char *out, size_t cap) {
  const char *s = "";
  kva_config_node_str(cfg, key, &s);
  if (strlen(s) >= cap) return "longer than the adapter allows";
  snprintf(out, cap, "%s", s);
  return NULL;
}

/* cfg is effective (kvact.h): every key is there, at its schema default
 * when the config left it out, and passed the schema's checks; NULL reads
 * the schema defaults. So nothing here repeats a default or a range: what
 * stays is what the schema cannot say (the lengths this adapter keeps, a
 * username needs a password). */
const char *redis_read_config(redis_cfg *c, const kva_config_node *cfg) {
  const char *name = "";
  uint64_t pipeline = 0, connections = 0, timeout_ms = 0;
  int cluster = 0;
  *c = (redis_cfg){0};
  if (!cfg && !(cfg = kva_config_node_default("redis"))) return "redis: out of memory";
  kva_config_node_str(cfg, "name", &name);
  snprintf(c->name, sizeof(c->name), "%s", name);
  const char *bad = read_addrs(c, cfg);
  if (bad) return bad;
  kva_config_node_bool(cfg, "cluster", &cluster);
  c->cluster = cluster;
  if (read_str(cfg, "username", c->username, sizeof(c->username))) return "username: too long";
  if (read_str(cfg, "password", c->password, sizeof(c->password))) return "password: too long";
  if (read_str(cfg, "namespace", c->ns, sizeof(c->ns))) return "namespace: longer than 256 bytes";
  kva_config_node_u64(cfg, "pipeline", &pipeline);
  kva_config_node_u64(cfg, "connections", &connections);
  kva_config_node_u64(cfg, "timeout_ms", &timeout_ms);
  kva_config_node_u64(cfg, "capacity_bytes", &c->capacity);
  c->pipeline = (uint32_t)pipeline;
  c->connections = (uint32_t)connections;
  c->timeout_ns = timeout_ms * 1000000ull;
  if (c->username[0] && !c->password[0]) return "username: set without a password";
  if (!c->cluster && c->nseeds > 1)
    kva_log(KVA_LOG_WARN, "%s: cluster is false: only the first of %u addrs is used", c->name,
            c->nseeds);
  return NULL;
}

int redis_auth_argv(const redis_cfg *c, const char **argv, size_t *lens) {
  if (!c->password[0]) return 0;
  int n = 0;
  argv[n++] = "AUTH";
  if (c->username[0]) argv[n++] = c->username;
  argv[n++] = c->password;
  for (int i = 0; i < n; i++) lens[i] = strlen(argv[i]);
  return n;
}

/* ---- the check at start ------------------------------------------------- */

enum { SEED_OK = 0, SEED_UNREACHABLE = 1, SEED_REFUSED = 2 };

static int refused(const redis_addr *a, const char *what, const char *said, char *err,
                   size_t errlen) {
  snprintf(err, errlen, "redis %s:%d: %s%s", a->host, a->port, what, said);
  return SEED_REFUSED;
}

/* One command; SEED_UNREACHABLE with why when the connection failed. */
static redisReply *ask(redisContext *c, int argc, const char **argv, const size_t *lens, char *why,
                       size_t whylen) {
  redisReply *rep = redisCommandArgv(c, argc, argv, lens);
  if (!rep) snprintf(why, whylen, "%s", c->errstr[0] ? c->errstr : "no reply");
  return rep;
}

static int talk(redis *r, redisContext *c, const redis_addr *a, char *err, size_t errlen) {
  const char *argv[3];
  size_t lens[3];
  int argc = redis_auth_argv(&r->cfg, argv, lens), rc = SEED_OK;
  redisReply *rep = NULL;
  if (argc && !(rep = ask(c, argc, argv, lens, err, errlen))) return SEED_UNREACHABLE;
  if (rep && rep->type == REDIS_REPLY_ERROR) rc = refused(a, "", rep->str, err, errlen);
  freeReplyObject(rep);
  if (rc != SEED_OK) return rc;
  argv[0] = r->cfg.cluster ? "CLUSTER" : "PING";
  argv[1] = "SLOTS";
  lens[0] = strlen(argv[0]);
  lens[1] = 5;
  if (!(rep = ask(c, r->cfg.cluster ? 2 : 1, argv, lens, err, errlen))) return SEED_UNREACHABLE;
  if (rep->type == REDIS_REPLY_ERROR)
    rc = refused(a, r->cfg.cluster ? "cluster is true, but CLUSTER SLOTS: " : "", rep->str, err,
                 errlen);
  else if (r->cfg.cluster && redis_slots_apply(r, rep, a) != KVA_OK)
    rc = refused(a, "CLUSTER SLOTS reply not understood", "", err, errlen);
  freeReplyObject(rep);
  return rc;
}

static int try_seed(redis *r, const redis_addr *a, char *err, size_t errlen) {
  uint64_t ms = r->cfg.timeout_ns / 1000000ull;
  struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
  redisContext *c = redisConnectWithTimeout(a->host, a->port, tv);
  if (!c || c->err) {
    snprintf(err, errlen, "%s", c ? c->errstr : "out of memory");
    redisFree(c);
    return SEED_UNREACHABLE;
  }
  redisSetTimeout(c, tv);
  redis_sigpipe g;
  redis_sigpipe_block(&g);
  int rc = talk(r, c, a, err, errlen);
  redis_sigpipe_restore(&g);
  redisFree(c);
  return rc;
}

/* A seed given by name is resolved once, here at start where blocking is
 * allowed: hiredis resolves names with a blocking getaddrinfo at every
 * connect, which would stall a worker on each reconnect. The numeric
 * address is kept (a name that changes address later is not followed); an
 * IPv4 address is preferred, as servers often listen on 127.0.0.1 only
 * while "localhost" also names ::1. */
static void resolve_seed(const char *tier, redis_addr *a) {
  unsigned char buf[sizeof(struct in6_addr)];
  if (inet_pton(AF_INET, a->host, buf) == 1 || inet_pton(AF_INET6, a->host, buf) == 1) return;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc = getaddrinfo(a->host, NULL, &hints, &res);
  char ip[INET6_ADDRSTRLEN] = "";
  const struct addrinfo *pick = res;
  for (const struct addrinfo *i = res; rc == 0 && i; i = i->ai_next)
    if (i->ai_family == AF_INET) {
      pick = i;
      break;
    }
  if (rc == 0 && pick) {
    const void *p = pick->ai_family == AF_INET6
                        ? (const void *)&((struct sockaddr_in6 *)pick->ai_addr)->sin6_addr
                        : (const void *)&((struct sockaddr_in *)pick->ai_addr)->sin_addr;
    inet_ntop(pick->ai_family, p, ip, sizeof ip);
  }
  if (res) freeaddrinfo(res);
  if (!ip[0]) {
    kva_log(KVA_LOG_WARN, "%s: redis %s: cannot resolve (%s); every connect will try again", tier,
            a->host, rc ? gai_strerror(rc) : "no address");
    return;
  }
  kva_log(KVA_LOG_INFO, "%s: redis %s is %s", tier, a->host, ip);
  snprintf(a->host, sizeof(a->host), "%s", ip);
}

int redis_check_start(redis *r, char *err, size_t errlen) {
  char why[256] = "";
  for (uint32_t i = 0; i < r->cfg.nseeds; i++) resolve_seed(r->cfg.name, &r->cfg.seeds[i]);
  uint32_t tries = r->cfg.cluster ? r->cfg.nseeds : 1;
  for (uint32_t i = 0; i < tries; i++) {
    int rc = try_seed(r, &r->cfg.seeds[i], why, sizeof(why));
    if (rc == SEED_OK) return KVA_OK;
    if (rc == SEED_REFUSED) {
      snprintf(err, errlen, "%s", why);
      return KVA_ECONFIG;
    }
    kva_log(KVA_LOG_WARN, "%s: redis %s:%d unreachable at start (%s)", r->cfg.name,
            r->cfg.seeds[i].host, r->cfg.seeds[i].port, why);
  }
  kva_log(KVA_LOG_WARN,
          "%s: no redis server reachable: the tier starts failing (bypassed and probed) and "
          "serves once a server answers",
          r->cfg.name);
  return KVA_OK;
}
