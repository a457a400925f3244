/*
 * plugin_adapter.c — "tiny", a user's own L2 adapter (plugin_adapter.h).
 * Nothing here includes kvact's internal headers: it is what a user
 * writes from kvact.h and the README alone.
 *
 * Accepts                              | Sends
 * -------------------------------------+-----------------------------------
 * KVA_L2_STORE, KVA_L2_LOOKUP_AND_LOCK,| KVA_L2_DONE to msg->from, same tag
 *   KVA_L2_LOAD, KVA_L2_STATS          |   and pointer, at once
 *   (kva_l2_req *)                     |
 * KVA_L2_UNLOCK (kva_key[n])           |
 *
 * Invariants: a locked key is never replaced (the table never evicts);
 * UNLOCK of an unknown or unlocked key is ignored; a malformed request is
 * answered at once with KVA_EINVAL and a warning, as the built-in
 * adapters answer it (kvact.h's adapter kit: kva_l2_req_problem, kva_log);
 * a LOAD of another layout than the one stored is a miss
 * (kva_layout_fingerprint).
 */
#include "tests/support/plugin_adapter.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tiny_obj {
  kva_key key;
  uint64_t hash; /* kva_key_hash(&key): compared before the key */
  uint64_t fp;   /* kva_layout_fingerprint of the layout stored */
  void *data;
  size_t len;
  uint32_t locks;
  int used;
} tiny_obj;

typedef struct tiny {
  tiny_obj o[PLUGIN_TINY_MAX];
  kva_l2_stats st; /* the counters since start; objects, bytes, locks counted at STATS */
  char name[32];   /* the tier's, for its warnings */
} tiny;

static tiny_obj *tiny_find(tiny *t, const kva_key *k) {
  uint64_t h = kva_key_hash(k);
  for (int i = 0; i < PLUGIN_TINY_MAX; i++)
    if (t->o[i].used && t->o[i].hash == h && kva_key_equal(&t->o[i].key, k)) return &t->o[i];
  return NULL;
}

static int tiny_store(tiny *t, const kva_l2_req *r) {
  for (size_t i = 0; i < r->n; i++) {
    tiny_obj *o = tiny_find(t, &r->keys[i]);
    if (o && o->locks) return KVA_EAGAIN;
    for (int j = 0; !o && j < PLUGIN_TINY_MAX; j++)
      if (!t->o[j].used) o = &t->o[j];
    if (!o) return KVA_ENOMEM;
    void *d = malloc(r->bufs[i].len);
    if (!d) return KVA_ENOMEM;
    memcpy(d, r->bufs[i].ptr, r->bufs[i].len);
    free(o->data);
    *o = (tiny_obj){.key = r->keys[i],
                    .hash = kva_key_hash(&r->keys[i]),
                    .fp = kva_layout_fingerprint(r->layout),
                    .data = d,
                    .len = r->bufs[i].len,
                    .used = 1};
  }
  return KVA_OK;
}

static void tiny_load(tiny *t, kva_l2_req *r) {
  uint64_t fp = kva_layout_fingerprint(r->layout);
  for (size_t i = 0; i < r->n; i++) {
    tiny_obj *o = tiny_find(t, &r->keys[i]);
    if (!o || o->len != r->bufs[i].len || o->fp != fp) { /* a miss, never wrong bytes */
      t->st.load_failures++;
      continue;
    }
    memcpy(r->bufs[i].ptr, o->data, o->len);
    kva_bit_set(r->bits, i);
  }
}

/* kvact.h's kva_l2_stats: tasks for stores, keys for lookups and loads. */
static void tiny_stats(tiny *t, kva_l2_req *r) {
  *r->stats = t->st;
  for (int i = 0; i < PLUGIN_TINY_MAX; i++) {
    if (!t->o[i].used) continue;
    r->stats->objects++;
    r->stats->bytes += t->o[i].len;
    r->stats->keys_locked += t->o[i].locks;
  }
}

/* The keys are copied out: the payload need not be aligned. */
static void tiny_unlock(tiny *t, const kva_msg *m) {
  for (uint32_t off = 0; off + sizeof(kva_key) <= m->len; off += sizeof(kva_key)) {
    kva_key k;
    memcpy(&k, (const char *)m->data + off, sizeof(k));
    tiny_obj *o = tiny_find(t, &k);
    if (o && o->locks) o->locks--;
  }
}

static unsigned unguarded; /* atomic: turns on a thread without SIGPIPE blocked */

unsigned plugin_tiny_unguarded_turns(void) {
  return __atomic_load_n(&unguarded, __ATOMIC_RELAXED);
}

static void tiny_receive(kva_actor *self, void *state, const kva_msg *m) {
  tiny *t = state;
  /* kvact.h: outside deterministic mode an adapter runs on the runtime's
   * threads, never on an engine's that lends itself to its own request */
  if (!kva_thread_sigpipe_blocked() && !kva_runtime_deterministic(kva_actor_runtime(self)))
    __atomic_add_fetch(&unguarded, 1, __ATOMIC_RELAXED);
  if (m->type == KVA_L2_UNLOCK) {
    tiny_unlock(t, m);
    return;
  }
  kva_l2_req *r = kva_l2_req_of(m);
  const char *bad = kva_l2_req_problem(m->type, r);
  if (bad) {
    kva_log(KVA_LOG_WARN, "%s: request %u refused: %s", t->name, m->type, bad);
    if (r) r->result = KVA_EINVAL;
  } else if (m->type == KVA_L2_STORE) {
    r->result = tiny_store(t, r);
    t->st.stores++;
    t->st.store_failures += r->result != KVA_OK;
  } else if (m->type == KVA_L2_LOOKUP_AND_LOCK) {
    r->result = KVA_OK;
    t->st.lookups += r->n;
    for (size_t i = 0; i < r->n; i++) {
      tiny_obj *o = tiny_find(t, &r->keys[i]);
      if (o) o->locks++, kva_bit_set(r->bits, i);
    }
  } else if (m->type == KVA_L2_LOAD) {
    r->result = KVA_OK;
    t->st.loads += r->n;
    tiny_load(t, r);
  } else {
    r->result = KVA_OK;
    tiny_stats(t, r);
  }
  if (m->from) kva_send(m->from, KVA_L2_DONE, &r, sizeof(r), self, m->tag);
}

static void tiny_stop(kva_actor *self, void *state) {
  tiny *t = state;
  for (int i = 0; i < PLUGIN_TINY_MAX; i++) free(t->o[i].data);
  free(t);
}

static const kva_behavior tiny_behavior = {"tiny", tiny_receive, tiny_stop};

kva_actor *plugin_tiny_factory(kva_runtime *rt, const kva_config_node *cfg, char *err,
                               size_t errlen) {
  uint64_t refuse = 0;
  if (kva_config_node_u64(cfg, "refuse", &refuse) == KVA_OK && refuse) {
    strncpy(err, "tiny: refused by its config", errlen - 1);
    return NULL;
  }
  const char *name = "tiny";
  kva_config_node_str(cfg, "name", &name);
  tiny *t = calloc(1, sizeof(*t));
  if (t) snprintf(t->name, sizeof(t->name), "%s", name);
  kva_actor *a = t ? kva_spawn(rt, &tiny_behavior, t, NULL) : NULL;
  if (!a) free(t);
  return a;
}

int plugin_tiny_register(void) {
  return kva_l2_register("tiny", plugin_tiny_factory);
}
