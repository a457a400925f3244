/*
 * config_test_get.c — the library's own getters (config_i64 and the rest):
 * they read every default from the schema, take explicit values over it,
 * read l1.pinned's "auto" as CONFIG_AUTO, and abort (debug builds) on a
 * path the schema lacks or of another type (part of the config suite; see
 * config_test.c; the release behaviour is config_getters_release_test's).
 */
#include <signal.h>
#include <stdlib.h>

#include "tests/config/config_test.h"

/* A config with no explicit value: the schema's defaults alone. */
static kva_config *defaults_only(void) {
  mp *m = mp_new();
  mp_map(m, 0);
  return load_ok(m);
}

static void set_ok(kva_config *c, const char *path, const char *value) {
  char err[ERRLEN] = "";
  ck_assert_msg(kva_config_set_err(c, path, value, err, sizeof err) == KVA_OK, "%s", err);
}

static int64_t as_i64(const config_value *v) {
  return v->kind == CONFIG_INT ? v->as.i : (int64_t)v->as.u;
}

/* The getter of k's type returns the default schema.c writes for k. */
static void assert_reads_default(const kva_config *c, const config_key *k) {
  config_value v;
  ck_assert_int_eq(config_default_value(k, config_online_cpus(), &v), KVA_OK);
  switch (k->type) {
  case CONFIG_T_INT:
    ck_assert_msg(config_i64(c, k->path) == as_i64(&v), "%s", k->path);
    break;
  case CONFIG_T_FLOAT:
    ck_assert_msg(config_f64(c, k->path) == (v.kind == CONFIG_FLOAT ? v.as.f : (double)as_i64(&v)),
                  "%s", k->path);
    break;
  case CONFIG_T_BOOL:
    ck_assert_msg(config_bool(c, k->path) == (v.as.b != 0), "%s", k->path);
    break;
  case CONFIG_T_STR:
  case CONFIG_T_ENUM:
    ck_assert_str_eq(config_str(c, k->path), v.as.str.ptr);
    break;
  case CONFIG_T_PINNED:
    ck_assert_str_eq(v.as.str.ptr, "auto");
    ck_assert_int_eq(config_bool_auto(c, k->path), CONFIG_AUTO);
    break;
  default: /* composites: read as nodes, not through these getters */
    break;
  }
  config_value_free(&v);
}

START_TEST(getters_read_every_top_level_default_from_the_schema) {
  kva_config *c = defaults_only();
  int read = 0;
  for (size_t i = 0; i < config_schema_count(); i++) {
    const config_key *k = config_schema_at(i);
    if (k->scope) continue;
    assert_reads_default(c, k);
    read++;
  }
  ck_assert_int_ge(read, 20);
  ck_assert_int_eq(config_i64(c, "l1.size_bytes"), 1073741824); /* one spot check by hand */
  kva_config_free(c);
}
END_TEST

START_TEST(getters_read_explicit_values_over_the_defaults) {
  kva_config *c = defaults_only();
  set_ok(c, "runtime.batch", "7");
  set_ok(c, "runtime.trace", "true");
  set_ok(c, "eviction.policy", "fifo");
  set_ok(c, "eviction.ratio", "1");
  set_ok(c, "l1.numa_node", "-1");
  ck_assert_int_eq(config_i64(c, "runtime.batch"), 7);
  ck_assert(config_bool(c, "runtime.trace"));
  ck_assert_str_eq(config_str(c, "eviction.policy"), "fifo");
  ck_assert(config_f64(c, "eviction.ratio") == 1.0); /* an integer read as a number */
  ck_assert_int_eq(config_i64(c, "l1.numa_node"), -1);
  kva_config_free(c);
}
END_TEST

START_TEST(pinned_reads_as_true_false_or_auto) {
  kva_config *c = defaults_only();
  ck_assert_int_eq(config_bool_auto(c, "l1.pinned"), CONFIG_AUTO);
  set_ok(c, "l1.pinned", "true");
  ck_assert_int_eq(config_bool_auto(c, "l1.pinned"), CONFIG_TRUE);
  set_ok(c, "l1.pinned", "false");
  ck_assert_int_eq(config_bool_auto(c, "l1.pinned"), CONFIG_FALSE);
  set_ok(c, "l1.pinned", "auto");
  ck_assert_int_eq(config_bool_auto(c, "l1.pinned"), CONFIG_AUTO);
  ck_assert_int_eq(config_bool_auto(c, "runtime.stats"), CONFIG_TRUE); /* any boolean */
  kva_config_free(c);
}
END_TEST

/* Each of these ends in abort() in the forked test process. */
START_TEST(getter_of_a_path_the_schema_lacks_aborts) {
  config_i64(defaults_only(), "l1.size_byte");
}
END_TEST

START_TEST(getter_of_another_type_aborts) {
  config_str(defaults_only(), "l1.size_bytes");
}
END_TEST

START_TEST(bool_auto_of_another_string_aborts) {
  config_bool_auto(defaults_only(), "eviction.policy");
}
END_TEST

START_TEST(getter_of_a_section_aborts) {
  config_bool(defaults_only(), "runtime");
}
END_TEST

TCase *config_getters_tcase(void) {
  TCase *tc = tcase_create("getters");
  tcase_add_test(tc, getters_read_every_top_level_default_from_the_schema);
  tcase_add_test(tc, getters_read_explicit_values_over_the_defaults);
  tcase_add_test(tc, pinned_reads_as_true_false_or_auto);
  tcase_add_test_raise_signal(tc, getter_of_a_path_the_schema_lacks_aborts, SIGABRT);
  tcase_add_test_raise_signal(tc, getter_of_another_type_aborts, SIGABRT);
  tcase_add_test_raise_signal(tc, bool_auto_of_another_string_aborts, SIGABRT);
  tcase_add_test_raise_signal(tc, getter_of_a_section_aborts, SIGABRT);
  return tc;
}
