/*
 * mp_admission_test.c — who kvactd admits: a peer of another uid is
 * refused and told why (server.allowed_uids, server.allowed_groups), one
 * whose gid or a supplementary group is an allowed group is served (also
 * with more groups than a first read of SO_PEERGROUPS takes), and a group
 * name no group has stops the start, saying which (mp_support.h: kvactd
 * exec'd, peers forked). Peers change their credentials, so the cases
 * need root; as another user they pass without checking anything.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvact.h"
#include "tests/server/mp_support.h"
#include "tests/support/fixture.h"
#include "wire/protocol.h"

#define PEER_UID 4242 /* a uid and gid of no one: in no group of its own */
#define USERS_GID 100 /* Debian's base group "users" */
#define NOGROUP_GID 65534
#define MANY_GROUPS 80 /* more than admission.c's first SO_PEERGROUPS read */

/* The credentials a forked peer takes before it connects. */
typedef struct peer {
  uid_t uid;
  gid_t gid;
  size_t ngroups;
  gid_t groups[MANY_GROUPS + 1];
} peer;

static char log_path[128]; /* kvactd's stderr: its warnings and errors */

static void become(const peer *p) {
  if (setgroups(p->ngroups, p->groups) != 0 || setgid(p->gid) != 0 || setuid(p->uid) != 0) _exit(3);
}

/* Points fd 2 (inherited by kvactd) at log_path; *saved: the old one. */
static void log_to_file(int *saved) {
  snprintf(log_path, sizeof(log_path), "%s.log", sock_path);
  int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ck_assert_int_ge(fd, 0);
  *saved = dup(2);
  ck_assert_int_eq(dup2(fd, 2), 2);
  close(fd);
}

static void log_back(int saved) {
  dup2(saved, 2);
  close(saved);
}

/* kvactd on a socket anyone may connect to, serving the settings of opts
 * (NULL-terminated, at most 6) besides; its log goes to log_path. */
static pid_t daemon_for(const char *const *opts) {
  const char *all[8] = {"server.socket_mode=511"};
  for (size_t i = 0; opts[i] && i < 6; i++) all[i + 1] = opts[i];
  int saved;
  log_to_file(&saved);
  pid_t d = daemon_start_opts(0, 0, all);
  log_back(saved);
  return d;
}

static void teardown_log(void) {
  if (log_path[0]) unlink(log_path);
  teardown();
}

static int log_has(const char *text) {
  char buf[8192] = "";
  int fd = open(log_path, O_RDONLY | O_CLOEXEC);
  ck_assert_int_ge(fd, 0);
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  buf[n > 0 ? n : 0] = 0;
  return strstr(buf, text) != NULL;
}

/* A client process as p: the result of its storage's stats call, asked
 * every 10 ms for wait_ms until one is KVA_OK. */
static int stats_as(const peer *p, int wait_ms) {
  int out[2];
  ck_assert_int_eq(pipe(out), 0);
  pid_t c = fork();
  ck_assert_int_ge(c, 0);
  if (c == 0) {
    become(p);
    kva_runtime *rt = client_start();
    kva_storage_stats st;
    int rc = KVA_ESHUTDOWN;
    for (int i = 0; i < wait_ms / 10 && rc != KVA_OK; i++)
      if ((rc = kva_storage_get_stats(kva_storage_of(rt), &st)) != KVA_OK) sleep_ms(10);
    kva_runtime_shutdown(rt);
    _exit(write(out[1], &rc, sizeof(rc)) == sizeof(rc) ? 0 : 4);
  }
  close(out[1]);
  ck_assert_int_eq(child_status(c), 0);
  int rc = 1;
  ck_assert_int_eq(read(out[0], &rc, sizeof(rc)), (ssize_t)sizeof(rc));
  close(out[0]);
  return rc;
}

/* A raw connection as p that says hello: the reply's type, and the
 * refusal's text in text. */
static int hello_as(const peer *p, char *text, size_t cap) {
  int out[2];
  ck_assert_int_eq(pipe(out), 0);
  pid_t c = fork();
  ck_assert_int_ge(c, 0);
  if (c == 0) {
    become(p);
    int fd = raw_connect();
    if (fd < 0) _exit(4);
    uint8_t frame[PROTO_HDR_BYTES + 8];
    proto_req hello = {.type = P_HELLO, .pid = 1};
    proto_req_put(frame, sizeof(frame), &hello, 0);
    /* the daemon may refuse before the hello is written (EPIPE): its
     * refusal is read either way */
    if (write(fd, frame, sizeof(frame)) < 0 && errno != EPIPE && errno != ECONNRESET) _exit(5);
    char got[256] = "";
    int t = read_frame(fd, got, sizeof(got));
    if (write(out[1], &t, sizeof(t)) != sizeof(t) || write(out[1], got, sizeof(got)) < 0) _exit(6);
    _exit(0);
  }
  close(out[1]);
  ck_assert_int_eq(child_status(c), 0);
  int t = 0;
  char got[256] = "";
  ck_assert_int_eq(read(out[0], &t, sizeof(t)), (ssize_t)sizeof(t));
  ck_assert_int_eq(read(out[0], got, sizeof(got)), (ssize_t)sizeof(got));
  close(out[0]);
  snprintf(text, cap, "%s", got);
  return t;
}

/* ---- refused --------------------------------------------------------------------- */

START_TEST(a_peer_of_another_uid_is_refused) {
  if (getuid() != 0) return; /* needs setuid */
  const char *const opts[] = {NULL};
  pid_t d = daemon_for(opts);
  peer p = {.uid = 65534, .gid = NOGROUP_GID};
  char text[256] = "";
  ck_assert_int_eq(hello_as(&p, text, sizeof(text)), P_REFUSED);
  ck_assert_msg(strstr(text, "uid 65534"), "refusal: %s", text);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

START_TEST(a_peer_in_no_allowed_group_is_refused_naming_both_keys) {
  if (getuid() != 0) return;
  const char *const opts[] = {"server.allowed_groups=[\"users\",\"nogroup\"]",
                              "server.allowed_uids=[4243]", NULL};
  pid_t d = daemon_for(opts);
  peer p = {.uid = PEER_UID, .gid = PEER_UID, .ngroups = 1, .groups = {PEER_UID + 1}};
  char text[256] = "";
  ck_assert_int_eq(hello_as(&p, text, sizeof(text)), P_REFUSED);
  ck_assert_msg(strstr(text, "uid 4242") && strstr(text, "server.allowed_uids") &&
                    strstr(text, "server.allowed_groups"),
                "refusal: %s", text);
  ck_assert_int_eq(stats_as(&p, 1000), KVA_ESHUTDOWN);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
  ck_assert_msg(log_has("uid 4242 gid 4242: not the daemon's uid nor in server.allowed_uids, and "
                        "in no group of server.allowed_groups"),
                "no refusal in kvactd's log (%s)", log_path);
}
END_TEST

/* ---- admitted -------------------------------------------------------------------- */

START_TEST(a_peer_whose_gid_is_an_allowed_group_is_served) {
  if (getuid() != 0) return;
  const char *const opts[] = {"server.allowed_groups=[\"nogroup\",\"users\"]", NULL};
  pid_t d = daemon_for(opts);
  peer p = {.uid = PEER_UID, .gid = USERS_GID};
  ck_assert_int_eq(stats_as(&p, 10000), KVA_OK);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

START_TEST(a_peer_with_an_allowed_supplementary_group_is_served) {
  if (getuid() != 0) return;
  const char *const opts[] = {"server.allowed_groups=[\"users\"]", NULL};
  pid_t d = daemon_for(opts);
  peer p = {.uid = PEER_UID, .gid = PEER_UID, .ngroups = 2, .groups = {PEER_UID + 1, USERS_GID}};
  ck_assert_int_eq(stats_as(&p, 10000), KVA_OK);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* The kernel sorts a process's groups: nogroup (65534) comes last, past
 * what the first SO_PEERGROUPS read holds (ERANGE, then a second read). */
START_TEST(every_supplementary_group_counts_past_the_first_read) {
  if (getuid() != 0) return;
  const char *const opts[] = {"server.allowed_groups=[\"nogroup\"]", NULL};
  pid_t d = daemon_for(opts);
  peer p = {.uid = PEER_UID, .gid = PEER_UID, .ngroups = MANY_GROUPS + 1};
  for (size_t i = 0; i < MANY_GROUPS; i++) p.groups[i] = (gid_t)(5000 + i);
  p.groups[MANY_GROUPS] = NOGROUP_GID;
  ck_assert_int_eq(stats_as(&p, 10000), KVA_OK);
  p.ngroups = MANY_GROUPS; /* the same peer without it */
  ck_assert_int_eq(stats_as(&p, 1000), KVA_ESHUTDOWN);
  ck_assert_int_eq(daemon_stop(d, SIGTERM), 0);
}
END_TEST

/* ---- a name no group has ----------------------------------------------------------- */

#define NO_SUCH_GROUP "kvact-test-no-such-group"

static int unknown_group_lines;

static void count_unknown_group(int level, const char *msg, void *arg) {
  (void)arg;
  if (level == KVA_LOG_ERROR && strstr(msg, "server.allowed_groups[1]") &&
      strstr(msg, "\"" NO_SUCH_GROUP "\""))
    __atomic_add_fetch(&unknown_group_lines, 1, __ATOMIC_RELAXED);
}

static void set(kva_config *c, const char *path, const char *value) {
  ck_assert_int_eq(kva_config_set(c, path, value), KVA_OK);
}

START_TEST(an_unknown_group_stops_the_start_naming_it) {
  const char *groups = "[\"users\",\"" NO_SUCH_GROUP "\"]";
  kva_config *c = kva_config_default();
  set(c, "runtime.workers", "1");
  set(c, "l1.size_bytes", "16777216");
  set(c, "l1.hugepages", "false");
  set(c, "l1.pinned", "false");
  set(c, "l2", "[{\"type\":\"mock\"}]");
  set(c, "server.socket", sock_path);
  set(c, "server.allowed_groups", groups);
  kva_log_set(count_unknown_group, NULL, KVA_LOG_ERROR);
  kva_runtime *rt = (kva_runtime *)&rt;
  ck_assert_int_eq(kva_runtime_start(c, &rt), KVA_ECONFIG);
  kva_log_set(NULL, NULL, KVA_LOG_WARN);
  kva_config_free(c);
  ck_assert_ptr_null(rt);
  ck_assert_int_eq(__atomic_load_n(&unknown_group_lines, __ATOMIC_RELAXED), 1);
  struct stat st;
  ck_assert_msg(lstat(sock_path, &st) != 0, "a socket file after a failed start");
  /* kvactd: the same, as its exit */
  char opt[128];
  snprintf(opt, sizeof(opt), "server.allowed_groups=%s", groups);
  const char *const opts[] = {opt, NULL};
  int saved;
  log_to_file(&saved);
  int ws = daemon_start_fails(opts);
  log_back(saved);
  ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) != 0, "kvactd's wait status %d", ws);
  ck_assert_msg(log_has("server.allowed_groups[1]: no group is named \"" NO_SUCH_GROUP "\""),
                "kvactd's log does not name the group (%s)", log_path);
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("mp_admission");
  TCase *tc = tcase_create("mp_admission");
  tcase_add_checked_fixture(tc, setup, teardown_log);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, a_peer_of_another_uid_is_refused);
  tcase_add_test(tc, a_peer_in_no_allowed_group_is_refused_naming_both_keys);
  tcase_add_test(tc, a_peer_whose_gid_is_an_allowed_group_is_served);
  tcase_add_test(tc, a_peer_with_an_allowed_supplementary_group_is_served);
  tcase_add_test(tc, every_supplementary_group_counts_past_the_first_read);
  tcase_add_test(tc, an_unknown_group_stops_the_start_naming_it);
  suite_add_tcase(s, tc);
  return s;
}
