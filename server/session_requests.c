/*
 * session_requests.c — a kvactd session's requests: checked against its
 * ledger, sent to the L1 manager as l1_reqs of slots or to a control
 * thread, and what each answer tells the ledger before its reply frame.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "actors/clock.h"
#include "actors/gauges.h"
#include "actors/log.h"
#include "common/array.h"
#include "server/session_internal.h"
#include "storage/storage_internal.h"

/* ---- requests to the L1 manager --------------------------------------------- */

void send_l1(srv_session *ss, slot *s, uint32_t type) {
  l1_req *r = &s->req;
  if (kva_send(ss->sv->s->l1, type, &r, sizeof(r), ss->self, s->index) == KVA_OK) return;
  /* the L1 manager is gone: kvactd is stopping and nothing is held any more */
  if (s->state == SL_RELEASE) ss->releasing = false;
  if (type == L1_READ && s->state == SL_L1) ss->reads_busy--;
  slot_put(ss, s);
  if (s->state != SL_RELEASE) reply_result(ss, s->ptype, s->id, KVA_ESHUTDOWN);
  if (ss->closing) release_step(ss);
}

/* FINISH_WRITE / ABORT_WRITE: the keys this client reserved, by object
 * id; any other key is KVA_KEY_WRONG_STATE and untouched. */
static uint32_t pick_writes(srv_session *ss, slot *s) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < s->n_client; i++) {
    ledger_entry *e = ledger_find(&ss->led, &s->keys[i]);
    s->status[i] = KVA_KEY_WRONG_STATE;
    if (!e || !e->write_id) continue;
    s->sub[m] = s->keys[i];
    s->ids[m] = e->write_id;
    s->pos[m++] = i;
    ledger_set_write(&ss->led, e, 0); /* released by this request, whatever comes first */
  }
  return m;
}

/* FINISH_READ: keys holding at least `readers` of this client's read
 * locks; UNPIN: keys it pinned. */
static uint32_t pick_held(srv_session *ss, slot *s, bool pins) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < s->n_client; i++) {
    ledger_entry *e = ledger_find(&ss->led, &s->keys[i]);
    s->status[i] = KVA_KEY_WRONG_STATE;
    if (!e || (pins ? e->pins == 0 : e->reads < s->readers)) continue;
    s->sub[m] = s->keys[i];
    s->pos[m++] = i;
    if (pins) /* released by this request, whatever comes first */
      ledger_add_pins(&ss->led, e, -1);
    else
      ledger_add_reads(&ss->led, e, -(int64_t)s->readers);
  }
  return m;
}

/* READ: a key this client holds no read lock of is not readable to it
 * (another client's lock is not its own, I-MP-2). L1 is told which keys
 * those are and answers as in-process: the first key's problem
 * (KVA_KEY_NOT_EXIST when L1 does not have it, else KVA_KEY_NOT_READABLE)
 * and then one lock of each key this client holds one of is released.
 * With PROTO_READ_LAYOUTS, L1 gives each object's layout too. */
static void start_read(srv_session *ss, slot *s) {
  bool layouts = (s->flag & PROTO_READ_LAYOUTS) != 0;
  if (layouts && !ARRAY_GROW(s->layouts, &s->layouts_cap, s->n_client)) {
    slot_put(ss, s);
    reply_result(ss, P_READ, s->id, KVA_ENOMEM);
    return;
  }
  bool all = true;
  for (uint32_t i = 0; i < s->n_client; i++) {
    ledger_entry *e = ledger_find(&ss->led, &s->keys[i]);
    s->held[i] = e && e->reads;
    all = all && s->held[i];
  }
  s->req = (l1_req){.keys = s->keys,
                    .n = s->n_client,
                    .bufs = s->bufs,
                    .held = all ? NULL : s->held,
                    .layouts = layouts ? s->layouts : NULL};
  ss->reads_busy++;
  send_l1(ss, s, L1_READ);
}

/* Lookups start on the L1 manager: with no tier to walk (none, or
 * frozen) that is the whole answer, pins included; without a pin, an L1
 * that holds every key is too. Anything else goes to a control thread
 * (kva_lookup's walk of the tiers). */
static bool tiers_walked(const kva_storage *st) {
  return st->tiers.n > 0 && !l2_frozen(&st->tiers);
}

bool lookup_starts_in_l1(const kva_storage *st, const proto_req *q) {
  return !tiers_walked(st) || !q->flag;
}

void start_l1(srv_session *ss, slot *s, const proto_req *q) {
  kva_storage *st = ss->sv->s;
  uint32_t m;
  switch (q->type) {
  case P_RESERVE_WRITE:
    s->layout = q->layout;
    s->req = (l1_req){.keys = s->keys,
                      .n = q->n,
                      .layout = &s->layout,
                      .mode = (int)q->mode,
                      .bufs = s->bufs,
                      .status = s->status,
                      .ids = s->ids};
    send_l1(ss, s, L1_RESERVE_WRITE);
    return;
  case P_FINISH_WRITE:
  case P_ABORT_WRITE:
    if ((m = pick_writes(ss, s)) == 0) break;
    s->req = (l1_req){.keys = s->sub, .n = m, .ids = s->ids, .status = s->sub_status};
    send_l1(ss, s, q->type == P_FINISH_WRITE ? L1_FINISH_WRITE : L1_ABORT_WRITE);
    return;
  case P_DELETE:
    s->req = (l1_req){.keys = s->keys, .n = q->n, .force = (int)q->flag, .status = s->status};
    send_l1(ss, s, L1_DELETE);
    return;
  case P_TOUCH:
    s->req = (l1_req){.keys = s->keys, .n = q->n};
    send_l1(ss, s, L1_TOUCH);
    return;
  case P_CLEAR:
    s->req = (l1_req){.force = (int)q->flag};
    send_l1(ss, s, L1_CLEAR);
    return;
  case P_PREFETCH:
    s->layout = q->layout;
    s->t0_ns = clock_mono_ns();
    s->req = (l1_req){.keys = s->keys,
                      .n = q->n,
                      .layout = q->flag & 1 ? &s->layout : NULL,
                      .readers = q->readers,
                      .l2 = (q->flag & 1) && st->prefetcher && !l2_frozen(&st->tiers),
                      .as_planned = (q->flag & PROTO_PREFETCH_AS_PLANNED) != 0};
    send_l1(ss, s, L1_PREFETCH);
    return;
  case P_READ:
    start_read(ss, s);
    return;
  case P_LOOKUP:
    s->req = (l1_req){.keys = s->keys, .n = q->n, .pin = (int)q->flag};
    send_l1(ss, s, L1_LOOKUP);
    return;
  case P_FINISH_READ:
    if ((m = pick_held(ss, s, false)) == 0) break;
    s->req = (l1_req){.keys = s->sub, .n = m, .readers = q->readers, .status = s->sub_status};
    send_l1(ss, s, L1_FINISH_READ);
    return;
  case P_UNPIN:
    if ((m = pick_held(ss, s, true)) == 0) break;
    s->req = (l1_req){.keys = s->sub, .n = m, .status = s->sub_status};
    send_l1(ss, s, L1_UNPIN);
    return;
  }
  /* nothing of this client's to release */
  proto_rep r = {.type = q->type, .n = s->n_client, .status = s->status};
  slot_put(ss, s);
  send_frame(ss, &r, s->id);
}

/* TIER_NODES' room for the request's cap entries, zeroed (nothing of an
 * earlier answer travels): false when out of memory. */
static bool nodes_room(slot *s, uint32_t cap) {
  if (cap && !ARRAY_GROW(s->nodes, &s->nodes_room, cap)) return false;
  if (cap) memset(s->nodes, 0, cap * sizeof(*s->nodes));
  s->job.nodes = cap ? s->nodes : NULL;
  s->job.cap = cap;
  return true;
}

/* The calls that span the tiers go to a control thread. */
void start_ctl(srv_session *ss, slot *s, const proto_req *q) {
  ctl_job *j = &s->job;
  *j = (ctl_job){.s = ss->sv->s,
                 .type = q->type,
                 .keys = s->keys,
                 .n = q->n,
                 .flag = q->flag,
                 .timeout_ms = q->timeout_ms,
                 .report_len = q->report_len};
  memcpy(j->tier, q->tier, sizeof(j->tier));
  if (q->type == P_MEMCHECK && q->report_len) {
    if (!s->text && !(s->text = malloc(PROTO_MAX_TEXT))) j->report_len = 0;
    j->text = s->text;
  }
  if (q->type == P_TIER_NODES && !nodes_room(s, q->cap)) {
    slot_put(ss, s);
    reply_result(ss, q->type, s->id, KVA_ENOMEM);
    return;
  }
  s->state = SL_CTL;
  if (control_submit(ss->sv, q->type == P_LOOKUP ? 0 : 1, j, ss->self, s->index) != KVA_OK) {
    slot_put(ss, s);
    reply_result(ss, q->type, s->id, KVA_ESHUTDOWN);
  }
}

bool is_ctl(uint16_t type) {
  return type == P_LOOKUP || type == P_MEMCHECK || type == P_STATS || type == P_FLUSH ||
         type == P_FREEZE || type == P_SET_BYPASS || type == P_BYPASSED || type == P_L2_CONTAINS ||
         type == P_TIER_STATS || type == P_TIER_KEYS || type == P_TIER_NODES;
}

/* ---- replies from the L1 manager and the control threads --------------------- */

void start_ctl(srv_session *ss, slot *s, const proto_req *q);

/* An L1 lookup's answer as kva_lookup gives it: L1's hits, then every
 * tier (up to the report's room) with none. */
static void lookup_of_l1(const kva_storage *st, size_t hits, kva_tier_hits *out) {
  memset(out, 0, sizeof(*out));
  strcpy(out->tier[0].name, "L1");
  out->tier[0].hits = out->total = hits;
  out->ntiers = 1;
  const uint32_t room = (uint32_t)(sizeof(out->tier) / sizeof(out->tier[0]));
  for (uint32_t t = 0; t < st->tiers.n && out->ntiers < room; t++)
    memcpy(out->tier[out->ntiers++].name, st->tiers.t[t].name, sizeof(out->tier[0].name));
}

/* What the reply of slot s tells the ledger, then its frame. */
void on_l1_reply(srv_session *ss, slot *s) {
  ledger *l = &ss->led;
  l1_req *r = &s->req;
  proto_rep rep = {.type = s->ptype, .result = r->result, .n = s->n_client, .status = s->status};
  switch (s->state == SL_RELEASE ? 0 : s->ptype) {
  case 0:
    ss->releasing = false;
    break;
  case P_RESERVE_WRITE:
    for (size_t i = 0; i < r->n; i++) {
      if (s->status[i] != KVA_OK) continue;
      ledger_entry *e = ledger_get(l, &s->keys[i]);
      if (e)
        ledger_set_write(l, e, s->ids[i]);
      else
        LOG_ERROR("kvactd: out of memory: a reservation of pid %d is not tracked", (int)ss->pid);
    }
    rep.spans = spans_of(ss, s, s->n_client, true);
    break;
  case P_FINISH_WRITE:
  case P_ABORT_WRITE:
    rep.result = 0;
    for (size_t j = 0; j < r->n; j++) {
      int st = s->sub_status[j];
      s->status[s->pos[j]] = st;
      rep.result += st == KVA_OK;
      ledger_entry *e = st == KVA_KEY_WRONG_STATE ? ledger_get(l, &r->keys[j]) : NULL;
      if (e) ledger_set_write(l, e, s->ids[j]); /* not released: still ours */
    }
    break;
  case P_LOOKUP:
    if (r->result == KVA_OK && r->hits < r->n && tiers_walked(ss->sv->s) && !ss->closing) {
      /* L1 misses some: the tiers are walked by kva_lookup */
      proto_req q = {.type = P_LOOKUP, .n = s->n_client, .flag = s->flag};
      start_ctl(ss, s, &q);
      return;
    }
    if (r->result == KVA_OK && r->pin) /* the L1 hits are pinned, one pin each */
      for (size_t i = 0; i < r->hits; i++) {
        ledger_entry *e = ledger_get(l, &s->keys[i]);
        if (e) ledger_add_pins(l, e, 1);
      }
    lookup_of_l1(ss->sv->s, r->result == KVA_OK ? r->hits : 0, &s->job.lookup);
    rep.lookup = &s->job.lookup;
    break;
  case P_PREFETCH:
    rep.hits = r->result == KVA_OK ? r->hits : 0;
    for (size_t i = 0; i < rep.hits; i++) {
      ledger_entry *e = ledger_get(l, &s->keys[i]);
      if (e) ledger_add_reads(l, e, s->readers);
    }
    latency_observe(&ss->sv->prefetch_latency, clock_mono_ns() - s->t0_ns);
    break;
  case P_READ:
    ss->reads_busy--;
    if (r->result != KVA_OK) /* the manager released one lock of each key we held */
      for (size_t i = 0; i < r->n; i++) {
        ledger_entry *e = !r->held || r->held[i] ? ledger_find(l, &r->keys[i]) : NULL;
        if (e) ledger_add_reads(l, e, -1);
      }
    rep.spans = spans_of(ss, s, s->n_client, r->result == KVA_OK);
    rep.layouts_asked = r->layouts != NULL;
    rep.layouts = r->layouts;
    break;
  default:
    break;
  }
  publish_totals(ss);
  bool answer = s->state != SL_RELEASE;
  if (answer && !ss->closing && (rep.spans || (s->ptype != P_READ && s->ptype != P_RESERVE_WRITE)))
    send_frame(ss, &rep, s->id);
  else if (answer && !ss->closing)
    close_conn(ss, "out of memory");
  slot_put(ss, s);
  if (ss->closing) release_step(ss);
}

void on_ctl_done(srv_session *ss, slot *s) {
  ctl_job *j = &s->job;
  proto_rep rep = {.type = s->ptype, .result = j->result, .n = s->n_client};
  if (s->ptype == P_LOOKUP) {
    rep.lookup = &j->lookup;
    if (j->result == KVA_OK && j->flag) /* the L1 hits are pinned, one pin each */
      for (size_t i = 0; i < j->lookup.tier[0].hits; i++) {
        ledger_entry *e = ledger_get(&ss->led, &s->keys[i]);
        if (e) ledger_add_pins(&ss->led, e, 1);
      }
    publish_totals(ss);
  } else if (s->ptype == P_STATS) {
    rep.stats = &j->stats;
  } else if (s->ptype == P_TIER_STATS) {
    rep.tier_stats = &j->tier_stats;
  } else if (s->ptype == P_TIER_KEYS) {
    rep.tier_keys = &j->tier_keys;
  } else if (s->ptype == P_TIER_NODES) {
    rep.nodes = j->nodes;
    rep.nodes_cap = j->cap;
    rep.nodes_n = j->nodes_n < UINT32_MAX ? (uint32_t)j->nodes_n : UINT32_MAX;
    rep.map_age_s = j->map_age_s;
  } else if (s->ptype == P_MEMCHECK) {
    rep.memcheck = &j->memcheck;
    rep.text = j->text;
    rep.text_len = j->text ? (uint32_t)strnlen(j->text, j->report_len) : 0;
  }
  if (!ss->closing) send_frame(ss, &rep, s->id);
  slot_put(ss, s);
  if (ss->closing) release_step(ss);
}
