/*
 * protocol.h — the frames kvactd and its clients exchange over the Unix
 * socket (docs/multiprocess.md "Protocol"). Pure functions: no I/O, no
 * allocation, no global state, so the decoders can be fuzzed
 * (tests/fuzz/fuzz_protocol.c), and the client (client/) and the daemon
 * (server/) share them.
 *
 * Every frame is a 24-byte header followed by `len` payload bytes, all
 * integers little endian:
 *
 *   u32 magic   PROTO_MAGIC ("KVAD")
 *   u16 version PROTO_VERSION (the header and P_REFUSED never change)
 *   u16 type    P_* (a reply: the request's type | P_REPLY)
 *   u32 len     payload bytes, <= PROTO_MAX_PAYLOAD (a reply's:
 *               PROTO_MAX_REPLY_PAYLOAD)
 *   u32 flags   0 (nonzero: refused)
 *   u64 id      chosen by the client; its reply carries the same id
 *
 * A key is encoded in PROTO_KEY_BYTES bytes: model[64] (NUL-terminated,
 * as kva_key), u32 kv_rank, u32 group, u8 hash_len, hash[32]. A layout in
 * PROTO_LAYOUT_BYTES: u32 ntensors, then 4 x (u32 ndim, u32 dtype,
 * u64 shape[6]). A tier name is char[32], NUL-terminated.
 *
 * Request payloads (keys[n] always last):
 *   P_HELLO          u32 pid, u32 reserved (0; nonzero: refused)
 *   P_RESERVE_WRITE  u32 n, u32 mode, layout, keys
 *   P_FINISH_WRITE   u32 n, keys
 *   P_ABORT_WRITE    u32 n, keys
 *   P_DELETE         u32 n, u32 force, keys
 *   P_TOUCH          u32 n, keys
 *   P_CLEAR          u32 force
 *   P_PREFETCH       u32 n, u32 readers (1..128), u32 flags (bit 0 has_layout,
 *                    bit 1 PROTO_PREFETCH_AS_PLANNED), layout, keys
 *                    (the layout is always sent; checked only when has_layout)
 *   P_READ           u32 n, u32 flags (bit 0 PROTO_READ_LAYOUTS: the reply
 *                    carries each object's layout), keys
 *   P_FINISH_READ    u32 n, u32 readers (1..128), keys
 *   P_LOOKUP         u32 n, u32 pin, keys
 *   P_UNPIN          u32 n, keys
 *   P_MEMCHECK       u32 report_len (<= PROTO_MAX_TEXT), u32 callers_only (0/1)
 *   P_STATS          (empty)
 *   P_FLUSH          i32 timeout_ms (< 0: forever)
 *   P_FREEZE         u32 on
 *   P_SET_BYPASS     tier, u32 on
 *   P_BYPASSED       tier
 *   P_L2_CONTAINS    tier, key
 *   P_TIER_STATS     tier
 *   P_BYE            (empty; never answered: the client closes after it)
 *   P_TIER_KEYS      tier
 *   P_TIER_NODES     tier, u32 cap (0..PROTO_MAX_NODES: entries wanted)
 *
 * Reply payloads (type | P_REPLY) start with i32 result (the call's
 * return value). A negative result ends the payload, except for MEMCHECK,
 * whose counts and report follow whatever the result; otherwise:
 *   P_WELCOME (reply to P_HELLO)  u64 pool_bytes, u32 pid, u32 max_keys;
 *                     the pool's memfd travels with it (SCM_RIGHTS)
 *   RESERVE_WRITE     u32 n, i32 status[n], span[n]
 *   FINISH_WRITE, ABORT_WRITE, DELETE   u32 n, i32 status[n]
 *   PREFETCH          u64 hits
 *   READ              u32 n, span[n], then, when the request asked for
 *                     layouts, u32 runs and runs x (u32 count >= 1, layout):
 *                     the keys' layouts in key order, consecutive keys of
 *                     one layout sent as one run (no two adjacent runs
 *                     alike). runs is 0 when no span has bytes (a read
 *                     that failed); otherwise the counts add up to n and
 *                     each span's len is its layout's kva_layout_bytes
 *   LOOKUP            u64 total, u32 ntiers (<= 8), ntiers x (tier name, u64 hits)
 *   MEMCHECK          the 5 u64 of kva_memcheck_report in declaration order,
 *                     u32 len (<= PROTO_MAX_TEXT), bytes (not terminated; a
 *                     NUL among them is refused)
 *   STATS             the 20 u64 fields of kva_storage_stats in declaration
 *                     order, i32 l1_pinned, i32 l1_numa_node,
 *                     u64 l2_skipped_slow_keys
 *   TIER_STATS        u64 stored_keys, stored_bytes, loaded_keys,
 *                     loaded_bytes, i32 bypassed, then the 10 u64 of
 *                     kva_l2_stats in declaration order, u64
 *                     skipped_slow_keys, queued_bytes, then the bits of
 *                     the doubles bytes_per_s, latency_s, u64
 *                     lookups_skipped
 *   TIER_KEYS         the 11 u64 of kva_l2_tier_keys in declaration order
 *   TIER_NODES        u32 nodes (the tier's servers, all of them), u32 count
 *                     (= min(nodes, the request's cap)), the bits of the
 *                     double map_age_s (>= 0, or -1: no map), then count x
 *                     (addr[272], NUL-terminated; i32 state, 0..2; u32
 *                     slots; the bits of the double failed_s, >= 0; u64
 *                     outages, failures, failed_cmds)
 *   every other reply: nothing more
 * A span is u64 offset, u64 len: where the object's bytes are in the pool
 * (offset 0, len 0 for a key without bytes).
 *
 * P_REFUSED (daemon -> client, instead of P_WELCOME, then the daemon closes):
 *   i32 code (a KVA_E*, < 0), u32 len (<= PROTO_MAX_TEXT), message bytes
 *   (as MEMCHECK's).
 * Its header and payload are the same in every protocol version, so a
 * client of another version can read why it was refused: proto_rep_get
 * decodes it whatever h->version.
 */
#ifndef KVA_WIRE_PROTOCOL_H
#define KVA_WIRE_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

#define PROTO_MAGIC 0x4441564bu      /* "KVAD" read as little-endian bytes */
#define PROTO_PREFETCH_AS_PLANNED 2u /* PREFETCH flag bit: kva_prefetch_opts' */
#define PROTO_READ_LAYOUTS 1u        /* READ flag bit: kva_read_prefetched_layouts */
/* 3: STATS and TIER_STATS carry the load plan's fields; PREFETCH's flag bit 1.
 * 4: TIER_KEYS, TIER_NODES; READ's flags and the layouts of its reply.
 * Versions must match: a daemon refuses a hello of another (P_REFUSED,
 * KVA_ENOTSUP), and the client's calls then answer KVA_ENOTSUP. */
#define PROTO_VERSION 4u
#define PROTO_HDR_BYTES 24u
#define PROTO_KEY_BYTES 105u
#define PROTO_LAYOUT_BYTES 228u /* 4 + 4 * (4 + 4 + 6 * 8) */
#define PROTO_TIER_BYTES 32u
#define PROTO_MAX_KEYS 65536u /* per request (a client splits nothing: larger is KVA_EINVAL) */
#define PROTO_MAX_TEXT 4096u
#define PROTO_MAX_NODES 1024u /* TIER_NODES entries per reply (a client asks no more) */
#define PROTO_NODE_ADDR_BYTES 272u
#define PROTO_MAX_PAYLOAD (PROTO_MAX_KEYS * PROTO_KEY_BYTES + 512u)
/* A reply may be larger: a READ that asked for layouts, no two consecutive
 * keys of one layout, sends a span, a count and a layout per key. */
#define PROTO_MAX_REPLY_PAYLOAD (PROTO_MAX_KEYS * (16u + 4u + PROTO_LAYOUT_BYTES) + 512u)

enum {
  P_HELLO = 1,
  P_RESERVE_WRITE,
  P_FINISH_WRITE,
  P_ABORT_WRITE,
  P_DELETE,
  P_TOUCH,
  P_CLEAR,
  P_PREFETCH,
  P_READ,
  P_FINISH_READ,
  P_LOOKUP,
  P_UNPIN,
  P_MEMCHECK,
  P_STATS,
  P_FLUSH,
  P_FREEZE,
  P_SET_BYPASS,
  P_BYPASSED,
  P_L2_CONTAINS,
  P_TIER_STATS,
  P_BYE,        /* the client is done: its connection ends in order (no reply) */
  P_TIER_KEYS,  /* from version 4 */
  P_TIER_NODES, /* from version 4 */
  P_TYPE_END,   /* requests are 1 .. P_TYPE_END - 1 */
  P_REFUSED = 0x7fff,
  P_REPLY = 0x8000,
  P_WELCOME = P_HELLO | P_REPLY,
};

typedef struct proto_hdr {
  uint16_t version, type;
  uint32_t len;
  uint64_t id;
} proto_hdr;

/* Decoder results: 0, or why the frame (and with it the connection) is
 * refused. PROTO_EVERSION still fills *h, so the daemon can answer a
 * P_HELLO of another version with P_REFUSED; nothing past the version is
 * checked then (another version's types and limits may differ): a client
 * reading on to a P_REFUSED bounds h->len itself (at most
 * 8 + PROTO_MAX_TEXT in every version). */
enum {
  PROTO_OK = 0,
  PROTO_EMAGIC = -1,   /* not a kvact frame: the peer speaks another protocol */
  PROTO_EVERSION = -2, /* a kvact frame of another protocol version */
  PROTO_EFRAME = -3,   /* bad length, flags, type, or payload */
};

/* ---- header ------------------------------------------------------------ */
/* Writes the header of a frame (version PROTO_VERSION) into b[0..24). */
void proto_hdr_put(uint8_t *b, uint16_t type, uint32_t len, uint64_t id);
/* Reads b[0..24): PROTO_OK, or one of the PROTO_E*; why (may be NULL)
 * gets a short reason (cut to whylen - 1 bytes, terminated). Checks magic,
 * version, flags, that type is a request, a reply of one, or P_REFUSED,
 * and len <= PROTO_MAX_PAYLOAD (a reply: PROTO_MAX_REPLY_PAYLOAD). *h is
 * left as it was after PROTO_EMAGIC. */
int proto_hdr_get(const uint8_t *b, proto_hdr *h, char *why, size_t whylen);

/* ---- requests ---------------------------------------------------------- */
typedef struct proto_req {
  uint16_t type;
  uint32_t n;          /* keys */
  uint32_t mode;       /* RESERVE_WRITE: a kva_write_mode */
  uint32_t flag;       /* DELETE/CLEAR force, LOOKUP pin, FREEZE/SET_BYPASS on,
                          PREFETCH has_layout, MEMCHECK callers_only, READ
                          PROTO_READ_LAYOUTS */
  uint32_t readers;    /* PREFETCH, FINISH_READ: 1..128 */
  uint32_t pid;        /* HELLO */
  uint32_t report_len; /* MEMCHECK */
  int32_t timeout_ms;  /* FLUSH */
  uint32_t cap;        /* TIER_NODES: entries wanted, 0..PROTO_MAX_NODES */
  kva_layout layout;   /* RESERVE_WRITE; PREFETCH when flag */
  char tier[PROTO_TIER_BYTES];
  const kva_key *keys; /* encode: n keys (L2_CONTAINS: 1, whatever n); decode:
                          the caller's key array (L2_CONTAINS: n = 1), or
                          NULL for a type without keys */
} proto_req;

/* Bytes of the frame (header included) that proto_req_put writes for r,
 * or 0 when r cannot be encoded (unknown type; where keys are sent, keys
 * NULL or n = 0 or > PROTO_MAX_KEYS). */
size_t proto_req_size(const proto_req *r);
/* Encodes r with id into buf (cap bytes): the frame's size, or 0 when it
 * does not fit or cannot be encoded. Keys are copied as they are (the
 * caller validated them). */
size_t proto_req_put(uint8_t *buf, size_t cap, const proto_req *r, uint64_t id);
/* Decodes the payload p[0..h->len) of request header h into *r (zeroed
 * first: the fields its type does not send are 0); the keys go to
 * keys[0..keys_cap) (keys_cap >= PROTO_MAX_KEYS suffices). Checks every
 * field: n in 1..PROTO_MAX_KEYS, against the payload length and keys_cap,
 * each key with kva_key_valid, layouts with kva_layout_bytes != 0, readers
 * in 1..128, mode a kva_write_mode, flags 0/1, report_len, HELLO's
 * reserved 0, TIER_NODES' cap <= PROTO_MAX_NODES, tier names
 * NUL-terminated, no trailing bytes. PROTO_OK, or
 * PROTO_EFRAME with why (*r and keys then hold whatever was decoded).
 * Bytes past a model's or tier name's NUL and past hash_len are kept as
 * sent, so a decoded request encodes back to the same bytes. */
int proto_req_get(const proto_hdr *h, const uint8_t *p, kva_key *keys, size_t keys_cap,
                  proto_req *r, char *why, size_t whylen);

/* ---- replies ----------------------------------------------------------- */
typedef struct proto_span {
  uint64_t off, len;
} proto_span;

typedef struct proto_rep {
  uint16_t type; /* the request's type (without P_REPLY) */
  int32_t result;
  uint32_t n;                    /* status/spans entries */
  int32_t *status;               /* RESERVE_WRITE, FINISH_WRITE, ABORT_WRITE, DELETE */
  proto_span *spans;             /* RESERVE_WRITE, READ */
  uint64_t hits;                 /* PREFETCH */
  uint64_t pool_bytes;           /* WELCOME */
  uint32_t pid, max_keys;        /* WELCOME */
  kva_tier_hits *lookup;         /* LOOKUP */
  kva_storage_stats *stats;      /* STATS */
  kva_l2_tier_stats *tier_stats; /* TIER_STATS */
  kva_l2_tier_keys *tier_keys;   /* TIER_KEYS */
  kva_memcheck_report *memcheck; /* MEMCHECK: encode reads it (NULL: zeros); decode
                                    fills it (NULL: skipped) */
  /* READ: layouts_asked is the request's PROTO_READ_LAYOUTS (the reply's
   * shape), layouts n entries (encode: read when a span has bytes;
   * decode: filled, all zero when the reply has no runs; NULL: checked
   * and skipped) */
  uint32_t layouts_asked;
  kva_layout *layouts;
  /* TIER_NODES: nodes_cap is the request's cap (<= PROTO_MAX_NODES), nodes
   * an array of that many (encode: the first min(nodes_n, nodes_cap) are
   * sent; decode: as many are filled, NULL: checked and skipped) */
  kva_l2_node_stats *nodes;
  uint32_t nodes_n, nodes_cap;
  double map_age_s;
  char *text;        /* MEMCHECK report, REFUSED message: encode reads
                        text_len bytes; decode copies up to text_cap - 1
                        bytes and a NUL (none when text_cap is 0) */
  uint32_t text_len; /* decode: the length sent, even when cut */
  uint32_t text_cap;
} proto_rep;

/* As proto_req_size/_put for a reply (type without P_REPLY; P_HELLO for
 * P_WELCOME; or P_REFUSED, whose result is the code). A negative result
 * encodes no per-type part (but MEMCHECK's text, and REFUSED's). 0 when r
 * cannot be encoded: unknown type, P_REFUSED with result >= 0, n >
 * PROTO_MAX_KEYS, NULL status/spans with n > 0, NULL layouts where a
 * READ that asked for them has a span with bytes, NULL lookup/stats/
 * tier_stats/tier_keys where sent, ntiers > 8, nodes_cap >
 * PROTO_MAX_NODES, NULL nodes with entries to send, text_len >
 * PROTO_MAX_TEXT, NULL text with text_len > 0. */
size_t proto_rep_size(const proto_rep *r);
size_t proto_rep_put(uint8_t *buf, size_t cap, const proto_rep *r, uint64_t id);
/* Decodes the payload of reply header h into *r, whose pointers the caller
 * set for the reply it expects: r->type is the request's type (PROTO_EFRAME
 * if h->type is neither that | P_REPLY nor P_REFUSED; after P_REFUSED,
 * r->type is P_REFUSED), r->n the number of keys it sent (a reply with
 * another n is refused), status/spans arrays of n entries, lookup/stats/
 * tier_stats/tier_keys/text where the type has them, nodes and nodes_cap
 * for TIER_NODES (a count other than min(nodes, nodes_cap) is refused),
 * layouts_asked and layouts for READ. Spans are checked against
 * pool_bytes: off + len <= pool_bytes without overflow, and off 0 when
 * len is 0; READ's layout runs as protocol.h's READ says (each layout
 * valid, the counts, the spans' lengths); LOOKUP's tier names must be
 * NUL-terminated (its entries past ntiers are zeroed); TIER_NODES'
 * addresses NUL-terminated, states KVA_L2_NODE_*, failed_s a number >= 0,
 * map_age_s one >= 0 or -1. A payload longer or shorter than its type and result
 * call for is PROTO_EFRAME; with a negative result the caller's outputs are
 * left untouched (as in-process), but for the text. r->type and r->result
 * are set on PROTO_OK only; after PROTO_EFRAME the outputs hold whatever
 * was decoded. */
int proto_rep_get(const proto_hdr *h, const uint8_t *p, uint64_t pool_bytes, proto_rep *r,
                  char *why, size_t whylen);

#endif
