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
 * UNLOCK of an unknown or unlocked key is ignored.
 */
#include "tests/support/plugin_adapter.h"

#include <stdlib.h>
#include <string.h>

typedef struct tiny_obj {
  kva_key key;
  void *data;
  size_t len;
  uint32_t locks;
  int used;
} tiny_obj;

typedef struct tiny {
  tiny_obj o[PLUGIN_TINY_MAX];
  uint64_t stores;
} tiny;

static tiny_obj *tiny_find(tiny *t, const kva_key *k) {
  for (int i = 0; i < PLUGIN_TINY_MAX; i++)
    if (t->o[i].used && memcmp(&t->o[i].key, k, sizeof(*k)) == 0) return &t->o[i];
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
    *o = (tiny_obj){.key = r->keys[i], .data = d, .len = r->bufs[i].len, .used = 1};
  }
  t->stores++;
  return KVA_OK;
}

static void tiny_receive(kva_actor *self, void *state, const kva_msg *m) {
  tiny *t = state;
  if (m->type == KVA_L2_UNLOCK) {
    const kva_key *k = m->data;
    for (size_t i = 0; i < m->len / sizeof(kva_key); i++) {
      tiny_obj *o = tiny_find(t, &k[i]);
      if (o && o->locks) o->locks--;
    }
    return;
  }
  if (m->len != sizeof(kva_l2_req *)) return;
  kva_l2_req *r = *(kva_l2_req *const *)m->data;
  r->result = KVA_OK;
  if (m->type == KVA_L2_STORE) {
    r->result = tiny_store(t, r);
  } else if (m->type == KVA_L2_LOOKUP_AND_LOCK) {
    for (size_t i = 0; i < r->n; i++) {
      tiny_obj *o = tiny_find(t, &r->keys[i]);
      if (o) o->locks++, kva_bit_set(r->bits, i);
    }
  } else if (m->type == KVA_L2_LOAD) {
    for (size_t i = 0; i < r->n; i++) {
      tiny_obj *o = tiny_find(t, &r->keys[i]);
      if (!o || o->len != r->bufs[i].len) continue; /* a miss, never wrong bytes */
      memcpy(r->bufs[i].ptr, o->data, o->len);
      kva_bit_set(r->bits, i);
    }
  } else if (m->type == KVA_L2_STATS) {
    memset(r->stats, 0, sizeof(*r->stats));
    for (int i = 0; i < PLUGIN_TINY_MAX; i++) {
      r->stats->objects += t->o[i].used;
      r->stats->keys_locked += t->o[i].locks;
    }
    r->stats->stores = t->stores;
  } else {
    r->result = KVA_ENOTSUP;
  }
  kva_send(m->from, KVA_L2_DONE, &r, sizeof(r), self, m->tag);
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
  tiny *t = calloc(1, sizeof(*t));
  kva_actor *a = t ? kva_spawn(rt, &tiny_behavior, t, NULL) : NULL;
  if (!a) free(t);
  return a;
}

int plugin_tiny_register(void) {
  return kva_l2_register("tiny", plugin_tiny_factory);
}
