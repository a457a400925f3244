/*
 * runtime_io_test.c — ports, fd watches, timers, deterministic mode and the
 * stats segment (an actor's own label and gauges too).
 */
#include <check.h>
#include <ck_pr.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/gauges.h"
#include "actors/stats.h"
#include "kvact.h"
#include "tests/support/fixture.h"

enum { T_DATA = KVA_MSG_USER, T_SETUP, T_REPORT };

static int fd_readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, 0) == 1;
}

START_TEST(port_recv_times_out_and_its_eventfd_is_readable_while_messages_wait) {
  kva_runtime *rt = fixture_runtime(2, NULL);
  kva_port *p = kva_port_open(rt, "engine");
  kva_msg m;
  char buf[64];
  uint64_t t0 = fixture_now_ns();
  ck_assert_int_eq(kva_port_recv(p, &m, buf, sizeof(buf), 50), KVA_ETIMEDOUT);
  ck_assert_uint_ge(fixture_now_ns() - t0, 45000000ull);
  ck_assert(!fd_readable(kva_port_fd(p)));
  ck_assert_int_eq(kva_send(kva_port_actor(p), T_DATA, "hello", 6, NULL, 42), KVA_OK);
  ck_assert_int_eq(kva_send(kva_port_actor(p), T_DATA, "world!", 7, NULL, 43), KVA_OK);
  ck_assert(fd_readable(kva_port_fd(p)));
  m = fixture_recv(p, buf, sizeof(buf), 0);
  ck_assert_str_eq(buf, "hello");
  ck_assert_uint_eq(m.tag, 42);
  ck_assert(fd_readable(kva_port_fd(p))); /* one still waits */
  m = fixture_recv(p, buf, 3, 0);         /* truncated copy, full length */
  ck_assert_uint_eq(m.len, 7);
  ck_assert_int_eq(memcmp(buf, "wor", 3), 0);
  ck_assert(!fd_readable(kva_port_fd(p)));
  kva_port_close(p);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(large_payloads_arrive_intact) {
  kva_runtime *rt = fixture_runtime(2, NULL);
  kva_port *p = kva_port_open(rt, "engine");
  size_t sizes[] = {0, 1, 40, 41, 240, 5000, 70000, 2u << 20};
  char *big = malloc(2u << 20), *out = malloc(2u << 20);
  for (size_t i = 0; i < (2u << 20); i++) big[i] = (char)(i * 31 + 7);
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
    ck_assert_int_eq(kva_send(kva_port_actor(p), T_DATA, big, (uint32_t)sizes[i], NULL, i), 0);
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    kva_msg m = fixture_recv(p, out, 2u << 20, 1000);
    ck_assert_uint_eq(m.tag, i);
    ck_assert_uint_eq(m.len, sizes[i]);
    ck_assert_int_eq(memcmp(out, big, sizes[i]), 0);
  }
  free(big);
  free(out);
  kva_runtime_shutdown(rt);
}
END_TEST

/* An actor that sets up watches/timers when told and reports to a port. */
typedef struct io_state {
  kva_port *report;
  int fd, timer, ticks, stop_after;
} io_state;

static void io_receive(kva_actor *self, void *state, const kva_msg *m) {
  io_state *s = state;
  if (m->type == T_SETUP && s->fd >= 0) {
    ck_assert_int_eq(kva_watch_fd(self, s->fd, EPOLLIN, 7), KVA_OK);
    ck_assert_int_eq(kva_watch_fd(self, s->fd, EPOLLIN, 7), KVA_EINVAL); /* twice */
  } else if (m->type == T_SETUP) {
    s->timer = kva_timer(self, 10000000, 10000000, 9);
    ck_assert_int_ge(s->timer, 0);
  } else if (m->type == KVA_MSG_FD_READY) {
    const kva_fd_event *fe = m->data;
    char buf[64];
    ssize_t n, total = 0;
    while ((n = read(fe->fd, buf + total, sizeof(buf) - (size_t)total)) > 0) total += n;
    ck_assert_uint_eq(m->tag, 7);
    kva_send(kva_port_actor(s->report), T_REPORT, buf, (uint32_t)total, self, 0);
  } else if (m->type == KVA_MSG_TIMER) {
    const kva_timer_event *te = m->data;
    if (s->timer < 0) return; /* a tick queued before the cancel (kvact.h) */
    ck_assert_int_eq(te->timer_id, s->timer);
    s->ticks += (int)te->expirations;
    if (s->ticks >= s->stop_after && s->timer >= 0) {
      ck_assert_int_eq(kva_timer_cancel(self, s->timer), KVA_OK);
      s->timer = -1;
      kva_send(kva_port_actor(s->report), T_REPORT, &s->ticks, sizeof(int), self, 0);
    }
  }
}

static const kva_behavior io_behavior = {"io", io_receive, NULL};

START_TEST(fd_watch_delivers_readiness_to_the_actor) {
  kva_runtime *rt = fixture_runtime(2, NULL);
  kva_port *p = kva_port_open(rt, "engine");
  int pfd[2];
  ck_assert_int_eq(pipe2(pfd, O_NONBLOCK), 0);
  io_state s = {.report = p, .fd = pfd[0]};
  kva_actor *a = kva_spawn(rt, &io_behavior, &s, NULL);
  kva_send(a, T_SETUP, NULL, 0, NULL, 0);
  kva_runtime_counters c0;
  do kva_runtime_get_counters(rt, &c0);
  while (c0.delivered < 1);
  ck_assert_int_eq(write(pfd[1], "abc", 3), 3);
  char buf[64] = {0};
  kva_msg m = fixture_recv(p, buf, sizeof(buf), 5000);
  ck_assert_uint_eq(m.len, 3);
  ck_assert_int_eq(memcmp(buf, "abc", 3), 0);
  ck_assert_int_eq(write(pfd[1], "de", 2), 2); /* a second edge */
  m = fixture_recv(p, buf, sizeof(buf), 5000);
  ck_assert_int_eq(memcmp(buf, "de", 2), 0);
  kva_runtime_shutdown(rt);
  close(pfd[0]);
  close(pfd[1]);
}
END_TEST

START_TEST(periodic_timer_ticks_until_cancelled) {
  kva_runtime *rt = fixture_runtime(2, NULL);
  kva_port *p = kva_port_open(rt, "engine");
  io_state s = {.report = p, .fd = -1, .stop_after = 5};
  kva_actor *a = kva_spawn(rt, &io_behavior, &s, NULL);
  uint64_t t0 = fixture_now_ns();
  kva_send(a, T_SETUP, NULL, 0, NULL, 0);
  int ticks = 0;
  kva_msg m = fixture_recv(p, &ticks, sizeof(ticks), 5000);
  ck_assert_uint_eq(m.type, T_REPORT);
  ck_assert_int_ge(ticks, 5);
  ck_assert_uint_ge(fixture_now_ns() - t0, 45000000ull);
  kva_msg none;
  ck_assert_int_eq(kva_port_recv(p, &none, NULL, 0, 50), KVA_ETIMEDOUT);
  kva_runtime_shutdown(rt);
}
END_TEST

/* ---- deterministic mode ---------------------------------------------- */

#define DET_ACTORS 8
typedef struct det_world {
  kva_actor *actors[DET_ACTORS];
  uint32_t trace[4096];
  size_t ntrace;
} det_world;

typedef struct det_actor {
  det_world *w;
  uint32_t id;
} det_actor;

static void det_receive(kva_actor *self, void *state, const kva_msg *m) {
  det_actor *d = state;
  det_world *w = d->w;
  uint32_t hops = 0;
  memcpy(&hops, m->data, sizeof(hops));
  if (w->ntrace < 4096) w->trace[w->ntrace++] = d->id << 16 | hops;
  if (hops == 0) return;
  hops--;
  kva_send(w->actors[(d->id * 3 + hops) % DET_ACTORS], T_DATA, &hops, sizeof(hops), self, 0);
  kva_send(w->actors[(d->id + 1) % DET_ACTORS], T_DATA, &hops, sizeof(hops), self, 0);
}

static const kva_behavior det_behavior = {"det", det_receive, NULL};

static void det_run(const char *seed, det_world *w) {
  kva_runtime *rt = fixture_runtime(0, seed, NULL);
  det_actor st[DET_ACTORS];
  memset(w, 0, sizeof(*w));
  for (uint32_t i = 0; i < DET_ACTORS; i++) {
    st[i] = (det_actor){w, i};
    w->actors[i] = kva_spawn(rt, &det_behavior, &st[i], NULL);
  }
  for (uint32_t i = 0; i < DET_ACTORS; i++) {
    uint32_t hops = 7;
    kva_send(w->actors[i], T_DATA, &hops, sizeof(hops), NULL, 0);
  }
  ck_assert_int_eq(w->ntrace, 0); /* nothing runs until driven */
  int64_t n = kva_runtime_run_until_idle(rt);
  ck_assert_int_eq(n, (int64_t)w->ntrace);
  kva_runtime_shutdown(rt);
}

START_TEST(deterministic_mode_replays_the_same_order_from_the_same_seed) {
  static det_world a, b, c;
  det_run("runtime.seed=1234", &a);
  det_run("runtime.seed=1234", &b);
  det_run("runtime.seed=99", &c);
  ck_assert_uint_eq(a.ntrace, 8 * 255); /* 8 binary trees of depth 7 */
  ck_assert_uint_eq(a.ntrace, b.ntrace);
  ck_assert_int_eq(memcmp(a.trace, b.trace, a.ntrace * sizeof(uint32_t)), 0);
  ck_assert_uint_eq(c.ntrace, a.ntrace);
  ck_assert_int_ne(memcmp(a.trace, c.trace, a.ntrace * sizeof(uint32_t)), 0);
}
END_TEST

START_TEST(deterministic_timers_run_on_virtual_time) {
  kva_runtime *rt = fixture_runtime(0, NULL);
  kva_port *p = kva_port_open(rt, "engine");
  io_state s = {.report = p, .fd = -1, .stop_after = 3};
  kva_actor *a = kva_spawn(rt, &io_behavior, &s, NULL);
  kva_send(a, T_SETUP, NULL, 0, NULL, 0);
  kva_runtime_run_until_idle(rt);
  ck_assert_int_eq(s.ticks, 0);
  kva_runtime_advance(rt, 25000000); /* 25 ms virtual: ticks at 10 and 20 */
  ck_assert_int_eq(s.ticks, 2);
  ck_assert_uint_eq(kva_runtime_now_ns(rt), 25000000);
  int ticks = 0; /* the port drives virtual time up to its timeout */
  kva_msg m = fixture_recv(p, &ticks, sizeof(ticks), 100);
  ck_assert_uint_eq(m.type, T_REPORT);
  ck_assert_int_eq(ticks, 3);
  ck_assert_int_eq(kva_runtime_run_until_idle(NULL), KVA_ENOTSUP);
  kva_runtime_shutdown(rt);
}
END_TEST

START_TEST(threaded_runtime_refuses_deterministic_calls) {
  kva_runtime *rt = fixture_runtime(1, NULL);
  ck_assert_int_eq(kva_runtime_run_until_idle(rt), KVA_ENOTSUP);
  ck_assert_int_eq(kva_runtime_advance(rt, 1), KVA_ENOTSUP);
  kva_runtime_shutdown(rt);
}
END_TEST

/* ---- stats segment ---------------------------------------------------- */

static void noop_receive(kva_actor *self, void *state, const kva_msg *m) {}
static const kva_behavior named_behavior = {"l1_manager", noop_receive, NULL};

/* Segments left by a killed process whose pid we now have are reclaimed,
 * not a reason to run without stats. */
START_TEST(stale_segments_of_a_dead_process_with_our_pid_are_reclaimed) {
  char path[128];
  for (int n = 0; n < 256; n++) {
    snprintf(path, sizeof(path), "/dev/shm/kvact.%d.%d", (int)getpid(), n);
    int fd = open(path, O_CREAT | O_RDWR, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
  }
  kva_runtime *rt = fixture_runtime(1, NULL);
  ck_assert_ptr_nonnull(kva_runtime_stats_name(rt));
  kva_runtime_shutdown(rt);
  for (int n = 0; n < 256; n++) {
    snprintf(path, sizeof(path), "/dev/shm/kvact.%d.%d", (int)getpid(), n);
    unlink(path);
  }
}
END_TEST

START_TEST(stats_segment_names_actors_and_disappears_at_shutdown) {
  kva_runtime *rt = fixture_runtime(2, NULL);
  kva_actor *a = kva_spawn(rt, &named_behavior, NULL, NULL);
  for (int i = 0; i < 10; i++) kva_send(a, T_DATA, NULL, 0, NULL, 0);
  const char *name = kva_runtime_stats_name(rt);
  ck_assert_ptr_nonnull(name);
  char path[128];
  snprintf(path, sizeof(path), "/dev/shm%s", name);
  int fd = open(path, O_RDONLY);
  ck_assert_int_ge(fd, 0);
  struct stat stt;
  fstat(fd, &stt);
  ck_assert_uint_eq(stt.st_mode & 0777, 0600);
  void *map = mmap(NULL, (size_t)stt.st_size, PROT_READ, MAP_SHARED, fd, 0);
  ck_assert_ptr_ne(map, MAP_FAILED);
  const stats_header *h = map;
  ck_assert_uint_eq(h->magic, KVA_STATS_MAGIC);
  ck_assert_uint_eq(h->version, KVA_STATS_VERSION);
  ck_assert_uint_eq(h->pid, (uint32_t)getpid());
  const stats_slot *slots = (const stats_slot *)((const char *)map + h->header_bytes);
  int found = 0;
  for (uint32_t i = 0; i < h->nslots && i < h->max_slots; i++) {
    if (strcmp(slots[i].name, "l1_manager") != 0) continue;
    found = 1;
    while (ck_pr_load_64((uint64_t *)&slots[i].dequeued) < 10) sched_yield();
    uint64_t samples = 0;
    for (int b = 0; b < KVA_STATS_HIST; b++) samples += slots[i].hist[b];
    ck_assert_uint_eq(samples, 10);
    ck_assert_uint_eq(slots[i].enqueued, 10);
    ck_assert_uint_ge(slots[i].peak_depth, 1);
  }
  ck_assert(found);
  munmap(map, (size_t)stt.st_size);
  close(fd);
  kva_runtime_shutdown(rt);
  ck_assert_int_lt(access(path, F_OK), 0);
}
END_TEST

/* Publishes its label and gauge 0 = the message's tag, gauge 3 = 7. */
static void gauged_receive(kva_actor *self, void *state, const kva_msg *m) {
  actor_stats_label(self, "pid 42 uid 0", "requests a b c d_is_one_too_many");
  actor_stats_gauge(self, 0, m->tag);
  actor_stats_gauge(self, 3, 7);
  actor_stats_gauge(self, KVA_STATS_GAUGES, 9); /* out of range: ignored */
}

static const kva_behavior gauged_behavior = {"gauged", gauged_receive, NULL};

START_TEST(an_actor_label_and_gauges_are_read_whole_from_its_slot) {
  kva_runtime *rt = fixture_runtime(2, NULL);
  kva_actor *a = kva_spawn(rt, &gauged_behavior, NULL, NULL);
  kva_send(a, T_DATA, NULL, 0, NULL, 1234);
  int fd = shm_open(kva_runtime_stats_name(rt), O_RDONLY, 0);
  ck_assert_int_ge(fd, 0);
  struct stat stt;
  fstat(fd, &stt);
  void *map = mmap(NULL, (size_t)stt.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  ck_assert_ptr_ne(map, MAP_FAILED);
  const stats_header *h = map;
  const stats_slot *slots = (const stats_slot *)((const char *)map + h->header_bytes), *sl = NULL;
  for (uint32_t i = 0; i < h->nslots && i < h->max_slots; i++)
    if (strcmp(slots[i].name, "gauged") == 0) sl = &slots[i];
  ck_assert_ptr_nonnull(sl);
  while (ck_pr_load_64((uint64_t *)&sl->dequeued) < 1) sched_yield();
  stats_label_copy c;
  ck_assert(stats_label_read(sl, &c));
  ck_assert_str_eq(c.label, "pid 42 uid 0");
  ck_assert_str_eq(c.gauge_names, "requests a b c d_is_one_too_many"); /* kvinspect shows 4 */
  ck_assert_uint_eq(sl->gauge[0], 1234);
  ck_assert_uint_eq(sl->gauge[1] + sl->gauge[2], 0);
  ck_assert_uint_eq(sl->gauge[3], 7);
  /* a writer caught (or dead) between its two stores: no copy, not a hang */
  stats_slot torn = *sl;
  torn.label_seq |= 1;
  ck_assert(!stats_label_read(&torn, &c));
  ck_assert_str_eq(c.label, "");
  ck_assert_str_eq(c.gauge_names, "");
  munmap(map, (size_t)stt.st_size);
  kva_runtime_shutdown(rt);
}
END_TEST

/* ---- pinned actors and idle workers ---------------------------------- */

typedef struct pinned_state {
  kva_port *report;
  pthread_t thread;
  int same_thread, stopped;
  uint64_t count;
} pinned_state;

static void pinned_receive(kva_actor *self, void *state, const kva_msg *m) {
  pinned_state *s = state;
  if (s->count++ == 0) s->thread = pthread_self();
  if (!pthread_equal(s->thread, pthread_self())) s->same_thread = 0;
  if (s->count == 2000) kva_send(kva_port_actor(s->report), T_REPORT, NULL, 0, self, 0);
}

static void pinned_on_stop(kva_actor *self, void *state) {
  pinned_state *s = state;
  s->stopped = 1;
}

static const kva_behavior pinned_behavior = {"gpu0.copy", pinned_receive, pinned_on_stop};

static void *pinned_flood(void *arg) {
  for (int i = 0; i < 1000; i++) kva_send(arg, T_DATA, &i, sizeof(i), NULL, 0);
  return NULL;
}

START_TEST(pinned_actor_runs_on_its_own_thread_and_sleeps_on_its_eventfd) {
  kva_runtime *rt = fixture_runtime(2, NULL);
  kva_port *p = kva_port_open(rt, "engine");
  pinned_state s = {.report = p, .same_thread = 1};
  kva_spawn_opts o = {.pinned = 1, .mailbox_capacity = 16};
  kva_actor *a = kva_spawn(rt, &pinned_behavior, &s, &o);
  ck_assert_ptr_nonnull(a);
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, pinned_flood, a);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  fixture_recv(p, NULL, 0, 10000);
  kva_runtime_counters c;
  kva_runtime_get_counters(rt, &c);
  ck_assert_uint_gt(c.eventfd_writes, 0); /* its doorbell was rung */
  ck_assert_int_eq(s.same_thread, 1);
  ck_assert(!pthread_equal(s.thread, pthread_self()));
  kva_runtime_shutdown(rt);
  ck_assert_uint_eq(s.count, 2000);
  ck_assert_int_eq(s.stopped, 1);
}
END_TEST

START_TEST(idle_workers_go_to_sleep) {
  kva_runtime *rt = fixture_runtime(2, NULL);
  kva_runtime_counters c;
  /* no actor, nothing to do: both workers give up spinning and sleep */
  for (int i = 0; i < 2000; i++) {
    kva_runtime_get_counters(rt, &c);
    if (c.worker_sleeps >= 2) break;
    usleep(1000);
  }
  ck_assert_uint_ge(c.worker_sleeps, 2);
  kva_runtime_shutdown(rt);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("runtime_io");
  TCase *tc = tcase_create("io");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, port_recv_times_out_and_its_eventfd_is_readable_while_messages_wait);
  tcase_add_test(tc, large_payloads_arrive_intact);
  tcase_add_test(tc, fd_watch_delivers_readiness_to_the_actor);
  tcase_add_test(tc, periodic_timer_ticks_until_cancelled);
  tcase_add_test(tc, deterministic_mode_replays_the_same_order_from_the_same_seed);
  tcase_add_test(tc, deterministic_timers_run_on_virtual_time);
  tcase_add_test(tc, threaded_runtime_refuses_deterministic_calls);
  tcase_add_test(tc, stats_segment_names_actors_and_disappears_at_shutdown);
  tcase_add_test(tc, an_actor_label_and_gauges_are_read_whole_from_its_slot);
  tcase_add_test(tc, stale_segments_of_a_dead_process_with_our_pid_are_reclaimed);
  tcase_add_test(tc, pinned_actor_runs_on_its_own_thread_and_sleeps_on_its_eventfd);
  tcase_add_test(tc, idle_workers_go_to_sleep);
  suite_add_tcase(s, tc);
  return s;
}
