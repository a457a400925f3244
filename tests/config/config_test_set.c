/*
 * config_test_set.c — defaults, kva_config_set / get, plug-in node views
 * and copies (part of the config suite; see config_test.c).
 */
#include <stdlib.h>
#include <unistd.h>

#include "tests/config/config_test.h"

static int64_t get_i64(const kva_config *c, const char *path) {
  int64_t v = 0;
  ck_assert_msg(kva_config_get_i64(c, path, &v) == KVA_OK, "%s", path);
  return v;
}

static double get_f64(const kva_config *c, const char *path) {
  double v = 0;
  ck_assert_msg(kva_config_get_f64(c, path, &v) == KVA_OK, "%s", path);
  return v;
}

static int get_bool(const kva_config *c, const char *path) {
  int v = -1;
  ck_assert_msg(kva_config_get_bool(c, path, &v) == KVA_OK, "%s", path);
  return v;
}

static const char *get_str(const kva_config *c, const char *path) {
  const char *v = NULL;
  ck_assert_msg(kva_config_get_str(c, path, &v) == KVA_OK, "%s", path);
  return v;
}

static int64_t online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 1024 ? 1024 : n;
}

/* ---- defaults ------------------------------------------------------------ */

START_TEST(default_config_has_the_documented_defaults) {
  kva_config *c = kva_config_default();
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(get_i64(c, "runtime.workers"), online_cpus());
  ck_assert_int_eq(get_i64(c, "runtime.mailbox_capacity"), 1024);
  ck_assert_int_eq(get_i64(c, "runtime.batch"), 64);
  ck_assert_int_eq(get_bool(c, "runtime.stats"), 1);
  ck_assert_int_eq(get_bool(c, "runtime.trace"), 0);
  ck_assert_int_eq(get_i64(c, "runtime.seed"), 0);
  ck_assert_int_eq(get_i64(c, "l1.size_bytes"), 1073741824);
  ck_assert_int_eq(get_i64(c, "l1.align_bytes"), 4096);
  ck_assert_str_eq(get_str(c, "l1.pinned"), "auto");
  ck_assert_int_eq(get_i64(c, "l1.numa_node"), -1);
  ck_assert_int_eq(get_i64(c, "l1.reserve_bytes"), 0);
  ck_assert_str_eq(get_str(c, "eviction.policy"), "lru");
  ck_assert_double_eq(get_f64(c, "eviction.trigger_watermark"), 0.8);
  ck_assert_double_eq(get_f64(c, "eviction.ratio"), 0.2);
  ck_assert_int_eq(get_i64(c, "eviction.interval_ms"), 1000);
  ck_assert_str_eq(get_str(c, "store_policy"), "default");
  ck_assert_str_eq(get_str(c, "prefetch_policy"), "default");
  ck_assert_int_eq(get_i64(c, "prefetch_max_in_flight"), 8);
  ck_assert_int_eq(get_bool(c, "prefetch_writeback"), 1);
  ck_assert_str_eq(get_str(c, "gpu.devices"), "all");
  ck_assert_int_eq(get_i64(c, "gpu.streams"), 2);
  kva_config_free(c);
}
END_TEST

START_TEST(default_config_has_one_disk_tier_in_a_temp_file) {
  kva_config *c = kva_config_default();
  ck_assert_uint_eq(config_l2_count(c), 1);
  ck_assert_str_eq(get_str(c, "l2[0].type"), "disk");
  ck_assert_str_eq(get_str(c, "l2[0].name"), "disk0");
  ck_assert_str_eq(get_str(c, "l2[0].path"), "");
  ck_assert_int_eq(get_i64(c, "l2[0].capacity_bytes"), 1073741824);
  ck_assert_int_eq(get_i64(c, "l2[0].slot_bytes"), 0);
  ck_assert_int_eq(get_bool(c, "l2[0].o_direct"), 1);
  ck_assert_int_eq(get_i64(c, "l2[0].queue_depth"), 64);
  ck_assert_int_eq(get_bool(c, "l2[0].persist"), 1);
  ck_assert_int_eq(get_i64(c, "l2[0].timeout_ms"), 1000);
  kva_config_free(c);
}
END_TEST

START_TEST(empty_file_config_has_no_tiers) {
  mp *m = mp_new();
  mp_map(m, 0);
  kva_config *c = load_ok(m);
  const char *s;
  ck_assert_uint_eq(config_l2_count(c), 0);
  ck_assert_int_eq(kva_config_get_str(c, "l2[0].type", &s), KVA_EINVAL);
  ck_assert_int_eq(get_i64(c, "l1.size_bytes"), 1073741824);
  kva_config_free(c);
}
END_TEST

START_TEST(workers_zero_means_deterministic_and_is_kept) {
  mp *m = mp_section_key("runtime", "workers");
  mp_int(m, 0);
  kva_config *c = load_ok(m);
  ck_assert_int_eq(get_i64(c, "runtime.workers"), 0);
  kva_config_free(c);
}
END_TEST

START_TEST(every_schema_default_validates) {
  for (size_t i = 0; i < config_schema_count(); i++) {
    const config_key *k = config_schema_at(i);
    config_value v;
    config_path p;
    char err[ERRLEN] = "";
    if (k->flags & (CONFIG_F_REQUIRED | CONFIG_F_TIER_NAME)) continue;
    config_path_init(&p);
    ck_assert_int_eq(config_default_value(k, 4, &v), KVA_OK);
    ck_assert_msg(config_validate_leaf(k, &v, &p, err, sizeof err) == KVA_OK, "%s: %s", k->path,
                  err);
    config_value_free(&v);
  }
}
END_TEST

START_TEST(float_key_accepts_an_integer_and_reads_it_as_float) {
  mp *m = mp_section_key("eviction", "ratio");
  mp_int(m, 1);
  kva_config *c = load_ok(m);
  ck_assert_double_eq(get_f64(c, "eviction.ratio"), 1.0);
  ck_assert_int_eq(config_get(c, "eviction.ratio")->kind, CONFIG_FLOAT);
  kva_config_free(c);
}
END_TEST

START_TEST(tiers_get_their_per_type_defaults) {
  mp *m = mp_l2(3);
  mp_tier(m, "mock");
  mp_tier(m, "redis");
  mp_named_tier(m, "disk", "ssd");
  kva_config *c = load_ok(m);
  ck_assert_str_eq(get_str(c, "l2[0].name"), "mock0");
  ck_assert_int_eq(get_i64(c, "l2[0].capacity_bytes"), 1073741824);
  ck_assert_int_eq(get_i64(c, "l2[0].bandwidth_bytes_per_s"), 0);
  ck_assert_double_eq(get_f64(c, "l2[0].fail_load_rate"), 0.0);
  ck_assert_str_eq(get_str(c, "l2[1].name"), "redis1");
  ck_assert_str_eq(get_str(c, "l2[1].addrs[0]"), "127.0.0.1:6379");
  ck_assert_int_eq(get_bool(c, "l2[1].cluster"), 0);
  ck_assert_str_eq(get_str(c, "l2[1].namespace"), "kvact");
  ck_assert_str_eq(get_str(c, "l2[1].password"), "");
  ck_assert_int_eq(get_i64(c, "l2[1].pipeline"), 64);
  ck_assert_int_eq(get_i64(c, "l2[1].capacity_bytes"), 0);
  ck_assert_str_eq(get_str(c, "l2[2].name"), "ssd");
  ck_assert_int_eq(get_i64(c, "l2[2].queue_depth"), 64);
  kva_config_free(c);
}
END_TEST

START_TEST(seed_holds_any_uint64) {
  mp *m = mp_section_key("runtime", "seed");
  mp_uint(m, UINT64_MAX);
  kva_config *c = load_ok(m);
  uint64_t u = 0;
  ck_assert_int_eq(config_get_u64(c, "runtime.seed", &u), KVA_OK);
  ck_assert_uint_eq(u, UINT64_MAX);
  ck_assert_uint_eq((uint64_t)get_i64(c, "runtime.seed"), UINT64_MAX); /* bit pattern */
  kva_config_free(c);
}
END_TEST

TCase *config_defaults_tcase(void) {
  TCase *tc = tcase_create("defaults");
  tcase_add_test(tc, default_config_has_the_documented_defaults);
  tcase_add_test(tc, default_config_has_one_disk_tier_in_a_temp_file);
  tcase_add_test(tc, empty_file_config_has_no_tiers);
  tcase_add_test(tc, workers_zero_means_deterministic_and_is_kept);
  tcase_add_test(tc, every_schema_default_validates);
  tcase_add_test(tc, float_key_accepts_an_integer_and_reads_it_as_float);
  tcase_add_test(tc, tiers_get_their_per_type_defaults);
  tcase_add_test(tc, seed_holds_any_uint64);
  return tc;
}

/* ---- kva_config_set --------------------------------------------------------- */

static void set_ok(kva_config *c, const char *path, const char *value) {
  char err[ERRLEN] = "";
  int rc = kva_config_set_err(c, path, value, err, sizeof err);
  ck_assert_msg(rc == KVA_OK, "set %s=%s: %d %s", path, value, rc, err);
}

/* The failure must leave every byte of the effective config as it was. */
static void set_fails(kva_config *c, const char *path, const char *value, int want_rc,
                      const char *want) {
  char err[ERRLEN] = "";
  size_t n0, n1;
  void *before = config_bytes(c, &n0);
  ck_assert_int_eq(kva_config_set_err(c, path, value, err, sizeof err), want_rc);
  ck_assert_str_eq(err, want);
  ck_assert_int_eq(kva_config_set(c, path, value), want_rc);
  void *after = config_bytes(c, &n1);
  ck_assert_uint_eq(n0, n1);
  ck_assert_int_eq(memcmp(before, after, n0), 0);
  free(before);
  free(after);
}

START_TEST(set_parses_text_by_the_key_type) {
  kva_config *c = kva_config_default();
  set_ok(c, "l1.size_bytes", "2147483648");
  ck_assert_int_eq(get_i64(c, "l1.size_bytes"), 2147483648);
  set_ok(c, "l1.numa_node", "-1");
  set_ok(c, "runtime.stats", "0");
  ck_assert_int_eq(get_bool(c, "runtime.stats"), 0);
  set_ok(c, "runtime.trace", "true");
  ck_assert_int_eq(get_bool(c, "runtime.trace"), 1);
  set_ok(c, "eviction.policy", "fifo");
  ck_assert_str_eq(get_str(c, "eviction.policy"), "fifo");
  set_ok(c, "eviction.ratio", "0.5");
  ck_assert_double_eq(get_f64(c, "eviction.ratio"), 0.5);
  set_ok(c, "eviction.ratio", "1");
  ck_assert_double_eq(get_f64(c, "eviction.ratio"), 1.0);
  set_ok(c, "l1.pinned", "false");
  ck_assert_int_eq(get_bool(c, "l1.pinned"), 0);
  set_ok(c, "l1.pinned", "auto");
  ck_assert_str_eq(get_str(c, "l1.pinned"), "auto");
  set_ok(c, "gpu.devices", "[0, 2]");
  ck_assert_int_eq(get_i64(c, "gpu.devices[1]"), 2);
  set_ok(c, "gpu.devices[1]", "5");
  ck_assert_int_eq(get_i64(c, "gpu.devices[1]"), 5);
  set_ok(c, "gpu.devices", "all");
  ck_assert_str_eq(get_str(c, "gpu.devices"), "all");
  set_ok(c, "runtime.workers", "0");
  ck_assert_int_eq(get_i64(c, "runtime.workers"), 0);
  set_ok(c, "l2[0].path", "/var/tmp/{x}.bin"); /* strings are verbatim, never JSON */
  ck_assert_str_eq(get_str(c, "l2[0].path"), "/var/tmp/{x}.bin");
  set_ok(c, "server.allowed_groups", "[\"kvact\", \"users\"]");
  ck_assert_str_eq(get_str(c, "server.allowed_groups[1]"), "users");
  set_ok(c, "server.allowed_groups[1]", "1234"); /* an element is a name, even of digits */
  ck_assert_str_eq(get_str(c, "server.allowed_groups[1]"), "1234");
  kva_config_free(c);
}
END_TEST

START_TEST(set_takes_json_for_composite_values) {
  kva_config *c = kva_config_default();
  set_ok(c, "l2", "[{\"type\":\"mock\",\"capacity_bytes\":1048576}]");
  ck_assert_uint_eq(config_l2_count(c), 1);
  ck_assert_str_eq(get_str(c, "l2[0].type"), "mock");
  ck_assert_str_eq(get_str(c, "l2[0].name"), "mock0");
  ck_assert_int_eq(get_i64(c, "l2[0].capacity_bytes"), 1048576);
  set_ok(c, "l2[1]", "{\"type\": \"redis\", \"addrs\": [\"a:1\", \"b:2\"]}"); /* appends */
  ck_assert_str_eq(get_str(c, "l2[1].addrs[1]"), "b:2");
  set_ok(c, "l2[1].addrs[0]", "10.0.0.1:7000");
  ck_assert_str_eq(get_str(c, "l2[1].addrs[0]"), "10.0.0.1:7000");
  set_ok(c, "l2[1].addrs", "[\"c:3\"]");
  ck_assert_str_eq(get_str(c, "l2[1].addrs[0]"), "c:3");
  set_ok(c, "l2[0].capacity_bytes", "4096");
  ck_assert_int_eq(get_i64(c, "l2[0].capacity_bytes"), 4096);
  set_ok(c, "l2[0].type", "disk"); /* keys valid for both types survive */
  ck_assert_str_eq(get_str(c, "l2[0].name"), "disk0");
  ck_assert_int_eq(get_i64(c, "l2[0].capacity_bytes"), 4096);
  kva_config_free(c);
}
END_TEST

START_TEST(set_can_add_tiers_to_a_config_without_l2) {
  mp *m = mp_new();
  mp_map(m, 0);
  kva_config *c = load_ok(m);
  set_fails(c, "l2[0].capacity_bytes", "1", KVA_ECONFIG,
            "l2[0]: no such element (the array has 0)");
  set_ok(c, "l2[0]", "{\"type\": \"mock\"}");
  ck_assert_str_eq(get_str(c, "l2[0].name"), "mock0");
  kva_config_free(c);
}
END_TEST

START_TEST(failed_set_leaves_the_config_unchanged) {
  kva_config *c = kva_config_default();
  set_fails(c, "l1.size_bytes", "abc", KVA_ECONFIG, "l1.size_bytes: expected integer, got \"abc\"");
  set_fails(c, "l1.size_bytes", "99999999999999999999", KVA_ECONFIG,
            "l1.size_bytes: 99999999999999999999 does not fit in 64 bits");
  set_fails(c, "eviction.ratio", "2", KVA_ECONFIG, "eviction.ratio: 2 is out of range [0, 1]");
  set_fails(c, "runtime.stats", "yes", KVA_ECONFIG,
            "runtime.stats: expected true, false, 1 or 0, got \"yes\"");
  set_fails(c, "runtime.workerz", "3", KVA_ECONFIG,
            "runtime.workerz: unknown key (did you mean \"runtime.workers\"?)");
  set_fails(c, "l2", "[{\"type\": \"disk\"", KVA_ECONFIG, "l2: invalid JSON at byte 16");
  set_fails(c, "l2", "[{\"name\": \"x\"}]", KVA_ECONFIG, "l2[0].type: missing required key");
  set_fails(c, "l2[0].addrs", "[\"a:1\"]", KVA_ECONFIG, "l2[0].addrs: unknown key");
  set_fails(c, "l2[0].queue_dept", "8", KVA_ECONFIG,
            "l2[0].queue_dept: unknown key (did you mean \"l2[0].queue_depth\"?)");
  set_fails(c, "l2[3]", "{\"type\": \"mock\"}", KVA_ECONFIG,
            "l2[3]: no such element (the array has 1)");
  set_fails(c, "l2[1]", "{\"type\": \"disk\", \"name\": \"disk0\"}", KVA_ECONFIG,
            "l2[1].name: duplicate tier name \"disk0\"");
  set_fails(c, "server.allowed_groups", "[\"kvact\", 7]", KVA_ECONFIG,
            "server.allowed_groups[1]: expected string, got integer");
  set_fails(c, "server.allowed_groups[0]", "", KVA_ECONFIG,
            "server.allowed_groups[0]: \"\" is not 1..255 bytes long");
  set_fails(c, "l1..size", "1", KVA_EINVAL, "l1..size: invalid path");
  set_fails(c, "l2[x]", "1", KVA_EINVAL, "l2[x]: invalid path");
  kva_config_free(c);
}
END_TEST

START_TEST(get_of_a_missing_path_or_another_type_is_einval) {
  kva_config *c = kva_config_default();
  int64_t i;
  double f;
  int b;
  const char *s;
  ck_assert_int_eq(kva_config_get_i64(c, "runtime.nope", &i), KVA_EINVAL);
  ck_assert_int_eq(kva_config_get_i64(c, "l2", &i), KVA_EINVAL);
  ck_assert_int_eq(kva_config_get_i64(c, "l2[7].capacity_bytes", &i), KVA_EINVAL);
  ck_assert_int_eq(kva_config_get_str(c, "runtime.workers", &s), KVA_EINVAL);
  ck_assert_int_eq(kva_config_get_bool(c, "l1.pinned", &b), KVA_EINVAL); /* "auto" */
  ck_assert_int_eq(kva_config_get_f64(c, "eviction.policy", &f), KVA_EINVAL);
  ck_assert_int_eq(kva_config_get_i64(c, "eviction.ratio", &i), KVA_EINVAL);
  ck_assert_int_eq(kva_config_get_i64(c, "", &i), KVA_EINVAL);
  ck_assert_int_eq(kva_config_get_i64(NULL, "runtime.workers", &i), KVA_EINVAL);
  ck_assert_int_eq(kva_config_get_i64(c, "runtime.workers", NULL), KVA_EINVAL);
  kva_config_free(c);
}
END_TEST

/* ---- plug-in nodes and copies ---------------------------------------------- */

START_TEST(plugin_tier_keeps_its_own_keys) {
  mp *m = mp_l2(2);
  mp_tier(m, "disk");
  mp_map(m, 4);
  mp_str(m, "type");
  mp_str(m, "s3");
  mp_str(m, "bucket");
  mp_str(m, "kv-cache");
  mp_str(m, "part_bytes");
  mp_int(m, 8388608);
  mp_str(m, "opts");
  mp_map(m, 1);
  mp_str(m, "retries");
  mp_arr(m, 0);
  kva_config *c = load_ok(m);
  const kva_config_node *n = config_l2_node(c, 1);
  const char *s;
  uint64_t u;
  ck_assert_ptr_nonnull(n);
  ck_assert_ptr_null(config_l2_node(c, 2));
  ck_assert_int_eq(kva_config_node_str(n, "type", &s), KVA_OK);
  ck_assert_str_eq(s, "s3");
  ck_assert_int_eq(kva_config_node_str(n, "name", &s), KVA_OK);
  ck_assert_str_eq(s, "s31");
  ck_assert_int_eq(kva_config_node_str(n, "bucket", &s), KVA_OK);
  ck_assert_str_eq(s, "kv-cache");
  ck_assert_int_eq(kva_config_node_u64(n, "part_bytes", &u), KVA_OK);
  ck_assert_uint_eq(u, 8388608);
  ck_assert_int_eq(config_node_get(n, "opts")->kind, CONFIG_MAP);
  kva_config_free(c);
}
END_TEST

START_TEST(node_accessors_read_builtin_defaults_and_refuse_other_types) {
  kva_config *c = kva_config_default();
  const kva_config_node *n = config_l2_node(c, 0);
  const char *s;
  uint64_t u;
  int b;
  ck_assert_int_eq(kva_config_node_u64(n, "capacity_bytes", &u), KVA_OK);
  ck_assert_uint_eq(u, 1073741824);
  ck_assert_int_eq(kva_config_node_str(n, "path", &s), KVA_OK);
  ck_assert_str_eq(s, "");
  ck_assert_int_eq(kva_config_node_bool(n, "o_direct", &b), KVA_OK);
  ck_assert_int_eq(b, 1);
  ck_assert_int_eq(kva_config_node_u64(n, "path", &u), KVA_EINVAL);
  ck_assert_int_eq(kva_config_node_str(n, "capacity_bytes", &s), KVA_EINVAL);
  ck_assert_int_eq(kva_config_node_str(n, "missing", &s), KVA_EINVAL);
  ck_assert_int_eq(kva_config_node_u64(NULL, "capacity_bytes", &u), KVA_EINVAL);
  kva_config_free(c);
}
END_TEST

START_TEST(copy_is_deep_and_independent) {
  kva_config *c = kva_config_default();
  set_ok(c, "runtime.workers", "3");
  kva_config *d = config_copy(c);
  ck_assert_ptr_nonnull(d);
  set_ok(c, "runtime.workers", "5");
  set_ok(c, "l2", "[]");
  ck_assert_int_eq(get_i64(d, "runtime.workers"), 3);
  ck_assert_uint_eq(config_l2_count(d), 1);
  kva_config_free(c);
  ck_assert_str_eq(get_str(d, "l2[0].name"), "disk0");
  kva_config_free(d);
  kva_config *e = config_copy(NULL);
  ck_assert_uint_eq(config_l2_count(e), 1);
  kva_config_free(e);
}
END_TEST

START_TEST(effective_config_round_trips_through_msgpack) {
  kva_config *c = kva_config_default(), *d = NULL;
  char err[ERRLEN];
  size_t n0, n1;
  set_ok(c, "l2",
         "[{\"type\":\"redis\",\"cluster\":true},{\"type\":\"x\",\"k\":[1,{\"a\":null}]}]");
  void *a = config_bytes(c, &n0);
  ck_assert_int_eq(kva_config_from_msgpack(a, n0, &d, err, sizeof err), KVA_OK);
  void *b = config_bytes(d, &n1);
  ck_assert_uint_eq(n0, n1);
  ck_assert_int_eq(memcmp(a, b, n0), 0);
  free(a);
  free(b);
  kva_config_free(c);
  kva_config_free(d);
}
END_TEST

TCase *config_set_tcase(void) {
  TCase *tc = tcase_create("set_get");
  tcase_add_test(tc, set_parses_text_by_the_key_type);
  tcase_add_test(tc, set_takes_json_for_composite_values);
  tcase_add_test(tc, set_can_add_tiers_to_a_config_without_l2);
  tcase_add_test(tc, failed_set_leaves_the_config_unchanged);
  tcase_add_test(tc, get_of_a_missing_path_or_another_type_is_einval);
  tcase_add_test(tc, plugin_tier_keeps_its_own_keys);
  tcase_add_test(tc, node_accessors_read_builtin_defaults_and_refuse_other_types);
  tcase_add_test(tc, copy_is_deep_and_independent);
  tcase_add_test(tc, effective_config_round_trips_through_msgpack);
  return tc;
}
