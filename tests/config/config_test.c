/*
 * config_test.c — the config package: every error class with its exact
 * text. The suite's other cases are in config_test_set.c (defaults,
 * set/get, nodes, copy), config_test_robust.c (hostile bytes, kvconf) and
 * config_test_get.c (the library's own getters). Usage: config_test KVCONF
 * SCHEMA.md EXAMPLE...
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/config/config_test.h"

const char *kvconf_path;
const char *schema_md_path;
char **example_paths;
int example_count;

/* ---- helpers ---------------------------------------------------------- */

mp *mp_new(void) {
  mp *m = malloc(sizeof *m);
  ck_assert_ptr_nonnull(m);
  msgpack_sbuffer_init(&m->sb);
  msgpack_packer_init(&m->pk, &m->sb, msgpack_sbuffer_write);
  return m;
}

void mp_free(mp *m) {
  msgpack_sbuffer_destroy(&m->sb);
  free(m);
}

void mp_map(mp *m, uint32_t n) {
  msgpack_pack_map(&m->pk, n);
}
void mp_arr(mp *m, uint32_t n) {
  msgpack_pack_array(&m->pk, n);
}
void mp_str(mp *m, const char *s) {
  msgpack_pack_str_with_body(&m->pk, s, strlen(s));
}
void mp_int(mp *m, int64_t v) {
  msgpack_pack_int64(&m->pk, v);
}
void mp_uint(mp *m, uint64_t v) {
  msgpack_pack_uint64(&m->pk, v);
}
void mp_dbl(mp *m, double v) {
  msgpack_pack_double(&m->pk, v);
}
void mp_bool(mp *m, int b) {
  b ? msgpack_pack_true(&m->pk) : msgpack_pack_false(&m->pk);
}

mp *mp_section_key(const char *section, const char *key) {
  mp *m = mp_new();
  mp_map(m, 1);
  mp_str(m, section);
  mp_map(m, 1);
  mp_str(m, key);
  return m;
}

mp *mp_l2(uint32_t n) {
  mp *m = mp_new();
  mp_map(m, 1);
  mp_str(m, "l2");
  mp_arr(m, n);
  return m;
}

void mp_tier(mp *m, const char *type) {
  mp_map(m, 1);
  mp_str(m, "type");
  mp_str(m, type);
}

void mp_named_tier(mp *m, const char *type, const char *name) {
  mp_map(m, 2);
  mp_str(m, "type");
  mp_str(m, type);
  mp_str(m, "name");
  mp_str(m, name);
}

kva_config *load_ok(mp *m) {
  kva_config *c = NULL;
  char err[ERRLEN] = "";
  int rc = kva_config_from_msgpack(m->sb.data, m->sb.size, &c, err, sizeof err);
  mp_free(m);
  ck_assert_msg(rc == KVA_OK, "load failed (%d): %s", rc, err);
  ck_assert_ptr_nonnull(c);
  return c;
}

void load_fails(mp *m, const char *want) {
  kva_config *c = (kva_config *)&c; /* must be reset to NULL */
  char err[ERRLEN] = "";
  int rc = kva_config_from_msgpack(m->sb.data, m->sb.size, &c, err, sizeof err);
  mp_free(m);
  ck_assert_int_eq(rc, KVA_ECONFIG);
  ck_assert_ptr_null(c);
  ck_assert_str_eq(err, want);
}

void *config_bytes(const kva_config *c, size_t *len) {
  void *buf = NULL;
  ck_assert_int_eq(kva_config_to_msgpack(c, &buf, len), KVA_OK);
  return buf;
}

/* ---- unknown keys ------------------------------------------------------ */

START_TEST(unknown_key_suggests_the_closest_sibling) {
  mp *m = mp_section_key("runtime", "workerz");
  mp_int(m, 4);
  load_fails(m, "runtime.workerz: unknown key (did you mean \"runtime.workers\"?)");
}
END_TEST

START_TEST(unknown_key_far_from_every_sibling_has_no_suggestion) {
  mp *m = mp_section_key("runtime", "completely_different");
  mp_int(m, 4);
  load_fails(m, "runtime.completely_different: unknown key");
}
END_TEST

START_TEST(unknown_top_level_key_suggests_a_section) {
  mp *m = mp_section_key("evicton", "policy");
  mp_str(m, "lru");
  load_fails(m, "evicton: unknown key (did you mean \"eviction\"?)");
}
END_TEST

START_TEST(unknown_tier_key_suggests_a_key_of_that_type) {
  mp *m = mp_l2(1);
  mp_map(m, 2);
  mp_str(m, "type");
  mp_str(m, "mock");
  mp_str(m, "capcity_bytes");
  mp_int(m, 1);
  load_fails(m, "l2[0].capcity_bytes: unknown key (did you mean \"l2[0].capacity_bytes\"?)");
}
END_TEST

START_TEST(key_of_another_tier_type_is_unknown) {
  mp *m = mp_l2(1);
  mp_map(m, 2);
  mp_str(m, "type");
  mp_str(m, "redis");
  mp_str(m, "o_direct");
  mp_bool(m, 1);
  load_fails(m, "l2[0].o_direct: unknown key");
}
END_TEST

/* ---- types and ranges -------------------------------------------------- */

START_TEST(wrong_type_names_what_was_expected_and_found) {
  mp *m = mp_section_key("l1", "size_bytes");
  mp_str(m, "1GiB");
  load_fails(m, "l1.size_bytes: expected integer, got string");
  m = mp_section_key("runtime", "stats");
  mp_int(m, 1);
  load_fails(m, "runtime.stats: expected boolean, got integer");
  m = mp_section_key("eviction", "ratio");
  mp_str(m, "half");
  load_fails(m, "eviction.ratio: expected number, got string");
  m = mp_new();
  mp_map(m, 1);
  mp_str(m, "runtime");
  mp_arr(m, 0);
  load_fails(m, "runtime: expected a map, got array");
}
END_TEST

START_TEST(integer_given_as_float_is_rejected) {
  mp *m = mp_section_key("l1", "size_bytes");
  mp_dbl(m, 1024.0);
  load_fails(m, "l1.size_bytes: expected integer, got float");
}
END_TEST

START_TEST(float_out_of_range_is_printed_as_float) {
  mp *m = mp_section_key("eviction", "ratio");
  mp_dbl(m, 1.5);
  load_fails(m, "eviction.ratio: 1.5 is out of range [0, 1]");
  m = mp_section_key("eviction", "trigger_watermark");
  mp_dbl(m, NAN);
  load_fails(m, "eviction.trigger_watermark: nan is out of range [0, 1]");
}
END_TEST

START_TEST(integer_out_of_range_is_printed_as_integer) {
  mp *m = mp_section_key("l1", "numa_node");
  mp_int(m, -5);
  load_fails(m, "l1.numa_node: -5 is out of range [-1, 1023]");
  m = mp_section_key("runtime", "workers");
  mp_int(m, 1025);
  load_fails(m, "runtime.workers: 1025 is out of range [0, 1024]");
  m = mp_section_key("eviction", "ratio");
  mp_int(m, 2);
  load_fails(m, "eviction.ratio: 2 is out of range [0, 1]");
}
END_TEST

START_TEST(align_bytes_must_be_a_power_of_two) {
  mp *m = mp_section_key("l1", "align_bytes");
  mp_int(m, 100);
  load_fails(m, "l1.align_bytes: 100 is not a power of two");
  m = mp_section_key("l1", "align_bytes");
  mp_int(m, 32);
  load_fails(m, "l1.align_bytes: 32 is out of range [64, 2097152]");
}
END_TEST

START_TEST(pinned_takes_true_false_or_auto) {
  mp *m = mp_section_key("l1", "pinned");
  mp_str(m, "sometimes");
  load_fails(m, "l1.pinned: \"sometimes\" is not one of auto, true, false");
  m = mp_section_key("l1", "pinned");
  mp_int(m, 1);
  load_fails(m, "l1.pinned: expected boolean or \"auto\", got integer");
  m = mp_section_key("l1", "pinned");
  mp_bool(m, 1);
  kva_config *c = load_ok(m);
  int b = 0;
  ck_assert_int_eq(kva_config_get_bool(c, "l1.pinned", &b), KVA_OK);
  ck_assert_int_eq(b, 1);
  kva_config_free(c);
}
END_TEST

START_TEST(gpu_devices_takes_all_or_ordinals) {
  mp *m = mp_section_key("gpu", "devices");
  mp_str(m, "some");
  load_fails(m, "gpu.devices: expected \"all\" or an array of integers, got \"some\"");
  m = mp_section_key("gpu", "devices");
  mp_arr(m, 2);
  mp_int(m, 0);
  mp_int(m, -1);
  load_fails(m, "gpu.devices[1]: -1 is out of range [0, 1023]");
  m = mp_section_key("gpu", "devices");
  mp_arr(m, 2);
  mp_int(m, 0);
  mp_int(m, 3);
  kva_config *c = load_ok(m);
  int64_t d = 0;
  ck_assert_int_eq(kva_config_get_i64(c, "gpu.devices[1]", &d), KVA_OK);
  ck_assert_int_eq(d, 3);
  kva_config_free(c);
}
END_TEST

START_TEST(allowed_groups_are_names_of_1_to_255_bytes) {
  char long_name[257];
  memset(long_name, 'g', 256);
  long_name[256] = 0;
  mp *m = mp_section_key("server", "allowed_groups");
  mp_str(m, "kvact");
  load_fails(m, "server.allowed_groups: expected array of strings, got string");
  m = mp_section_key("server", "allowed_groups");
  mp_arr(m, 2);
  mp_str(m, "kvact");
  mp_int(m, 100);
  load_fails(m, "server.allowed_groups[1]: expected string, got integer");
  m = mp_section_key("server", "allowed_groups");
  mp_arr(m, 1);
  mp_str(m, "");
  load_fails(m, "server.allowed_groups[0]: \"\" is not 1..255 bytes long");
  m = mp_section_key("server", "allowed_groups");
  mp_arr(m, 1);
  msgpack_pack_str_with_body(&m->pk, "kv\0act", 6);
  load_fails(m, "server.allowed_groups[0]: string contains a NUL byte");
  m = mp_section_key("server", "allowed_groups");
  mp_arr(m, 1);
  mp_str(m, long_name);
  kva_config *c = NULL;
  char err[ERRLEN] = "";
  ck_assert_int_eq(kva_config_from_msgpack(m->sb.data, m->sb.size, &c, err, sizeof err),
                   KVA_ECONFIG);
  mp_free(m);
  ck_assert_msg(strstr(err, "server.allowed_groups[0]: ") && strstr(err, "is not 1..255 bytes"),
                "%s", err);
  m = mp_section_key("server", "allowed_groups");
  mp_arr(m, 2);
  mp_str(m, "kvact");
  mp_str(m, long_name + 1); /* 255 bytes */
  c = load_ok(m);
  const char *g = NULL;
  ck_assert_int_eq(kva_config_get_str(c, "server.allowed_groups[1]", &g), KVA_OK);
  ck_assert_uint_eq(strlen(g), 255);
  kva_config_free(c);
}
END_TEST

/* ---- l2 ------------------------------------------------------------------ */

START_TEST(tier_without_type_is_missing_a_required_key) {
  mp *m = mp_l2(3);
  mp_tier(m, "disk");
  mp_tier(m, "mock");
  mp_map(m, 1);
  mp_str(m, "name");
  mp_str(m, "x");
  load_fails(m, "l2[2].type: missing required key");
}
END_TEST

START_TEST(redis_addrs_must_be_host_port_strings) {
  static const char *bad[] = {"foo", ":6379", "host:", "host:0", "host:65536", "h:63a9"};
  mp *m = mp_l2(2);
  mp_tier(m, "disk");
  mp_map(m, 2);
  mp_str(m, "type");
  mp_str(m, "redis");
  mp_str(m, "addrs");
  mp_arr(m, 1);
  mp_int(m, 42);
  load_fails(m, "l2[1].addrs[0]: expected \"host:port\", got 42");
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char want[128];
    m = mp_l2(1);
    mp_map(m, 2);
    mp_str(m, "type");
    mp_str(m, "redis");
    mp_str(m, "addrs");
    mp_arr(m, 2);
    mp_str(m, "[::1]:6379");
    mp_str(m, bad[i]);
    snprintf(want, sizeof want, "l2[0].addrs[1]: expected \"host:port\", got \"%s\"", bad[i]);
    load_fails(m, want);
  }
}
END_TEST

START_TEST(tier_names_must_be_unique_including_defaults) {
  mp *m = mp_l2(2);
  mp_tier(m, "disk");
  mp_named_tier(m, "mock", "disk0");
  load_fails(m, "l2[1].name: duplicate tier name \"disk0\"");
  m = mp_l2(2);
  mp_named_tier(m, "mock", "fast");
  mp_named_tier(m, "disk", "fast");
  load_fails(m, "l2[1].name: duplicate tier name \"fast\"");
}
END_TEST

START_TEST(tier_names_are_1_to_31_bytes_and_not_L1) {
  mp *m = mp_l2(1);
  mp_named_tier(m, "disk", "");
  load_fails(m, "l2[0].name: must not be empty");
  m = mp_l2(1);
  mp_named_tier(m, "disk", "a-name-that-is-longer-than-31-bytes");
  load_fails(m, "l2[0].name: \"a-name-that-is-longer-than-31-bytes\" is longer than 31 bytes");
  m = mp_l2(1);
  mp_named_tier(m, "disk", "L1");
  load_fails(m, "l2[0].name: \"L1\" is reserved for the L1 tier");
}
END_TEST

START_TEST(at_most_eight_tiers) {
  mp *m = mp_l2(9);
  for (int i = 0; i < 9; i++) mp_tier(m, "mock");
  load_fails(m, "l2: at most 8 tiers, got 9");
}
END_TEST

START_TEST(tier_must_be_a_map_and_l2_an_array) {
  mp *m = mp_l2(1);
  mp_int(m, 3);
  load_fails(m, "l2[0]: expected a map, got integer");
  m = mp_new();
  mp_map(m, 1);
  mp_str(m, "l2");
  mp_map(m, 0);
  load_fails(m, "l2: expected an array of tier maps, got map");
}
END_TEST

/* ---- structure ------------------------------------------------------------ */

START_TEST(root_must_be_a_map) {
  mp *m = mp_new();
  mp_arr(m, 1);
  mp_int(m, 1);
  load_fails(m, "<root>: expected a map, got array");
}
END_TEST

START_TEST(map_keys_must_be_strings) {
  mp *m = mp_new();
  mp_map(m, 1);
  mp_str(m, "runtime");
  mp_map(m, 1);
  mp_int(m, 1);
  mp_int(m, 2);
  load_fails(m, "runtime: expected string map keys, got integer");
  m = mp_l2(1);
  mp_map(m, 2);
  mp_str(m, "type");
  mp_str(m, "s3");
  mp_str(m, "opts");
  mp_map(m, 1);
  mp_bool(m, 1);
  mp_int(m, 2);
  load_fails(m, "l2[0].opts: expected string map keys, got boolean");
}
END_TEST

START_TEST(empty_and_odd_keys_are_shown_escaped) {
  mp *m = mp_section_key("runtime", "");
  mp_int(m, 1);
  load_fails(m, "runtime.\"\": unknown key");
  m = mp_section_key("l1", "size\n\x01");
  mp_int(m, 1);
  load_fails(m, "l1.size\\x0a\\x01: unknown key");
}
END_TEST

START_TEST(duplicate_keys_are_rejected) {
  mp *m = mp_new();
  mp_map(m, 1);
  mp_str(m, "runtime");
  mp_map(m, 2);
  mp_str(m, "workers");
  mp_int(m, 1);
  mp_str(m, "workers");
  mp_int(m, 2);
  load_fails(m, "runtime.workers: duplicate key");
}
END_TEST

START_TEST(binary_values_are_rejected_with_their_path) {
  mp *m = mp_section_key("runtime", "workers");
  msgpack_pack_bin_with_body(&m->pk, "ab", 2);
  load_fails(m, "runtime.workers: msgpack binary values are not supported");
}
END_TEST

START_TEST(truncated_data_reports_its_length) {
  mp *m = mp_section_key("runtime", "workers");
  mp_int(m, 4);
  m->sb.size -= 3; /* cut inside the key "workers" */
  char want[64];
  snprintf(want, sizeof want, "<input>: truncated msgpack data (%zu bytes)", m->sb.size);
  load_fails(m, want);
  m = mp_new();
  load_fails(m, "<input>: truncated msgpack data (0 bytes)");
}
END_TEST

START_TEST(invalid_byte_reports_its_offset) {
  mp *m = mp_new();
  mp_map(m, 1);
  msgpack_sbuffer_write(&m->sb, "\xc1\x01", 2);
  load_fails(m, "<input>: invalid msgpack data at byte 1");
}
END_TEST

START_TEST(trailing_bytes_after_the_root_map) {
  mp *m = mp_new();
  mp_map(m, 0);
  mp_int(m, 1);
  mp_int(m, 2);
  load_fails(m, "<input>: 2 trailing bytes after the root map");
}
END_TEST

/* An array32 header claiming 2^32-1 elements must not allocate them. */
START_TEST(huge_container_header_is_truncated_not_allocated) {
  mp *m = mp_new();
  mp_map(m, 1);
  mp_str(m, "l2");
  msgpack_sbuffer_write(&m->sb, "\xdd\xff\xff\xff\xff", 5);
  char want[64];
  snprintf(want, sizeof want, "<input>: truncated msgpack data (%zu bytes)", m->sb.size);
  load_fails(m, want);
}
END_TEST

START_TEST(nesting_deeper_than_16_is_rejected) {
  mp *m = mp_l2(1); /* depth 2 */
  mp_map(m, 2);     /* depth 3 */
  mp_str(m, "type");
  mp_str(m, "plugin");
  mp_str(m, "deep");
  size_t at = 0;
  for (int d = 4; d <= 17; d++) {
    if (d == 17) at = m->sb.size;
    mp_arr(m, 1);
  }
  mp_int(m, 0);
  char want[80];
  snprintf(want, sizeof want, "<input>: nesting deeper than 16 levels at byte %zu", at);
  load_fails(m, want);
}
END_TEST

START_TEST(buffer_over_1_mib_is_rejected) {
  size_t len = CONFIG_MAX_BYTES + 1;
  char *buf = calloc(1, len), err[ERRLEN];
  kva_config *c = NULL;
  ck_assert_int_eq(kva_config_from_msgpack(buf, len, &c, err, sizeof err), KVA_ECONFIG);
  ck_assert_str_eq(err, "<input>: 1048577 bytes, over the 1 MiB limit");
  free(buf);
}
END_TEST

static char *tmp_path(const char *name) {
  const char *dir = getenv("TEST_TMPDIR");
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", dir ? dir : "/tmp", name);
  return path;
}

START_TEST(file_over_1_mib_is_rejected_before_reading) {
  char *path = tmp_path("big.msgpack"), err[ERRLEN], want[ERRLEN];
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fseek(f, CONFIG_MAX_BYTES, SEEK_SET), 0);
  fputc(0, f);
  fclose(f);
  kva_config *c = NULL;
  ck_assert_int_eq(kva_config_from_file(path, &c, err, sizeof err), KVA_ECONFIG);
  snprintf(want, sizeof want, "%s: file is 1048577 bytes, over the 1 MiB limit", path);
  ck_assert_str_eq(err, want);
  ck_assert_ptr_null(c);
}
END_TEST

START_TEST(unreadable_file_names_the_reason) {
  char err[ERRLEN], want[ERRLEN];
  kva_config *c = NULL;
  const char *path = "/nonexistent/kvact.msgpack";
  ck_assert_int_eq(kva_config_from_file(path, &c, err, sizeof err), KVA_ECONFIG);
  snprintf(want, sizeof want, "%s: cannot read: %s", path, strerror(ENOENT));
  ck_assert_str_eq(err, want);
  const char *dir = getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp";
  ck_assert_int_eq(kva_config_from_file(dir, &c, err, sizeof err), KVA_ECONFIG);
  snprintf(want, sizeof want, "%s: cannot read: %s", dir, strerror(EISDIR));
  ck_assert_str_eq(err, want);
}
END_TEST

START_TEST(file_with_a_valid_config_loads) {
  char *path = tmp_path("ok.msgpack"), err[ERRLEN];
  mp *m = mp_section_key("runtime", "workers");
  mp_int(m, 3);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  fwrite(m->sb.data, 1, m->sb.size, f);
  fclose(f);
  mp_free(m);
  kva_config *c = NULL;
  int64_t w = 0;
  ck_assert_int_eq(kva_config_from_file(path, &c, err, sizeof err), KVA_OK);
  ck_assert_int_eq(kva_config_get_i64(c, "runtime.workers", &w), KVA_OK);
  ck_assert_int_eq(w, 3);
  kva_config_free(c);
}
END_TEST

TCase *config_errors_tcase(void) {
  TCase *tc = tcase_create("errors");
  tcase_add_test(tc, unknown_key_suggests_the_closest_sibling);
  tcase_add_test(tc, unknown_key_far_from_every_sibling_has_no_suggestion);
  tcase_add_test(tc, unknown_top_level_key_suggests_a_section);
  tcase_add_test(tc, unknown_tier_key_suggests_a_key_of_that_type);
  tcase_add_test(tc, key_of_another_tier_type_is_unknown);
  tcase_add_test(tc, wrong_type_names_what_was_expected_and_found);
  tcase_add_test(tc, integer_given_as_float_is_rejected);
  tcase_add_test(tc, float_out_of_range_is_printed_as_float);
  tcase_add_test(tc, integer_out_of_range_is_printed_as_integer);
  tcase_add_test(tc, align_bytes_must_be_a_power_of_two);
  tcase_add_test(tc, pinned_takes_true_false_or_auto);
  tcase_add_test(tc, gpu_devices_takes_all_or_ordinals);
  tcase_add_test(tc, allowed_groups_are_names_of_1_to_255_bytes);
  tcase_add_test(tc, tier_without_type_is_missing_a_required_key);
  tcase_add_test(tc, redis_addrs_must_be_host_port_strings);
  tcase_add_test(tc, tier_names_must_be_unique_including_defaults);
  tcase_add_test(tc, tier_names_are_1_to_31_bytes_and_not_L1);
  tcase_add_test(tc, at_most_eight_tiers);
  tcase_add_test(tc, tier_must_be_a_map_and_l2_an_array);
  tcase_add_test(tc, root_must_be_a_map);
  tcase_add_test(tc, map_keys_must_be_strings);
  tcase_add_test(tc, empty_and_odd_keys_are_shown_escaped);
  tcase_add_test(tc, duplicate_keys_are_rejected);
  tcase_add_test(tc, binary_values_are_rejected_with_their_path);
  tcase_add_test(tc, truncated_data_reports_its_length);
  tcase_add_test(tc, invalid_byte_reports_its_offset);
  tcase_add_test(tc, trailing_bytes_after_the_root_map);
  tcase_add_test(tc, huge_container_header_is_truncated_not_allocated);
  tcase_add_test(tc, nesting_deeper_than_16_is_rejected);
  tcase_add_test(tc, buffer_over_1_mib_is_rejected);
  tcase_add_test(tc, file_over_1_mib_is_rejected_before_reading);
  tcase_add_test(tc, unreadable_file_names_the_reason);
  tcase_add_test(tc, file_with_a_valid_config_loads);
  return tc;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: config_test KVCONF SCHEMA.md EXAMPLE.json...\n");
    return 2;
  }
  kvconf_path = argv[1];
  schema_md_path = argv[2];
  example_paths = argv + 3;
  example_count = argc - 3;
  Suite *s = suite_create("config");
  suite_add_tcase(s, config_errors_tcase());
  suite_add_tcase(s, config_defaults_tcase());
  suite_add_tcase(s, config_set_tcase());
  suite_add_tcase(s, config_robust_tcase());
  suite_add_tcase(s, config_kvconf_tcase());
  suite_add_tcase(s, config_getters_tcase());
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
