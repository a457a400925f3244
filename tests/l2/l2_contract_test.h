/*
 * l2_contract_test.h — the harness of the L2 adapter contract suite
 * (l2_contract_test*.c): one adapter, picked by the test's argument from
 * a table of l2 config entries and capabilities, started in a storage
 * runtime; requests go to its actor with kva_send from kva_ports of the
 * test's own, as the controllers send them, and every reply is checked
 * against kvact.h's "L2 adapters: the message protocol": KVA_L2_DONE, to
 * the sender, the same tag, the same pointer, exactly once. Where an
 * adapter may choose (capacity, what its counters count), its row of
 * capabilities says what it does, and the cases expect exactly that.
 *
 * Objects are CT_LEN bytes of layout u8[CT_LEN] unless a case says
 * otherwise; the bytes of key id, version v are l2_pattern(id, v, o), so a
 * loaded buffer tells which key and version it holds.
 */
#ifndef KVA_TESTS_L2_CONTRACT_TEST_H
#define KVA_TESTS_L2_CONTRACT_TEST_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

#define CT_LEN 10000u   /* object bytes: two whole 4 KiB blocks and a part */
#define CT_MAXN 64u     /* keys per helper request (masks are uint64_t) */
#define CT_WAIT_MS 5000 /* how long a reply may take (sanitizer runs included) */

/* What one adapter does where the protocol leaves it a choice, as its own
 * header documents it. Every difference between adapters is a field here,
 * with a note the suite prints. */
typedef struct ct_caps {
  /* CT_LEN-byte objects the configured tier holds; 0 = the adapter does
   * not bound what it holds (the capacity cases do not apply). */
  uint32_t capacity;
  /* When full: true = a STORE evicts unlocked objects to make room;
   * false = the STORE fails and nothing changes. */
  bool evicts;
  const char *capacity_note; /* why capacity is 0 or evicts false, or NULL */
  /* kva_l2_stats.objects / bytes: true = held now (kvact.h); false = what
   * the adapter stored since start (a replaced key counts again). */
  bool stats_held_now;
  const char *stats_note; /* why stats_held_now is false, or NULL */
} ct_caps;

typedef struct ct_adapter {
  const char *name; /* the test's argument */
  /* The l2 entry as kva_config_set(c, "l2", ...) takes it; "%d" is the
   * port of a redis-server started for the test when redis is set. */
  const char *l2_json;
  bool redis;
  int (*registers)(void); /* run before the start (a plug-in's kva_l2_register), or NULL */
  ct_caps caps;
} ct_adapter;

typedef struct ct {
  kva_runtime *rt;
  kva_storage *s;
  kva_actor *a; /* the adapter actor */
  kva_port *port;
  uint64_t tag; /* the last tag sent from port */
  const ct_adapter *ad;
} ct;

/* The adapter named by the test's argument, or NULL. */
const ct_adapter *ct_adapter_of_arg(void);

/* A runtime with the adapter as its only tier and a port to talk to it. */
ct ct_open(void);
/* Checks that nothing is left (no reply still coming to the port, no lock
 * held), then shuts down (and stops the redis-server). */
void ct_close(ct *c);

/* ---- messages ------------------------------------------------------------ */

/* Sends r (its pointer) from port with a tag of the test's choice. */
void ct_send_from(ct *c, kva_port *port, uint32_t type, kva_l2_req *r, uint64_t tag);
/* ct_send_from c->port with the next tag; returns the tag. */
uint64_t ct_send(ct *c, uint32_t type, kva_l2_req *r);
/* The next message on port, which must be a KVA_L2_DONE carrying one
 * pointer: the pointer, its tag in *tag. */
kva_l2_req *ct_reply_on(kva_port *port, uint64_t *tag);
/* Send, then the next message must answer it (same tag, same pointer);
 * returns r->result. */
int ct_call(ct *c, uint32_t type, kva_l2_req *r);
/* Nothing arrives on port: a STATS sent now is answered, and nothing came
 * before its reply or comes in the moments after it. */
void ct_expect_quiet(ct *c, kva_port *port);

/* ---- objects ------------------------------------------------------------- */

/* n keys fixture_key(ids[i]) with buffers of len bytes each followed by
 * guard bytes, and bits of exactly (n + 7) / 8 bytes (heap, so a write
 * past them is caught under ASan). */
typedef struct ct_objs {
  size_t n, len;
  kva_key *keys;
  kva_buf *bufs;
  uint8_t *bits;
  uint64_t *ids;
  uint32_t v; /* the version the buffers were filled with */
  kva_layout layout;
  kva_key *keys_copy; /* what was sent, to tell that the adapter kept it */
  kva_buf *bufs_copy;
} ct_objs;

/* Keys [first, first + n), layout u8[CT_LEN], buffers of version v. */
ct_objs *ct_objs_new(uint64_t first, size_t n, uint32_t v);
/* The same with its own layout, buffer length and key ids. */
ct_objs *ct_objs_make(const uint64_t *ids, size_t n, const kva_layout *l, size_t len, uint32_t v);
void ct_objs_free(ct_objs *o);
/* Buffers to load into: every byte 0xee (guards included). */
void ct_objs_blank(ct_objs *o);
uint64_t ct_bits_mask(const ct_objs *o); /* bits as a mask (n <= 64) */

/* STORE of o (version v buffers); checks that the adapter changed neither
 * the keys nor the buffers; returns the result. */
int ct_store_objs(ct *c, ct_objs *o);
int ct_store(ct *c, uint64_t first, size_t n, uint32_t v);
/* LOOKUP_AND_LOCK of o's keys (prev as given); returns the mask found. */
uint64_t ct_lock_objs(ct *c, ct_objs *o, const kva_key *prev);
uint64_t ct_lock(ct *c, uint64_t first, size_t n);
/* LOAD into o's blank buffers; asserts result KVA_OK, that every loaded
 * buffer holds version v of its key exactly and that no guard byte
 * changed; returns the mask loaded. */
uint64_t ct_load_objs(ct *c, ct_objs *o, uint32_t v);
uint64_t ct_load(ct *c, uint64_t first, size_t n, uint32_t v);
/* UNLOCK of o's keys (or [first, first + n)), fire and forget. */
void ct_unlock_objs(ct *c, const ct_objs *o);
void ct_unlock(ct *c, uint64_t first, size_t n);
/* Lock, load (version v), unlock: the mask of keys that came back. */
uint64_t ct_read_back(ct *c, uint64_t first, size_t n, uint32_t v);
/* STATS, filled over 0xff bytes; asserts result KVA_OK. */
kva_l2_stats ct_stats(ct *c);
/* Asserts two snapshots are equal, field by field. */
void ct_expect_same_stats(const kva_l2_stats *a, const kva_l2_stats *b, const char *what);

/* The checks ct_store_objs and ct_load_objs make, for requests sent by
 * hand: the keys and buffers of a STORE are as the test wrote them
 * (version o->v); a LOAD's set bits name buffers holding version v of
 * their keys exactly, no bit past n is set, and no guard byte changed.
 * The latter returns the mask loaded. */
void ct_check_store_intact(const ct_objs *o);
uint64_t ct_check_loaded(const ct_objs *o, uint32_t v);

/* Prints, in the test log, how this adapter differs from the others (its
 * caps notes) and which cases do not apply: the suite never skips a case
 * silently. */
void ct_print_differences(const ct_adapter *ad);

TCase *l2_contract_replies_tcase(void);
TCase *l2_contract_data_tcase(void);
TCase *l2_contract_locks_tcase(void);
TCase *l2_contract_capacity_tcase(void);
TCase *l2_contract_malformed_tcase(void);

#endif
