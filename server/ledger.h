/*
 * ledger.h — the locks one client connection holds in the daemon
 * (docs/invariants.md I-MP-1): per key, its write reservation (by object
 * id), its read locks and its pins. The session updates it from every
 * reply and consults it before releasing anything on the client's behalf,
 * so a client can release only what it took; when the connection ends,
 * the session gives back everything still in it.
 *
 * An open-addressing table on kva_key_hash with backward-shift deletion:
 * no tombstones, no allocation but growth.
 */
#ifndef KVA_SERVER_LEDGER_H
#define KVA_SERVER_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

typedef struct ledger_entry {
  kva_key key;
  uint64_t write_id; /* 0 = no reservation */
  uint32_t reads, pins;
  bool used;
} ledger_entry;

typedef struct ledger {
  ledger_entry *e;
  size_t cap, n;                /* slots (a power of two), entries in use */
  uint64_t writes, reads, pins; /* totals over the entries */
} ledger;

void ledger_free(ledger *l);
/* The entry of k, or NULL. */
ledger_entry *ledger_find(ledger *l, const kva_key *k);
/* The entry of k, added empty if missing; NULL when out of memory. */
ledger_entry *ledger_get(ledger *l, const kva_key *k);
/* Changes an entry's counts (keeping the totals) and drops it once empty.
 * The entry pointer is invalid after a call that dropped it. */
void ledger_set_write(ledger *l, ledger_entry *e, uint64_t id);
void ledger_add_reads(ledger *l, ledger_entry *e, int64_t delta);
void ledger_add_pins(ledger *l, ledger_entry *e, int64_t delta);
/* Entries in slot order: for (i = 0; (e = ledger_next(l, &i)); ). Do not
 * drop entries while iterating. */
ledger_entry *ledger_next(ledger *l, size_t *i);

#endif
