// caf_bench: CAF 0.17 anchor for kvbench -- ping-pong, fan-in and token-ring
// message throughput on a scheduler limited to W worker threads.
//
// stdout carries exactly one line per measure (parsed by kvbench):
//   anchor=caf measure=<name> msgs_per_s=<number> median_of=<R> workers=<W>
// or, with --json, one JSON object per line with the same keys. Everything
// else goes to stderr.

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <dirent.h>
#include <unistd.h>

#include "caf/all.hpp"

namespace {

using start_atom = caf::atom_constant<caf::atom("start")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;
using go_atom = caf::atom_constant<caf::atom("go")>;
using data_atom = caf::atom_constant<caf::atom("data")>;
using token_atom = caf::atom_constant<caf::atom("token")>;
using next_atom = caf::atom_constant<caf::atom("next")>;
using done_atom = caf::atom_constant<caf::atom("done")>;

// Messages a fan-in sender emits per handler invocation before yielding with
// a go message to itself; kvact's fan-in benchmark uses the same burst so the
// two runtimes see the same mailbox pressure.
constexpr uint64_t kFaninBurst = 64;
constexpr int kFaninSenders = 4;
constexpr int kRingSize = 100;

struct options {
  size_t workers;     // scheduler worker threads
  int reps;           // repetitions per measure; the median is printed
  uint64_t pingpong;  // round trips
  uint64_t fanin;     // messages in total over all senders
  uint64_t ring_hops; // token hops around the ring
  bool json;          // JSON lines instead of key=value lines
  bool verbose;       // per-rep figures and thread count on stderr
};

// -- ping-pong ---------------------------------------------------------------

struct ping_state {
  caf::actor pong;   // peer, set by the start message
  caf::actor main;   // receives done after the last round trip
  uint64_t left = 0; // round trips still to complete
};

caf::behavior ping_actor(caf::stateful_actor<ping_state> *self, caf::actor main) {
  self->state.main = std::move(main);
  return {
      [=](start_atom, caf::actor pong, uint64_t n) {
        self->state.pong = std::move(pong);
        self->state.left = n;
        self->send(self->state.pong, ping_atom::value, n);
      },
      [=](pong_atom, uint64_t seq) {
        if (--self->state.left == 0)
          self->send(self->state.main, done_atom::value);
        else
          self->send(self->state.pong, ping_atom::value, seq - 1);
      },
  };
}

caf::behavior pong_actor(caf::event_based_actor *self, caf::actor ping) {
  return {
      [=](ping_atom, uint64_t seq) { self->send(ping, pong_atom::value, seq); },
  };
}

// One ping-pong run; returns one-way messages per second (2n messages).
double pingpong_once(caf::actor_system &sys, uint64_t n) {
  caf::scoped_actor main{sys};
  auto ping = sys.spawn(ping_actor, caf::actor_cast<caf::actor>(main));
  auto pong = sys.spawn(pong_actor, ping);
  auto t0 = std::chrono::steady_clock::now();
  main->send(ping, start_atom::value, pong, n);
  main->receive([](done_atom) {});
  std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  caf::anon_send_exit(ping, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(pong, caf::exit_reason::user_shutdown);
  return 2.0 * static_cast<double>(n) / dt.count();
}

// -- fan-in ------------------------------------------------------------------

struct sender_state {
  caf::actor sink;   // the single receiver
  uint64_t left = 0; // messages this sender still has to send
};

// Sends in bursts of kFaninBurst and re-arms itself with a go message, so a
// sender never floods the sink from a single handler invocation.
caf::behavior sender_actor(caf::stateful_actor<sender_state> *self, caf::actor sink,
                           uint64_t count) {
  self->state.sink = std::move(sink);
  self->state.left = count;
  return {
      [=](go_atom) {
        auto &st = self->state;
        uint64_t burst = std::min(kFaninBurst, st.left);
        for (uint64_t i = 0; i < burst; ++i) self->send(st.sink, data_atom::value, st.left - i);
        st.left -= burst;
        if (st.left > 0) self->send(self, go_atom::value);
      },
  };
}

struct sink_state {
  caf::actor main;   // receives done when all messages arrived
  uint64_t want = 0; // messages expected in total
  uint64_t got = 0;  // messages received so far
};

caf::behavior sink_actor(caf::stateful_actor<sink_state> *self, caf::actor main, uint64_t want) {
  self->state.main = std::move(main);
  self->state.want = want;
  return {
      [=](data_atom, uint64_t) {
        if (++self->state.got == self->state.want) self->send(self->state.main, done_atom::value);
      },
  };
}

// One fan-in run; returns messages per second received by the sink.
double fanin_once(caf::actor_system &sys, uint64_t m) {
  caf::scoped_actor main{sys};
  auto sink = sys.spawn(sink_actor, caf::actor_cast<caf::actor>(main), m);
  std::vector<caf::actor> senders;
  for (int i = 0; i < kFaninSenders; ++i) {
    uint64_t share = m / kFaninSenders + (static_cast<uint64_t>(i) < m % kFaninSenders ? 1 : 0);
    senders.push_back(sys.spawn(sender_actor, sink, share));
  }
  auto t0 = std::chrono::steady_clock::now();
  for (auto &s : senders) main->send(s, go_atom::value);
  main->receive([](done_atom) {});
  std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  for (auto &s : senders) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  return static_cast<double>(m) / dt.count();
}

// -- token-ring --------------------------------------------------------------

struct node_state {
  caf::actor next; // successor in the ring
  caf::actor main; // receives done from the node that sees hops == 0
};

caf::behavior ring_node(caf::stateful_actor<node_state> *self, caf::actor main) {
  self->state.main = std::move(main);
  return {
      [=](next_atom, caf::actor next) { self->state.next = std::move(next); },
      [=](token_atom, uint64_t left) {
        if (left == 0)
          self->send(self->state.main, done_atom::value);
        else
          self->send(self->state.next, token_atom::value, left - 1);
      },
  };
}

// One token-ring run; returns hops (node-to-node messages) per second.
double ring_once(caf::actor_system &sys, uint64_t hops) {
  caf::scoped_actor main{sys};
  auto main_handle = caf::actor_cast<caf::actor>(main);
  std::vector<caf::actor> nodes;
  for (int i = 0; i < kRingSize; ++i) nodes.push_back(sys.spawn(ring_node, main_handle));
  // main's next messages are enqueued before the token exists, so every node
  // knows its successor before the token can reach it.
  for (int i = 0; i < kRingSize; ++i)
    main->send(nodes[i], next_atom::value, nodes[(i + 1) % kRingSize]);
  auto t0 = std::chrono::steady_clock::now();
  main->send(nodes[0], token_atom::value, hops);
  main->receive([](done_atom) {});
  std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  for (auto &n : nodes) caf::anon_send_exit(n, caf::exit_reason::user_shutdown);
  return static_cast<double>(hops) / dt.count();
}

// -- driver ------------------------------------------------------------------

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

int count_threads() {
  DIR *d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int n = 0;
  while (struct dirent *e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

void report(const options &o, const char *name, double rate) {
  if (o.json)
    std::printf("{\"anchor\":\"caf\",\"measure\":\"%s\",\"msgs_per_s\":%.0f,"
                "\"median_of\":%d,\"workers\":%zu}\n",
                name, rate, o.reps, o.workers);
  else
    std::printf("anchor=caf measure=%s msgs_per_s=%.0f median_of=%d workers=%zu\n", name, rate,
                o.reps, o.workers);
  std::fflush(stdout);
}

template <class F>
void run_measure(caf::actor_system &sys, const options &o, const char *name, uint64_t n, F once) {
  std::vector<double> rates;
  for (int r = 0; r < o.reps; ++r) {
    rates.push_back(once(sys, n));
    if (o.verbose)
      std::fprintf(stderr, "caf_bench: %s rep %d: %.0f msgs/s\n", name, r, rates.back());
  }
  report(o, name, median(rates));
}

void usage(const char *argv0) {
  std::fprintf(stderr,
               "usage: %s [--workers W] [--reps R] [--pingpong N] [--fanin M]\n"
               "          [--ring-hops H] [--json] [--verbose]\n",
               argv0);
}

bool parse_u64(const char *s, uint64_t min, uint64_t *out) {
  char *end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min) return false;
  *out = v;
  return true;
}

// Returns 0 on success, 1 on a bad argument (after printing usage).
int parse_args(int argc, char **argv, options *o) {
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    uint64_t v = 0;
    if (std::strcmp(a, "--json") == 0) {
      o->json = true;
    } else if (std::strcmp(a, "--verbose") == 0) {
      o->verbose = true;
    } else if (i + 1 < argc && parse_u64(argv[i + 1], 1, &v)) {
      ++i;
      if (std::strcmp(a, "--workers") == 0)
        o->workers = v;
      else if (std::strcmp(a, "--reps") == 0 && v <= 1000)
        o->reps = static_cast<int>(v);
      else if (std::strcmp(a, "--pingpong") == 0)
        o->pingpong = v;
      else if (std::strcmp(a, "--fanin") == 0)
        o->fanin = v;
      else if (std::strcmp(a, "--ring-hops") == 0)
        o->ring_hops = v;
      else
        return usage(argv[0]), 1;
    } else {
      return usage(argv[0]), 1;
    }
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  options o{cpus > 0 ? static_cast<size_t>(cpus) : 1, 5, 2000000, 8000000, 1000000, false, false};
  if (parse_args(argc, argv, &o) != 0) return 2;
  int threads_before = count_threads();
  caf::actor_system_config cfg;
  // CAF 0.17.6 has no typed member for this. Without it the default is
  // max(hardware_concurrency, 4), i.e. 4 workers on a 2-CPU box. A misspelt
  // key or a value of the wrong type (e.g. a string) only prints "*** failed
  // to set config parameter" to stderr and keeps the default, hence the
  // num_workers() check below. 0 workers crashes CAF (SIGFPE), so W >= 1.
  cfg.set("scheduler.max-threads", static_cast<size_t>(o.workers));
  {
    caf::actor_system sys{cfg};
    size_t got = sys.scheduler().num_workers();
    if (o.verbose)
      std::fprintf(stderr, "caf_bench: workers=%zu threads=%d (before system: %d)\n", got,
                   count_threads(), threads_before);
    if (got != o.workers) {
      std::fprintf(stderr, "caf_bench: asked for %zu workers, CAF started %zu\n", o.workers, got);
      return 1;
    }
    run_measure(sys, o, "ping-pong", o.pingpong, pingpong_once);
    run_measure(sys, o, "fan-in", o.fanin, fanin_once);
    run_measure(sys, o, "token-ring", o.ring_hops, ring_once);
    sys.await_all_actors_done();
  }
  return 0;
}
