/*
 * config_test_robust.c — hostile input never crashes the loader, and the
 * kvconf tool round-trips JSON -> msgpack -> JSON (part of the config
 * suite; see config_test.c).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "tests/config/config_test.h"

/* A config touching every section and tier type. */
static mp *rich_config(void) {
  mp *m = mp_new();
  mp_map(m, 5);
  mp_str(m, "runtime");
  mp_map(m, 2);
  mp_str(m, "workers");
  mp_int(m, 0);
  mp_str(m, "seed");
  mp_uint(m, 12345678901234ull);
  mp_str(m, "eviction");
  mp_map(m, 2);
  mp_str(m, "ratio");
  mp_dbl(m, 0.25);
  mp_str(m, "policy");
  mp_str(m, "mru");
  mp_str(m, "l1");
  mp_map(m, 1);
  mp_str(m, "numa_node");
  mp_int(m, -1);
  mp_str(m, "l2");
  mp_arr(m, 3);
  mp_tier(m, "disk");
  mp_map(m, 2);
  mp_str(m, "type");
  mp_str(m, "redis");
  mp_str(m, "addrs");
  mp_arr(m, 2);
  mp_str(m, "a:1");
  mp_str(m, "b:2");
  mp_map(m, 2);
  mp_str(m, "type");
  mp_str(m, "plug");
  mp_str(m, "x");
  mp_arr(m, 2);
  mp_dbl(m, 1.5);
  msgpack_pack_nil(&m->pk);
  mp_str(m, "gpu");
  mp_map(m, 1);
  mp_str(m, "devices");
  mp_arr(m, 1);
  mp_int(m, 0);
  return m;
}

/* Loads buf; when it loads, its effective bytes must load to the same. */
static void load_any(const void *buf, size_t len) {
  kva_config *c = NULL, *d = NULL;
  char err[ERRLEN];
  size_t n0, n1;
  int rc = kva_config_from_msgpack(buf, len, &c, err, sizeof err);
  ck_assert_msg(rc == KVA_OK || rc == KVA_ECONFIG, "rc %d", rc);
  if (rc != KVA_OK) {
    ck_assert_ptr_null(c);
    ck_assert_msg(strchr(err, ':') != NULL, "error without a path: %s", err);
    return;
  }
  void *a = config_bytes(c, &n0);
  ck_assert_msg(kva_config_from_msgpack(a, n0, &d, err, sizeof err) == KVA_OK, "%s", err);
  void *b = config_bytes(d, &n1);
  ck_assert(n0 == n1 && memcmp(a, b, n0) == 0);
  free(a);
  free(b);
  kva_config_free(c);
  kva_config_free(d);
}

START_TEST(every_truncation_of_a_valid_file_fails_cleanly) {
  mp *m = rich_config();
  char err[ERRLEN], want[64];
  kva_config *c = load_ok(rich_config());
  kva_config_free(c);
  for (size_t len = 0; len < m->sb.size; len++) {
    c = NULL;
    ck_assert_int_eq(kva_config_from_msgpack(m->sb.data, len, &c, err, sizeof err), KVA_ECONFIG);
    ck_assert_ptr_null(c);
    snprintf(want, sizeof want, "<input>: truncated msgpack data (%zu bytes)", len);
    ck_assert_str_eq(err, want);
  }
  mp_free(m);
}
END_TEST

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_random(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

START_TEST(random_bytes_never_crash) {
  unsigned char buf[256];
  for (int i = 0; i < 20000; i++) {
    size_t len = next_random() % sizeof buf;
    for (size_t j = 0; j < len; j++) buf[j] = (unsigned char)next_random();
    if (len && i % 2) buf[0] = 0x80 | (buf[0] & 0x0f); /* half of them start as a map */
    load_any(buf, len);
  }
}
END_TEST

START_TEST(mutations_of_a_valid_file_never_crash) {
  mp *m = rich_config();
  unsigned char *buf = malloc(m->sb.size);
  for (int i = 0; i < 20000; i++) {
    memcpy(buf, m->sb.data, m->sb.size);
    for (int k = 1 + (int)(next_random() % 3); k > 0; k--)
      buf[next_random() % m->sb.size] = (unsigned char)next_random();
    load_any(buf, m->sb.size);
  }
  free(buf);
  mp_free(m);
}
END_TEST

TCase *config_robust_tcase(void) {
  TCase *tc = tcase_create("robust");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, every_truncation_of_a_valid_file_fails_cleanly);
  tcase_add_test(tc, random_bytes_never_crash);
  tcase_add_test(tc, mutations_of_a_valid_file_never_crash);
  return tc;
}

/* ---- kvconf --------------------------------------------------------------- */

static const char *tmpdir(void) {
  const char *d = getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

/* Runs a shell command line; returns the exit status. */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int st = system(cmd);
  ck_assert_msg(st != -1 && WIFEXITED(st), "did not run: %s", cmd);
  return WEXITSTATUS(st);
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  char *buf = malloc(1 << 20);
  *len = fread(buf, 1, (1 << 20) - 1, f);
  buf[*len] = '\0';
  fclose(f);
  return buf;
}

static int same_file(const char *a, const char *b) {
  size_t na, nb;
  char *x = slurp(a, &na), *y = slurp(b, &nb);
  int same = na == nb && memcmp(x, y, na) == 0;
  free(x);
  free(y);
  return same;
}

START_TEST(kvconf_round_trips_every_example_and_checks_it) {
  const char *d = tmpdir();
  ck_assert_int_ge(example_count, 6);
  for (int i = 0; i < example_count; i++) {
    const char *ex = example_paths[i];
    ck_assert_int_eq(run("%s encode %s %s/a.msgpack", kvconf_path, ex, d), 0);
    ck_assert_int_eq(run("%s check %s/a.msgpack > %s/check.out", kvconf_path, d, d), 0);
    ck_assert_int_eq(run("grep -qx '%s/a.msgpack: ok' %s/check.out", d, d), 0);
    ck_assert_int_eq(run("%s decode %s/a.msgpack > %s/a.json", kvconf_path, d, d), 0);
    ck_assert_int_eq(run("%s encode %s/a.json %s/b.msgpack", kvconf_path, d, d), 0);
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/a.msgpack", d);
    snprintf(b, sizeof b, "%s/b.msgpack", d);
    ck_assert_msg(same_file(a, b), "%s: JSON -> msgpack -> JSON -> msgpack differs", ex);
    ck_assert_int_eq(run("%s show %s/a.msgpack > %s/show.json", kvconf_path, d, d), 0);
    ck_assert_int_eq(run("%s encode %s/show.json %s/c.msgpack", kvconf_path, d, d), 0);
  }
}
END_TEST

START_TEST(kvconf_refuses_to_encode_an_invalid_config) {
  const char *d = tmpdir();
  ck_assert_int_eq(run("printf '{\"l1\": {\"size_bytes\": \"x\"}}' > %s/bad.json", d), 0);
  ck_assert_int_eq(run("rm -f %s/bad.msgpack", d), 0);
  ck_assert_int_eq(run("%s encode %s/bad.json %s/bad.msgpack 2> %s/err", kvconf_path, d, d, d), 1);
  ck_assert_int_eq(
      run("grep -qx '%s/bad.json: l1.size_bytes: expected integer, got string' %s/err", d, d), 0);
  ck_assert_int_eq(run("test ! -e %s/bad.msgpack", d), 0);
  ck_assert_int_eq(run("printf '\\201\\242l2\\301' > %s/bad.msgpack", d), 0);
  ck_assert_int_eq(run("%s check %s/bad.msgpack 2> %s/err", kvconf_path, d, d), 1);
  ck_assert_int_eq(run("grep -qx '%s/bad.msgpack: invalid msgpack data at byte 4' %s/err", d, d),
                   0);
}
END_TEST

START_TEST(kvconf_usage_errors_exit_2) {
  ck_assert_int_eq(run("%s > /dev/null 2>&1", kvconf_path), 2);
  ck_assert_int_eq(run("%s frob > /dev/null 2>&1", kvconf_path), 2);
  ck_assert_int_eq(run("%s check > /dev/null 2>&1", kvconf_path), 2);
  ck_assert_int_eq(run("%s encode a > /dev/null 2>&1", kvconf_path), 2);
  ck_assert_int_eq(run("%s schema --html > /dev/null 2>&1", kvconf_path), 2);
  ck_assert_int_eq(run("%s --help | grep -q 'kvconf encode'", kvconf_path), 0);
}
END_TEST

START_TEST(kvconf_schema_markdown_matches_the_committed_reference) {
  char out[512];
  snprintf(out, sizeof out, "%s/schema.md", tmpdir());
  ck_assert_int_eq(run("%s schema --markdown > %s", kvconf_path, out), 0);
  ck_assert_msg(same_file(out, schema_md_path),
                "config/SCHEMA.md is stale: regenerate it with tools/update_readme.sh");
}
END_TEST

/* The adapter types and policies in the reference are the lists its
 * caller gives (kvconf: the registries'), with no copy in the schema. */
START_TEST(reference_lists_the_names_its_caller_gives) {
  config_doc_lists l = {{"t1, t2", "e1, e2", "s1", "p1"}};
  char *md = config_schema_markdown(&l), *txt = config_schema_text(&l);
  ck_assert_ptr_nonnull(md);
  ck_assert_ptr_nonnull(txt);
  ck_assert_ptr_nonnull(strstr(md, "| t1, t2, or a plug-in type | required | t1, t2, or a type"));
  ck_assert_ptr_nonnull(strstr(md, "(built in: e1, e2; or one registered with kva_eviction"));
  ck_assert_ptr_nonnull(strstr(md, "(built in: s1; or one registered with kva_store_policy"));
  ck_assert_ptr_nonnull(strstr(md, "(built in: p1; or one registered with kva_prefetch_policy"));
  ck_assert_ptr_nonnull(strstr(txt, "(built in: e1, e2; or one"));
  ck_assert_ptr_nonnull(strstr(txt, "t1, t2, or a plug-in type"));
  for (char *s = md; s; s = s == md ? txt : NULL) {
    ck_assert_ptr_null(strchr(s, '{'));    /* every marker filled in */
    ck_assert_ptr_null(strstr(s, "fifo")); /* "lru" is a default, not a list */
    ck_assert_ptr_null(strstr(s, "mock, disk"));
  }
  free(md);
  free(txt);
  md = config_schema_markdown(NULL); /* no lists: the markers stay */
  ck_assert_ptr_nonnull(strstr(md, "{tier_types}, or a plug-in type"));
  ck_assert_ptr_nonnull(strstr(md, "(built in: {eviction_policies}; or"));
  free(md);
}
END_TEST

START_TEST(kvconf_show_prints_the_embedded_default) {
  const char *d = tmpdir();
  ck_assert_int_eq(run("%s show > %s/show.json", kvconf_path, d), 0);
  ck_assert_int_eq(run("grep -q '\"name\": \"disk0\"' %s/show.json", d), 0);
  ck_assert_int_eq(run("grep -q '\"trigger_watermark\": 0.8,' %s/show.json", d), 0);
}
END_TEST

TCase *config_kvconf_tcase(void) {
  TCase *tc = tcase_create("kvconf");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, kvconf_round_trips_every_example_and_checks_it);
  tcase_add_test(tc, kvconf_refuses_to_encode_an_invalid_config);
  tcase_add_test(tc, kvconf_usage_errors_exit_2);
  tcase_add_test(tc, kvconf_schema_markdown_matches_the_committed_reference);
  tcase_add_test(tc, reference_lists_the_names_its_caller_gives);
  tcase_add_test(tc, kvconf_show_prints_the_embedded_default);
  return tc;
}
