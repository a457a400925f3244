/*
 * disk_hasher.c — the "disk_hasher" actor: payload checksums (xxh3-64) on
 * another worker than its disk adapter's, and the adapter's side of its
 * jobs (disk_internal.h).
 *
 * Accepts                              | Sends
 * -------------------------------------+-----------------------------------
 * DISK_HASH (disk_hash_job)            | DISK_HASHED to msg->from: the same
 *                                      |   job with sum filled, same tag
 *
 * The adapter keeps the I/O going (reaping, refilling the ring, headers)
 * and sums only part of the payloads itself (disk_hash_share); the hasher
 * sums the rest meanwhile on a second core. A STORE key's header goes out
 * once its payload write completed and its sum is known, a LOAD key is
 * verified once its read completed and the sum of the bytes read into L1
 * is known, in whichever order the two happen.
 *
 * Invariants:
 *  - the hasher holds no state and touches only the job's bytes: L1 memory
 *    the sender keeps locked until the adapter replies, and the adapter
 *    neither replies to nor reuses a task while a job of it is out
 *    (disk_task.jobs);
 *  - a reply names its task by pointer (tasks live until the adapter is
 *    freed) and generation: one for a task since reused is ignored;
 *  - the hasher is spawned after its adapter, so it stops first (newest
 *    first, each fully): every job sent before then is answered into the
 *    adapter's mailbox, later sends fail and the adapter sums those keys
 *    itself. Should the adapter stop alone, its on_stop sums what is out
 *    itself (disk_hash_settle) before waiting for its I/O;
 *  - deterministic mode spawns no hasher: every sum is computed inside the
 *    adapter's message, as replays need.
 */
#include <string.h>

#include "l2/adapters/disk/disk_internal.h"

/* Every other key goes to the hasher, so both cores sum in step (all of
 * them measured slower on stores: the two cores then do not share). */
#define DISK_HASH_EVERY 2
/* Jobs out at once, all tasks: far below a mailbox's capacity, so a large
 * batch never overflows the hasher's and mutes the adapter. */
#define DISK_HASH_MAX_OUT 64

static void hasher_receive(kva_actor *self, void *state, const kva_msg *msg) {
  (void)state;
  disk_hash_job job;
  if (msg->type != DISK_HASH || msg->len != sizeof(job) || !msg->from) {
    kva_log(KVA_LOG_WARN, "disk_hasher: unexpected message %u of %u bytes ignored", msg->type,
            msg->len);
    return;
  }
  memcpy(&job, msg->data, sizeof(job));
  job.sum = object_payload_sum(job.ptr, job.len);
  kva_send(msg->from, DISK_HASHED, &job, sizeof(job), self, msg->tag); /* ESHUTDOWN: gone */
}

kva_actor *disk_hasher_spawn(kva_runtime *rt) {
  kva_behavior b = {.name = "disk_hasher", .receive = hasher_receive};
  return kva_spawn(rt, &b, NULL, NULL);
}

/* ---- the adapter's side ------------------------------------------------- */

bool disk_hash_share(const disk *d, size_t i) {
  return d->hasher && !d->hasher_stopped && i % DISK_HASH_EVERY == DISK_HASH_EVERY - 1;
}

bool disk_hash_send(disk *d, disk_task *t, size_t i, const void *ptr, uint64_t len) {
  if (!d->hasher || d->hasher_stopped || d->hash_out >= DISK_HASH_MAX_OUT) return false;
  disk_hash_job job = {.task = t, .gen = t->gen, .key = (uint32_t)i, .ptr = ptr, .len = len};
  if (kva_send(d->hasher, DISK_HASH, &job, sizeof(job), d->self, 0) != KVA_OK) {
    d->hasher_stopped = true; /* the jobs sent before are still answered */
    return false;
  }
  d->hash_out++;
  t->jobs++;
  t->k[i].job = true;
  return true;
}

/* The job's sum is known: the key moves on, as STORE or LOAD. */
static void job_done(disk *d, disk_task *t, size_t i, uint64_t sum) {
  d->hash_out--;
  t->jobs--;
  t->k[i].job = false;
  t->k[i].sum = sum;
  t->k[i].hashed = true;
  if (t->type == KVA_L2_STORE)
    disk_store_hashed(d, t, i);
  else
    disk_load_hashed(d, t, i);
}

void disk_hash_received(disk *d, const kva_msg *msg) {
  disk_hash_job job;
  if (msg->len != sizeof(job) || !msg->from || msg->from != d->hasher) {
    kva_log(KVA_LOG_WARN, "%s: DISK_HASHED from a stranger ignored", d->cfg.name);
    return;
  }
  memcpy(&job, msg->data, sizeof(job));
  disk_task *t = job.task;
  if (!t->req || t->gen != job.gen || job.key >= t->req->n || !t->k[job.key].job)
    return; /* stale: the task was settled at stop and reused */
  job_done(d, t, job.key, job.sum);
}

void disk_hash_settle(disk *d) {
  d->hasher_stopped = true;
  for (disk_task *t = d->live, *next; t; t = next) {
    next = t->live_next; /* the last job_done of t may answer and unlink it */
    const kva_l2_req *r = t->req;
    for (size_t i = 0, n = r->n; t->jobs && i < n; i++)
      if (t->k[i].job) job_done(d, t, i, object_payload_sum(r->bufs[i].ptr, r->bufs[i].len));
  }
}
