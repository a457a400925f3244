/*
 * config/schema.c — the one table every config key is described in.
 *
 * Validation (validate.c, tiers.c), defaults (effective.c), text parsing for
 * kva_config_set (text.c) and the reference documentation (schema_doc.c,
 * `kvconf schema --markdown`) all read this table, so adding a key here is
 * the whole job. Defaults are written in kva_config_set's text form and
 * parsed by the same code as user input; a test checks they validate.
 * Doc strings name the registered adapter types and policies only through
 * the {tier_types}-style markers of config_internal.h, which the reference
 * fills in from the registries.
 */
#include <string.h>

#include "config/config_internal.h"

#define I64MAX ((uint64_t)INT64_MAX)
#define U64MAX UINT64_MAX
#define MAX_MS 3600000 /* one hour: longer timeouts are mistakes */

#define INT(sc, p, lo, hi, d, f, text)                                                             \
  {                                                                                                \
    .scope = sc, .path = p, .type = CONFIG_T_INT, .min = lo, .max = hi, .def = d, .flags = f,      \
    .doc = text                                                                                    \
  }
#define FLOAT(sc, p, lo, hi, d, text)                                                              \
  { .scope = sc, .path = p, .type = CONFIG_T_FLOAT, .fmin = lo, .fmax = hi, .def = d, .doc = text }
#define BOOL(sc, p, d, text)                                                                       \
  { .scope = sc, .path = p, .type = CONFIG_T_BOOL, .def = d, .doc = text }
#define STR(sc, p, d, text)                                                                        \
  { .scope = sc, .path = p, .type = CONFIG_T_STR, .def = d, .doc = text }
#define ENUM(sc, p, ch, d, text)                                                                   \
  { .scope = sc, .path = p, .type = CONFIG_T_ENUM, .choices = ch, .def = d, .doc = text }

/* Order matters: it is the order of `kvconf show` and of the reference. */
static const config_key keys[] = {
    /* runtime */
    {.path = "runtime.workers",
     .type = CONFIG_T_INT,
     .min = 0,
     .max = 1024,
     .def_doc = "online CPUs",
     .flags = CONFIG_F_NCPU,
     .doc = "Worker threads. 0 = deterministic single-thread mode, driven by "
            "kva_runtime_run_until_idle."},
    INT(NULL, "runtime.mailbox_capacity", 4, 16777216, "1024", 0,
        "Mailbox slots per actor; rounded up to a power of two."),
    INT(NULL, "runtime.batch", 1, 65536, "64", 0,
        "Messages an actor handles per turn before its worker moves on."),
    INT(NULL, "runtime.spin_us", 0, 1000000, "50", 0,
        "Microseconds an idle worker polls for work before it sleeps (at most half the "
        "workers poll at once). Waking a sleeping worker costs its waker a futex and, on a "
        "VM, tens of microseconds; a longer poll spares that but takes a core from the "
        "engine (and from a kvactd on the same cores). 0 = sleep at once."),
    BOOL(NULL, "runtime.stats", "true", "Publish counters in a shared-memory segment (kvinspect)."),
    BOOL(NULL, "runtime.trace", "false",
         "Record message events in the trace ring from the start (kvinspect trace turns "
         "recording on for its own run either way)."),
    INT(NULL, "runtime.seed", 0, U64MAX, "0", 0,
        "PRNG seed of deterministic mode (runtime.workers = 0)."),
    /* l1 */
    INT(NULL, "l1.size_bytes", 0, I64MAX, "1073741824", 0,
        "Bytes of the L1 host pool. 0 = no storage actors (the runtime alone)."),
    INT(NULL, "l1.align_bytes", 64, 2097152, "4096", CONFIG_F_POW2,
        "Alignment of every L1 object."),
    {.path = "l1.pinned",
     .type = CONFIG_T_PINNED,
     .def = "auto",
     .doc = "Page-lock the L1 pool: true, false, or auto (when a CUDA device is present)."},
    INT(NULL, "l1.numa_node", -1, 1023, "-1", 0, "NUMA node of the pool; -1 = automatic."),
    BOOL(NULL, "l1.hugepages", "true", "Advise transparent huge pages for the pool."),
    BOOL(NULL, "l1.prefault", "false",
         "Fault every page of the pool in at start, so first writes do not page-fault (a "
         "page-locked pool is faulted in anyway)."),
    INT(NULL, "l1.reserve_bytes", 0, I64MAX, "0", 0,
        "Host memory left to the rest of the system: the pool is at most MemAvailable minus this."),
    /* eviction */
    STR(NULL, "eviction.policy", "lru",
        "Cache policy of L1, by registered name (built in: {eviction_policies}; or one "
        "registered with kva_eviction_policy_register)."),
    FLOAT(NULL, "eviction.trigger_watermark", 0, 1, "0.8",
          "Fraction of L1 in use that starts background eviction."),
    FLOAT(NULL, "eviction.ratio", 0, 1, "0.2",
          "Fraction of the bytes in L1 one eviction round frees (at least one object); 0 = no "
          "watermark eviction."),
    INT(NULL, "eviction.interval_ms", 1, MAX_MS, "1000", 0,
        "Period of the eviction controller's check."),
    /* storage manager */
    STR(NULL, "store_policy", "default",
        "Store policy, by registered name (built in: {store_policies}; or one registered with "
        "kva_store_policy_register): default keeps written objects in L1 and stores them to "
        "every L2 tier; skip_l1 deletes them from L1 once a tier stored them."),
    STR(NULL, "prefetch_policy", "default",
        "Prefetch policy, by registered name (built in: {prefetch_policies}; or one registered "
        "with kva_prefetch_policy_register): default loads each key from the lowest-index tier "
        "that has it; load_or_recompute does the same but loads only the prefix whose bytes "
        "arrive before the engine could compute them (docs/load-plan.md), counting the rest as "
        "skipped."),
    FLOAT(NULL, "load_plan.prefill_tokens_per_s", 0, 1e9, "10000",
          "Prefill rate of the engine, tokens per second, that the load_or_recompute prefetch "
          "policy assumes until an engine reports its own (kva_report_prefill, per model); 0 = "
          "unknown: load everything found."),
    INT(NULL, "load_plan.chunk_tokens", 1, 1048576, "256", 0,
        "Tokens per chunk object, for the prefill time of a chunk until an engine reports its "
        "own."),
    FLOAT(NULL, "load_plan.margin", 0, 0.9, "0.05",
          "Share of each tier's measured rate that load_or_recompute does not count on (noise, "
          "a busier moment): a chunk must arrive before its compute at (1 - margin) of the rate."),
    INT(NULL, "prefetch_max_in_flight", 1, 4096, "8", 0,
        "Prefetch requests the prefetch controller runs at once."),
    BOOL(NULL, "prefetch_writeback", "true",
         "Objects loaded from L2 stay in L1 as ordinary objects; false = temporary, freed at "
         "their last release."),
    INT(NULL, "l2_bypass_failures", 0, 1000000, "3", 0,
        "Failed operations in a row after which an L2 tier is bypassed until it answers a "
        "probe; 0 = never."),
    INT(NULL, "l2_probe_interval_ms", 1, MAX_MS, "1000", 0,
        "Period of the health probe of automatically bypassed L2 tiers."),
    {.path = "l2",
     .type = CONFIG_T_TIERS,
     .def = "[]",
     .def_doc = "[] (embedded default: one disk tier)",
     .doc = "L2 tiers, in lookup order: at most 8 maps with the keys below."},
    /* every l2 entry */
    {.scope = "*",
     .path = "type",
     .type = CONFIG_T_STR,
     .flags = CONFIG_F_REQUIRED,
     .doc = "{tier_types}, or a type registered with kva_l2_register (its other keys are "
            "passed to the plug-in as they are)."},
    {.scope = "*",
     .path = "name",
     .type = CONFIG_T_STR,
     .def_doc = "type + index (\"disk0\")",
     .flags = CONFIG_F_TIER_NAME,
     .doc = "Tier name: unique, 1 to 31 bytes, not \"L1\"."},
    /* mock: an in-memory tier with injectable latency and failures */
    INT("mock", "capacity_bytes", 0, I64MAX, "1073741824", 0, "Bytes the tier holds."),
    INT("mock", "bandwidth_bytes_per_s", 0, I64MAX, "0", 0, "Simulated bandwidth; 0 = unlimited."),
    INT("mock", "latency_us", 0, 60000000, "0", 0, "Simulated latency of every operation."),
    FLOAT("mock", "fail_store_rate", 0, 1, "0.0", "Fraction of stores that fail."),
    FLOAT("mock", "fail_load_rate", 0, 1, "0.0", "Fraction of loads that fail."),
    INT("mock", "seed", 0, U64MAX, "0", 0, "PRNG seed of the failure injection."),
    /* disk: io_uring on a file or block device */
    STR("disk", "path", "",
        "File or block device; \"\" = a temporary file in $TMPDIR, unnamed (O_TMPFILE), so "
        "that nothing is left behind, even by a killed process."),
    INT("disk", "capacity_bytes", 0, I64MAX, "1073741824", 0,
        "Bytes of a new (or empty) file, preallocated; an existing file or a block device "
        "keeps its size."),
    INT("disk", "slot_bytes", 0, I64MAX, "0", 0,
        "Bytes per object slot (a 4 KiB header block + the payload; a multiple of 4096, at "
        "least 8192); 0 = derived from the first layout stored. A formatted file keeps its "
        "own."),
    BOOL("disk", "o_direct", "true",
         "Open with O_DIRECT (bypass the page cache). A filesystem that refuses it gets "
         "buffered I/O and one warning."),
    INT("disk", "queue_depth", 1, 4096, "64", 0,
        "Payload I/Os in flight at most, plus as many 4 KiB header writes (each I/O carries a "
        "linked timeout, so the io_uring gets four times as many entries); more wait in order "
        "inside the tier, headers first."),
    BOOL("disk", "persist", "true",
         "Keep the data across restarts (the index is saved at stop, rebuilt at start); false "
         "= start empty and discard at stop."),
    INT("disk", "timeout_ms", 1, MAX_MS, "1000", 0,
        "Per-I/O deadline (io_uring linked timeout): a load past it is a miss, a store fails."),
    /* redis: hiredis async, optionally Redis Cluster */
    {.scope = "redis",
     .path = "addrs",
     .type = CONFIG_T_ADDRS,
     .def = "[\"127.0.0.1:6379\"]",
     .doc = "Server addresses; with cluster, the seed nodes."},
    BOOL("redis", "cluster", "false", "Talk Redis Cluster (follow MOVED/ASK)."),
    STR("redis", "password", "", "AUTH password; \"\" = none."),
    STR("redis", "username", "", "AUTH user name (ACL); \"\" = default user."),
    STR("redis", "namespace", "kvact", "Prefix of every key the tier writes."),
    INT("redis", "pipeline", 1, 65536, "64", 0, "Commands in flight per connection."),
    INT("redis", "connections", 1, 64, "4", 0,
        "Connections per server (per master with cluster); a key always uses the same one, "
        "so its operations keep their order."),
    INT("redis", "timeout_ms", 1, MAX_MS, "1000", 0, "Per-command timeout."),
    INT("redis", "capacity_bytes", 0, I64MAX, "0", 0,
        "Bytes the tier may use; 0 = no limit of its own (the server's maxmemory)."),
    /* gpu */
    {.path = "gpu.devices",
     .type = CONFIG_T_DEVICES,
     .min = 0,
     .max = 1023,
     .def = "all",
     .doc = "CUDA devices to serve: \"all\" or an array of ordinals."},
    INT(NULL, "gpu.streams", 1, 64, "2", 0,
        "CUDA streams per device; copy threads of the host device (KVA_DEVICE_HOST)."),
    /* multi-process mode (docs/multiprocess.md) */
    STR(NULL, "server.socket", "",
        "Serve engine processes on this Unix socket (kvactd sets it); \"\" = embedded only."),
    INT(NULL, "server.socket_mode", 0, 511, "384", 0,
        "File mode of the socket, as a number (384 = 0600)."),
    INT(NULL, "server.max_clients", 1, 4096, "64", 0, "Connections served at once."),
    INT(NULL, "server.hello_timeout_ms", 1, MAX_MS, "5000", 0,
        "The longest a new connection may take to say hello (a client says it as soon as it "
        "connects); one that has not by then is told why and closed, so that connections "
        "that never say hello cannot hold every server.max_clients slot."),
    {.path = "server.allowed_uids",
     .type = CONFIG_T_INTS,
     .min = 0,
     .max = 4294967294,
     .def = "[]",
     .doc = "Peer uids accepted besides the daemon's own (checked with SO_PEERCRED); "
            "server.allowed_groups admits more."},
    {.path = "server.allowed_groups",
     .type = CONFIG_T_STRS,
     .min = 1,
     .max = 255, /* LOGIN_NAME_MAX less its NUL: longer than any name getgrnam finds */
     .def = "[]",
     .doc = "Names of groups whose members are accepted too: a peer whose gid (SO_PEERCRED) or "
            "one of whose supplementary groups (SO_PEERGROUPS) is one of them. Looked up once, "
            "at start; a name no group has stops the start."},
    STR(NULL, "server.metrics_addr", "",
        "Serve Prometheus metrics over HTTP at host:port (e.g. \"127.0.0.1:9464\"); \"\" = off. "
        "Anyone who can reach the port reads the page, which lists the clients' pids and uids "
        "(every local user, on 127.0.0.1): see docs/multiprocess.md."),
    INT(NULL, "server.metrics_max_connections", 1, 4096, "64", 0,
        "Metrics connections served at once; more wait in the listen backlog."),
    INT(NULL, "server.metrics_max_connections_per_ip", 0, 4096, "8", 0,
        "Metrics connections from one IP address at once; more are closed at once. 0 = no "
        "limit. Every 127.x.y.z is another address, so this keeps remote peers from taking "
        "every connection, not local users."),
    INT(NULL, "server.metrics_timeout_ms", 1, MAX_MS, "3000", 0,
        "The longest a metrics connection may take to send a request and read its answer, "
        "from its accept or its previous answer; it is closed then, so a peer that sends "
        "nothing, or trickles a request byte by byte, holds a connection no longer."),
    INT(NULL, "server.shutdown_flush_ms", 0, MAX_MS, "10000", 0,
        "At SIGTERM, the longest kvactd waits for pending L1->L2 stores."),
    STR(NULL, "client.socket", "",
        "Use the kvactd on this Unix socket instead of storage actors of this process."),
    INT(NULL, "client.timeout_ms", 1, MAX_MS, "5000", 0,
        "The longest a storage call waits for the daemon."),
};

size_t config_schema_count(void) {
  return sizeof keys / sizeof keys[0];
}

const config_key *config_schema_at(size_t i) {
  return i < config_schema_count() ? &keys[i] : NULL;
}

static int same_scope(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return strcmp(a, b) == 0;
}

static int same_name(const char *name, const char *s, size_t len) {
  return strlen(name) == len && (len == 0 || memcmp(name, s, len) == 0);
}

const config_key *config_schema_find(const char *scope, const char *path, size_t len) {
  for (size_t i = 0; i < config_schema_count(); i++)
    if (same_scope(keys[i].scope, scope) && same_name(keys[i].path, path, len)) return &keys[i];
  return NULL;
}

const config_key *config_schema_tier_key(const char *type, const char *key, size_t klen) {
  const config_key *k = config_schema_find("*", key, klen);
  return k ? k : config_schema_find(type, key, klen);
}

int config_schema_is_section(const char *name, size_t len) {
  for (size_t i = 0; i < config_schema_count(); i++) {
    const char *p = keys[i].path;
    if (!keys[i].scope && strncmp(p, name, len) == 0 && p[len] == '.' && !memchr(name, 0, len))
      return 1;
  }
  return 0;
}

int config_schema_is_tier_type(const char *type, size_t len) {
  for (size_t i = 0; i < config_schema_count(); i++) {
    const char *s = keys[i].scope;
    if (s && strcmp(s, "*") != 0 && same_name(s, type, len)) return 1;
  }
  return 0;
}

int config_schema_choice(const config_key *k, const char *s, size_t len) {
  const char *c = k->choices;
  while (c && *c) {
    size_t n = strcspn(c, " ");
    if (n == len && memcmp(c, s, len) == 0) return 1;
    c += n;
    c += strspn(c, " ");
  }
  return 0;
}

void config_schema_choices(const config_key *k, char *buf, size_t cap) {
  size_t o = 0;
  const char *c = k->choices;
  if (cap == 0) return;
  for (; *c && o + 3 < cap; c++) {
    if (*c == ' ') {
      buf[o++] = ',';
      buf[o++] = ' ';
    } else
      buf[o++] = *c;
  }
  buf[o] = '\0';
}
