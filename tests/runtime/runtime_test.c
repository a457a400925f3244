/*
 * runtime_test.c — the actor runtime: mailbox ordering under back-pressure,
 * scheduling exclusivity, ping-pong, stop and shutdown semantics.
 */
#include <check.h>
#include <ck_pr.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>

#include "kvact.h"
#include "tests/support/fixture.h"

enum { T_DATA = KVA_MSG_USER, T_GO, T_DONE, T_PING, T_PONG };

/* ---- per-sender FIFO ------------------------------------------------- */

#define PRODUCERS 4
typedef struct fifo_state {
  uint64_t next[PRODUCERS]; /* next sequence number expected per producer */
  uint64_t total, errors, expect;
  kva_port *done;
  uint32_t work; /* busy iterations per message: a sink slower than its senders */
} fifo_state;

typedef struct seq_msg {
  uint32_t producer;
  uint64_t seq;
} seq_msg;

static void fifo_receive(kva_actor *self, void *state, const kva_msg *m) {
  fifo_state *s = state;
  const seq_msg *q = m->data;
  if (m->type != T_DATA || m->len != sizeof(*q) || q->producer >= PRODUCERS) {
    s->errors++;
    return;
  }
  if (q->seq != s->next[q->producer]) s->errors++;
  for (volatile uint32_t i = 0; i < s->work; i++) {
  }
  s->next[q->producer] = q->seq + 1;
  if (++s->total == s->expect) kva_send(kva_port_actor(s->done), T_DONE, NULL, 0, self, 0);
}

static const kva_behavior fifo_behavior = {"fifo", fifo_receive, NULL};

/* A fifo receiver with a mailbox of `capacity` expecting `expect` messages;
 * it reports on `done` when all have arrived. */
static kva_actor *fifo_sink_of(kva_runtime *rt, fifo_state *s, kva_port *done, uint64_t expect,
                               uint32_t capacity) {
  memset(s, 0, sizeof(*s));
  s->expect = expect;
  s->done = done;
  kva_spawn_opts o = {.mailbox_capacity = capacity};
  kva_actor *sink = kva_spawn(rt, &fifo_behavior, s, &o);
  ck_assert_ptr_nonnull(sink);
  return sink;
}

static kva_actor *fifo_sink(kva_runtime *rt, fifo_state *s, kva_port *done, uint64_t expect) {
  return fifo_sink_of(rt, s, done, expect, 4);
}

static void fifo_check(const fifo_state *s, uint64_t per) {
  ck_assert_uint_eq(s->errors, 0);
  ck_assert_uint_eq(s->total, per * PRODUCERS);
  for (int i = 0; i < PRODUCERS; i++) ck_assert_uint_eq(s->next[i], per);
}

typedef struct producer_arg {
  kva_actor *to;
  uint32_t id;
  uint64_t n;
} producer_arg;

static void *producer_main(void *p) {
  producer_arg *a = p;
  for (uint64_t i = 0; i < a->n; i++) {
    seq_msg q = {a->id, i};
    ck_assert_int_eq(kva_send(a->to, T_DATA, &q, sizeof(q), NULL, 0), KVA_OK);
  }
  return NULL;
}

START_TEST(per_sender_fifo_holds_with_four_threads_into_capacity_four) {
  const uint64_t per = 1000000;
  kva_runtime *rt = fixture_runtime(2, NULL);
  kva_port *done = kva_port_open(rt, "done");
  fifo_state s;
  kva_actor *sink = fifo_sink(rt, &s, done, per * PRODUCERS);
  pthread_t th[PRODUCERS];
  producer_arg args[PRODUCERS];
  for (uint32_t i = 0; i < PRODUCERS; i++) {
    args[i] = (producer_arg){sink, i, per};
    pthread_create(&th[i], NULL, producer_main, &args[i]);
  }
  for (int i = 0; i < PRODUCERS; i++) pthread_join(th[i], NULL);
  fixture_recv(done, NULL, 0, 60000);
  kva_runtime_counters c;
  kva_runtime_get_counters(rt, &c);
  kva_runtime_shutdown(rt);
  fifo_check(&s, per);
  ck_assert_uint_gt(c.blocked_sends, 0); /* the ring really was full */
}
END_TEST

/* Actor senders never block: they overflow and get muted. */
typedef struct sender_state {
  kva_actor *to;
  uint32_t id;
  uint64_t sent, n;
  uint32_t burst; /* messages per receive */
} sender_state;

static void sender_receive(kva_actor *self, void *state, const kva_msg *m) {
  sender_state *s = state;
  for (uint32_t burst = 0; burst < s->burst && s->sent < s->n; burst++, s->sent++) {
    seq_msg q = {s->id, s->sent};
    ck_assert_int_eq(kva_send(s->to, T_DATA, &q, sizeof(q), self, 0), KVA_OK);
  }
  if (s->sent < s->n) kva_send(self, T_GO, NULL, 0, self, 0);
}

static const kva_behavior sender_behavior = {"sender", sender_receive, NULL};

/* PRODUCERS sender actors send per messages each, in bursts of burst,
 * into a sink of capacity cap doing `work` per message; checks per-sender
 * FIFO and returns the runtime's counters. */
static kva_runtime_counters run_senders(uint64_t per, uint32_t burst, uint32_t cap, uint32_t work) {
  kva_runtime *rt = fixture_runtime(2, NULL);
  kva_port *done = kva_port_open(rt, "done");
  fifo_state s;
  kva_actor *sink = cap ? fifo_sink_of(rt, &s, done, per * PRODUCERS, cap)
                        : fifo_sink(rt, &s, done, per * PRODUCERS);
  s.work = work;
  sender_state ss[PRODUCERS];
  for (uint32_t i = 0; i < PRODUCERS; i++) {
    ss[i] = (sender_state){sink, i, 0, per, burst};
    kva_actor *a = kva_spawn(rt, &sender_behavior, &ss[i], NULL);
    ck_assert_int_eq(kva_send(a, T_GO, NULL, 0, NULL, 0), KVA_OK);
  }
  fixture_recv(done, NULL, 0, 60000);
  kva_runtime_counters c;
  kva_runtime_get_counters(rt, &c);
  kva_runtime_shutdown(rt);
  fifo_check(&s, per);
  return c;
}

START_TEST(actor_senders_overflow_and_are_muted_without_reordering) {
  kva_runtime_counters c = run_senders(200000, 256, 0, 0);
  ck_assert_uint_gt(c.overflowed, 0);
  ck_assert_uint_gt(c.mutes, 0);
  ck_assert_uint_eq(c.blocked_sends, 0); /* actors never wait */
}
END_TEST

/* Senders whose bursts fit between the marks are muted at the high mark
 * (3/4 of the ring) and never overflow: four bursts of 32 stay below 1024
 * even when all four land after the mark (mailbox.h, sched.c). */
START_TEST(actor_senders_are_muted_at_the_high_mark_before_overflowing) {
  kva_runtime_counters c = run_senders(100000, 32, 1024, 200);
  ck_assert_uint_gt(c.mutes, 0);
  ck_assert_uint_eq(c.overflowed, 0);
  ck_assert_uint_eq(c.blocked_sends, 0);
}
END_TEST

/* ---- exclusivity ------------------------------------------------------ */

typedef struct excl_state {
  uint32_t inside; /* atomic */
  uint64_t count, violations;
} excl_state;

static uint32_t excl_total_violations;

static void excl_receive(kva_actor *self, void *state, const kva_msg *m) {
  excl_state *s = state;
  if (ck_pr_faa_32(&s->inside, 1) != 0) ck_pr_inc_32(&excl_total_violations);
  s->count++; /* unsynchronised on purpose: TSan flags a second runner */
  for (volatile int i = 0; i < 50; i++) {
  }
  ck_pr_dec_32(&s->inside);
}

static const kva_behavior excl_behavior = {"excl", excl_receive, NULL};

typedef struct flood_arg {
  kva_actor **actors;
  int n, rounds;
} flood_arg;

static void *flood_main(void *p) {
  flood_arg *f = p;
  for (int r = 0; r < f->rounds; r++)
    for (int i = 0; i < f->n; i++) kva_send(f->actors[i], T_DATA, NULL, 0, NULL, 0);
  return NULL;
}

START_TEST(an_actor_never_runs_on_two_threads_at_once) {
  enum { NACT = 64, THREADS = 4, ROUNDS = 2000 };
  kva_runtime *rt = fixture_runtime(8, "runtime.batch=4", NULL);
  excl_state st[NACT];
  kva_actor *act[NACT];
  memset(st, 0, sizeof(st));
  for (int i = 0; i < NACT; i++) act[i] = kva_spawn(rt, &excl_behavior, &st[i], NULL);
  pthread_t th[THREADS];
  flood_arg f = {act, NACT, ROUNDS};
  for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, flood_main, &f);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  kva_runtime_shutdown(rt); /* drains everything */
  ck_assert_uint_eq(ck_pr_load_32(&excl_total_violations), 0);
  for (int i = 0; i < NACT; i++) ck_assert_uint_eq(st[i].count, (uint64_t)THREADS * ROUNDS);
}
END_TEST

/* ---- ping-pong ------------------------------------------------------- */

typedef struct pp_state {
  kva_actor *peer;
  kva_port *done;
  uint64_t seen, limit, errors;
} pp_state;

static void pp_receive(kva_actor *self, void *state, const kva_msg *m) {
  pp_state *s = state;
  uint64_t v = 0;
  memcpy(&v, m->data, sizeof(v));
  if (v != s->seen * 2 + (m->type == T_PONG)) s->errors++;
  s->seen++;
  if (m->type == T_PONG && s->seen == s->limit) {
    kva_send(kva_port_actor(s->done), T_DONE, NULL, 0, self, 0);
    return;
  }
  uint64_t next = v + 1;
  kva_send(s->peer, m->type == T_PING ? T_PONG : T_PING, &next, sizeof(next), self, 0);
}

static const kva_behavior pp_behavior = {"pingpong", pp_receive, NULL};

START_TEST(ping_pong_delivers_every_message_in_order) {
  kva_runtime *rt = fixture_runtime(2, NULL);
  kva_port *done = kva_port_open(rt, "done");
  pp_state a = {.done = done, .limit = 100000}, b = {.done = done, .limit = 100000};
  kva_actor *pa = kva_spawn(rt, &pp_behavior, &a, NULL);
  kva_actor *pb = kva_spawn(rt, &pp_behavior, &b, NULL);
  a.peer = pb;
  b.peer = pa;
  /* pb sees PINGs carrying even numbers, pa sees PONGs carrying odd ones */
  b.seen = 0;
  uint64_t zero = 0;
  ck_assert_int_eq(kva_send(pb, T_PING, &zero, sizeof(zero), pa, 0), KVA_OK);
  fixture_recv(done, NULL, 0, 60000);
  kva_runtime_shutdown(rt);
  ck_assert_uint_eq(a.errors, 0);
  ck_assert_uint_eq(b.errors, 0);
  ck_assert_uint_eq(a.seen, 100000);
  ck_assert_uint_eq(b.seen, 100000);
}
END_TEST

/* ---- stop and shutdown ----------------------------------------------- */

typedef struct gate_state {
  sem_t entered, release;
  uint64_t received, after_stop_msgs;
  int gated, stopped;
  kva_actor *other;
  int send_in_on_stop;
} gate_state;

static void gate_receive(kva_actor *self, void *state, const kva_msg *m) {
  gate_state *s = state;
  if (s->stopped) s->after_stop_msgs++;
  if (!s->gated) {
    s->gated = 1;
    sem_post(&s->entered);
    sem_wait(&s->release);
  }
  s->received++;
}

static void gate_on_stop(kva_actor *self, void *state) {
  gate_state *s = state;
  if (s->other) s->send_in_on_stop = kva_send(s->other, T_DATA, NULL, 0, self, 0);
  __atomic_store_n(&s->stopped, 1, __ATOMIC_RELEASE); /* the test thread polls it */
}

static const kva_behavior gate_behavior = {"gate", gate_receive, gate_on_stop};

static void gate_init(gate_state *s) {
  memset(s, 0, sizeof(*s));
  sem_init(&s->entered, 0, 0);
  sem_init(&s->release, 0, 0);
}

START_TEST(actor_stop_delivers_queued_messages_then_on_stop) {
  kva_runtime *rt = fixture_runtime(2, NULL);
  gate_state s;
  gate_init(&s);
  kva_actor *a = kva_spawn(rt, &gate_behavior, &s, NULL);
  kva_actor_hold(
      a); /* its record outlives the stop: the send below is refused, not a use after free */
  ck_assert_int_eq(kva_send(a, T_DATA, NULL, 0, NULL, 0), KVA_OK);
  sem_wait(&s.entered);
  for (int i = 0; i < 100; i++) ck_assert_int_eq(kva_send(a, T_DATA, NULL, 0, NULL, 0), KVA_OK);
  kva_actor_stop(a);
  sem_post(&s.release);
  while (!__atomic_load_n(&s.stopped, __ATOMIC_ACQUIRE)) sched_yield();
  ck_assert_int_eq(kva_send(a, T_DATA, NULL, 0, NULL, 0), KVA_ESHUTDOWN);
  kva_actor_release(a);
  ck_assert_uint_eq(s.received, 101);
  ck_assert_uint_eq(s.after_stop_msgs, 0);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(shutdown_with_100k_queued_messages_loses_none) {
  kva_runtime *rt = fixture_runtime(2, NULL);
  gate_state s;
  gate_init(&s);
  kva_spawn_opts o = {.mailbox_capacity = 1u << 17};
  kva_actor *a = kva_spawn(rt, &gate_behavior, &s, &o);
  ck_assert_int_eq(kva_send(a, T_DATA, NULL, 0, NULL, 0), KVA_OK);
  sem_wait(&s.entered);
  char payload[100]; /* pooled payload blocks must come back too */
  memset(payload, 7, sizeof(payload));
  for (int i = 0; i < 100000; i++)
    ck_assert_int_eq(kva_send(a, T_DATA, payload, i % 2 ? sizeof(payload) : 8, NULL, 0), KVA_OK);
  sem_post(&s.release);
  kva_runtime_shutdown(rt);
  ck_assert_uint_eq(s.received, 100001);
  ck_assert_int_eq(s.stopped, 1);
}
END_TEST

START_TEST(shutdown_stops_newest_first_and_refuses_sends_to_stopped_actors) {
  kva_runtime *rt = fixture_runtime(2, NULL);
  gate_state older, newer;
  gate_init(&older);
  gate_init(&newer);
  older.gated = newer.gated = 1;
  kva_actor *a = kva_spawn(rt, &gate_behavior, &older, NULL);
  kva_actor *b = kva_spawn(rt, &gate_behavior, &newer, NULL);
  newer.other = a; /* b stops first: a still accepts */
  older.other = b; /* a stops second: b is gone */
  kva_runtime_shutdown(rt);
  ck_assert_int_eq(newer.send_in_on_stop, KVA_OK);
  ck_assert_uint_eq(older.received, 1);
  ck_assert_int_eq(older.send_in_on_stop, KVA_ESHUTDOWN);
}
END_TEST

START_TEST(send_rejects_bad_arguments) {
  kva_runtime *rt = fixture_runtime(1, NULL);
  gate_state s;
  gate_init(&s);
  s.gated = 1;
  kva_actor *a = kva_spawn(rt, &gate_behavior, &s, NULL);
  ck_assert_int_eq(kva_send(NULL, T_DATA, NULL, 0, NULL, 0), KVA_EINVAL);
  ck_assert_int_eq(kva_send(a, KVA_MSG_STOP, NULL, 0, NULL, 0), KVA_EINVAL);
  ck_assert_int_eq(kva_send(a, T_DATA, NULL, 5, NULL, 0), KVA_EINVAL);
  ck_assert_ptr_null(kva_spawn(rt, NULL, NULL, NULL));
  kva_behavior nore = {"x", NULL, NULL};
  ck_assert_ptr_null(kva_spawn(rt, &nore, NULL, NULL));
  ck_assert_str_eq(kva_actor_name(a), "gate");
  ck_assert_ptr_eq(kva_actor_runtime(a), rt);
  ck_assert_int_ge(kva_actor_eventfd(a), 0);
  kva_runtime_shutdown(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("runtime");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, per_sender_fifo_holds_with_four_threads_into_capacity_four);
  tcase_add_test(tc, actor_senders_overflow_and_are_muted_without_reordering);
  tcase_add_test(tc, actor_senders_are_muted_at_the_high_mark_before_overflowing);
  tcase_add_test(tc, an_actor_never_runs_on_two_threads_at_once);
  tcase_add_test(tc, ping_pong_delivers_every_message_in_order);
  tcase_add_test(tc, actor_stop_delivers_queued_messages_then_on_stop);
  tcase_add_test(tc, shutdown_with_100k_queued_messages_loses_none);
  tcase_add_test(tc, shutdown_stops_newest_first_and_refuses_sends_to_stopped_actors);
  tcase_add_test(tc, send_rejects_bad_arguments);
  suite_add_tcase(s, tc);
  return s;
}
