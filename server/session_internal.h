/*
 * session_internal.h — what the files of one kvactd session share:
 *
 *   session.c           the actor: slots, frames from the client, replies
 *   session_requests.c  requests to the L1 manager and the control threads,
 *                       and what their answers tell the ledger
 *   session_close.c     the end of a connection: the ledger given back
 */
#ifndef KVA_SERVER_SESSION_INTERNAL_H
#define KVA_SERVER_SESSION_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "l1/l1_manager.h"
#include "l1/pool.h"
#include "server/ledger.h"
#include "server/server_internal.h"
#include "wire/sock.h"

#define MAX_BUSY 4096u               /* requests of one client in flight */
#define OUT_LIMIT ((size_t)64 << 20) /* replies queued for a client that does not read */

enum { SL_FREE, SL_L1, SL_CTL, SL_RELEASE };

/* One request of the client in flight (or one release of ours). */
typedef struct slot {
  uint32_t index; /* in the session's slots: the tag of its messages */
  uint32_t state;
  uint16_t ptype;
  uint64_t id; /* the client's */
  uint64_t t0_ns;
  l1_req req;
  kva_layout layout;
  kva_key *keys; /* the client's keys (n_client), then a sub-batch's */
  kva_key *sub;
  uint32_t n_client, readers, flag;
  int *status, *sub_status;
  kva_buf *bufs;
  uint64_t *ids;
  uint32_t *pos;
  uint8_t *held; /* READ: held[i] = this client holds a read lock of keys[i] */
  size_t keys_cap, sub_cap, status_cap, sub_status_cap, bufs_cap, ids_cap, pos_cap, held_cap;
  kva_layout *layouts; /* READ with PROTO_READ_LAYOUTS: each object's (grown for it alone) */
  size_t layouts_cap;
  ctl_job job;
  char *text;
  kva_l2_node_stats *nodes; /* TIER_NODES' answers, nodes_room of them */
  size_t nodes_room;
} slot;

struct srv_session {
  srv_session *next;
  server *sv;
  kva_actor *self;
  int fd;
  int pidfd; /* the peer process (pidfd_open at accept), or -1 */
  pid_t pid;
  uid_t uid;
  wire_buf in, out;
  bool welcomed, closing;
  bool idle;       /* no hello yet: counted in sv->nidle until its welcome or end */
  int hello_timer; /* the hello deadline's timer, or -1 */
  bool held;       /* closed in disorder with its process alive: the ledger waits for its exit */
  slot **slots;
  size_t nslots, slots_cap;
  uint32_t *free_ids;
  size_t nfree, free_cap;
  uint32_t busy, reads_busy; /* slots in flight; of them, READs */
  bool releasing;            /* a release of the ledger is in flight */
  ledger led;
  uint64_t requests;            /* atomic */
  uint64_t wl, rl, pins;        /* atomic copies of the ledger's totals */
  uint64_t rel_w, rel_r, rel_p; /* given back at close */
  char why[160];
};

const pool *pool_of(const srv_session *ss);
/* The ledger's totals where kvinspect and the metrics read them. */
void publish_totals(srv_session *ss);

/* Slots: take one (NULL at MAX_BUSY or out of memory), give it back, make
 * room for n keys in each of its arrays. */
slot *slot_take(srv_session *ss);
void slot_put(srv_session *ss, slot *s);
bool slot_room(slot *s, size_t n);

/* Replies to the client (nothing once the socket is closed). */
void send_frame(srv_session *ss, const proto_rep *r, uint64_t id);
void reply_result(srv_session *ss, uint16_t type, uint64_t id, int result);
/* The spans of s->bufs[0..n) in the pool (ok: else n empty spans). */
proto_span *spans_of(srv_session *ss, slot *s, uint32_t n, bool ok);

/* The hello deadline's timer cancelled (welcomed or closing). */
void hello_done(srv_session *ss);

/* session_requests.c */
bool is_ctl(uint16_t type);
bool lookup_starts_in_l1(const kva_storage *st, const proto_req *q);
void send_l1(srv_session *ss, slot *s, uint32_t type);
void start_l1(srv_session *ss, slot *s, const proto_req *q);
void start_ctl(srv_session *ss, slot *s, const proto_req *q);
void on_l1_reply(srv_session *ss, slot *s);
void on_ctl_done(srv_session *ss, slot *s);

/* session_close.c */
void close_conn_as(srv_session *ss, const char *why, bool orderly);
void close_conn(srv_session *ss, const char *why); /* in disorder */
void unhold(srv_session *ss);
void release_step(srv_session *ss);

#endif
