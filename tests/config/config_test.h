/*
 * config_test.h — helpers shared by the config suite's files: msgpack
 * inputs built with msgpack_pack*, and loading them with exact-error
 * checks.
 */
#ifndef KVA_TESTS_CONFIG_TEST_H
#define KVA_TESTS_CONFIG_TEST_H

#include <check.h>
#include <msgpack.h>
#include <string.h>

#include "config/config_internal.h"
#include "kvact.h"

#define ERRLEN 512

typedef struct mp {
  msgpack_sbuffer sb;
  msgpack_packer pk;
} mp;

mp *mp_new(void);
void mp_free(mp *m);
void mp_map(mp *m, uint32_t n);
void mp_arr(mp *m, uint32_t n);
void mp_str(mp *m, const char *s);
void mp_int(mp *m, int64_t v);
void mp_uint(mp *m, uint64_t v);
void mp_dbl(mp *m, double v);
void mp_bool(mp *m, int b);
/* {section: {key: ...}}: the caller packs the value. */
mp *mp_section_key(const char *section, const char *key);
/* {"l2": [...n entries...]}: the caller packs the entries. */
mp *mp_l2(uint32_t n);
/* {type: <type>} and {type: <type>, name: <name>} l2 entries. */
void mp_tier(mp *m, const char *type);
void mp_named_tier(mp *m, const char *type, const char *name);

/* Loads m (and frees it); fails the test unless it loads. */
kva_config *load_ok(mp *m);
/* Loads m (and frees it); fails the test unless the error is exactly want. */
void load_fails(mp *m, const char *want);
/* The config's kva_config_to_msgpack bytes (malloc'd). */
void *config_bytes(const kva_config *c, size_t *len);

TCase *config_errors_tcase(void);
TCase *config_defaults_tcase(void);
TCase *config_set_tcase(void);
TCase *config_robust_tcase(void);
TCase *config_kvconf_tcase(void);
TCase *config_getters_tcase(void);

/* From the command line (Bazel args): the tool and the files it checks. */
extern const char *kvconf_path;
extern const char *schema_md_path;
extern char **example_paths;
extern int example_count;

#endif
