/*
 * config/config_internal.h — the config package's internal API.
 *
 * A config is kept twice: the *explicit* tree (exactly what the file or the
 * setter gave, the source of truth) and the *effective* tree (explicit
 * values plus every default, in schema order), which the getters, the
 * plug-in node views and kva_config_to_msgpack read. Both are trees of
 * config_value. One schema table (schema.c) drives validation, defaults,
 * text parsing for kva_config_set and the generated documentation.
 *
 * Nothing here prints or aborts on bad input: every problem comes back as
 * KVA_ECONFIG with "<path>: <problem>" written into the caller's buffer.
 * (The library's own getters, config_i64 and the rest, abort in debug
 * builds on a path the schema lacks: that is a bug of the code, not input.)
 */
#ifndef KVACT_CONFIG_INTERNAL_H
#define KVACT_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvact.h"

#define CONFIG_MAX_BYTES (1u << 20) /* largest config file / msgpack buffer */
#define CONFIG_MAX_DEPTH 16         /* deepest nesting of maps and arrays */
#define CONFIG_MAX_TIERS 8          /* = the tier[] slots of kva_tier_hits, minus L1 */
#define CONFIG_NAME_MAX 31          /* tier names fit kva_tier_hits.tier[].name[32] */

/* ------------------------------------------------------------------------
 * Value trees (value.c)
 * ------------------------------------------------------------------------ */
typedef enum {
  CONFIG_NIL,
  CONFIG_BOOL,
  CONFIG_UINT, /* integers >= 0, like msgpack's positive integers */
  CONFIG_INT,  /* integers < 0 only: constructors normalise */
  CONFIG_FLOAT,
  CONFIG_STR,
  CONFIG_ARRAY,
  CONFIG_MAP,
} config_kind;

typedef struct config_value config_value;
typedef struct config_entry config_entry;

/* A tree owns all of its children and strings. */
struct config_value {
  config_kind kind;
  union {
    int b;
    uint64_t u;
    int64_t i;
    double f;
    struct {
      char *ptr; /* NUL-terminated; may also hold NULs (len counts them) */
      size_t len;
    } str;
    struct {
      config_value *items;
      size_t len, cap;
    } array;
    struct {
      config_entry *items; /* in insertion order: files keep their order */
      size_t len, cap;
    } map;
  } as;
};

struct config_entry {
  char *key; /* NUL-terminated copy */
  size_t klen;
  config_value value;
};

config_value config_value_nil(void);
config_value config_value_bool(int b);
config_value config_value_int(int64_t i);
config_value config_value_uint(uint64_t u);
config_value config_value_float(double f);
int config_value_str(config_value *out, const char *s, size_t len);
int config_value_array(config_value *out, size_t cap);
int config_value_map(config_value *out, size_t cap);
void config_value_free(config_value *v);
int config_value_copy(config_value *dst, const config_value *src);
/* Both take ownership of *item / *val (also on failure, which frees it). */
int config_array_push(config_value *arr, config_value *item);
int config_map_put(config_value *map, const char *key, size_t klen, config_value *val);
config_value *config_map_find(const config_value *map, const char *key, size_t klen);
config_value *config_map_get(const config_value *map, const char *key);
/* Index of the first entry whose key appeared earlier, -1 if none, or
 * KVA_ENOMEM (< -1). O(n log n): plug-in maps may be large. */
long config_map_duplicate(const config_value *map);
int config_value_depth(const config_value *v);
const char *config_kind_name(config_kind k);
/* Writes s escaped (non-printables as \xNN), cut to about max bytes. */
void config_escape(const char *s, size_t len, size_t max, char *buf, size_t cap);
/* A value as error messages quote it: 42, 1.5, "foo", an array, a map. */
void config_value_describe(const config_value *v, char *buf, size_t cap);

/* ------------------------------------------------------------------------
 * Paths (path.c): where in the tree, for lookups and for error messages
 * ------------------------------------------------------------------------ */
#define CONFIG_PATH_SEGS (CONFIG_MAX_DEPTH + 8)

typedef struct config_seg {
  const char *key; /* NULL for an array index; not owned */
  size_t klen;
  size_t index;
} config_seg;

typedef struct config_path {
  config_seg seg[CONFIG_PATH_SEGS];
  int depth;    /* segments in use */
  int overflow; /* pushes past CONFIG_PATH_SEGS, shown as "..." */
} config_path;

void config_path_init(config_path *p);
void config_path_key(config_path *p, const char *key, size_t klen);
void config_path_index(config_path *p, size_t index);
void config_path_pop(config_path *p);
/* "runtime.workers", "l2[0].addrs[1]"; "<root>" for the empty path. */
void config_path_format(const config_path *p, char *buf, size_t cap);
/* Parses a dotted path; keys point into text. KVA_EINVAL if malformed. */
int config_path_parse(const char *text, config_path *out);
const config_value *config_value_at(const config_value *root, const config_path *p);
/* Writes "<path>: <problem>" into err and returns KVA_ECONFIG. */
int config_fail(char *err, size_t errlen, const config_path *p, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Same, with a literal location such as "<input>" or a file name. */
int config_fail_at(char *err, size_t errlen, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ------------------------------------------------------------------------
 * The schema (schema.c, schema_doc.c)
 * ------------------------------------------------------------------------ */
typedef enum {
  CONFIG_T_INT,
  CONFIG_T_FLOAT, /* integers accepted */
  CONFIG_T_BOOL,
  CONFIG_T_STR,
  CONFIG_T_ENUM,    /* a string out of `choices` */
  CONFIG_T_PINNED,  /* true, false or "auto" */
  CONFIG_T_DEVICES, /* "all" or an array of integers in [min, max] */
  CONFIG_T_INTS,    /* an array of integers in [min, max], possibly empty */
  CONFIG_T_STRS,    /* an array of strings of min..max bytes, no NUL, possibly empty */
  CONFIG_T_ADDRS,   /* a non-empty array of "host:port" strings */
  CONFIG_T_TIERS,   /* the l2 array of tier maps */
} config_type;

enum {
  CONFIG_F_POW2 = 1,      /* integer must be a power of two */
  CONFIG_F_REQUIRED = 2,  /* no default: the key must be present */
  CONFIG_F_NCPU = 4,      /* default = online CPUs, resolved at load time */
  CONFIG_F_TIER_NAME = 8, /* 1..CONFIG_NAME_MAX bytes, unique; default type + index */
};

typedef struct config_key {
  const char *scope; /* NULL: top level; "*": every l2 entry; "mock" etc.: that type */
  const char *path;  /* dotted path from the root, or the key inside an l2 entry */
  config_type type;
  int64_t min; /* CONFIG_T_INT and DEVICES elements; CONFIG_T_STRS: bytes per string */
  uint64_t max;
  double fmin, fmax;   /* CONFIG_T_FLOAT */
  const char *choices; /* CONFIG_T_ENUM: space-separated */
  const char *def;     /* default in kva_config_set's text form; NULL: none */
  const char *def_doc; /* how the reference shows the default, when not `def` */
  unsigned flags;
  const char *doc;
} config_key;

size_t config_schema_count(void);
const config_key *config_schema_at(size_t i);
/* A row by scope (NULL, "*" or a built-in tier type) and key or path. */
const config_key *config_schema_find(const char *scope, const char *path, size_t len);
/* The row for an l2 entry key of the given tier type ("*" rows first). */
const config_key *config_schema_tier_key(const char *type, const char *key, size_t klen);
int config_schema_is_section(const char *name, size_t len); /* "runtime", "l1", ... */
/* A type with rows of its own in the schema (the built-in adapters'). */
int config_schema_is_tier_type(const char *type, size_t len);
int config_schema_choice(const config_key *k, const char *s, size_t len);
/* A CONFIG_T_ENUM's choices as "a, b, c". */
void config_schema_choices(const config_key *k, char *buf, size_t cap);

/* The registered names the reference lists where a doc string says
 * {tier_types} and so on: config, below l1/ and l2/, cannot ask their
 * registries, so the caller (kvconf) passes what they hold, as "a, b, c".
 * A list left NULL shows as its {marker}. */
typedef enum {
  CONFIG_LIST_TIER_TYPES,        /* {tier_types}: adapter types */
  CONFIG_LIST_EVICTION_POLICIES, /* {eviction_policies} */
  CONFIG_LIST_STORE_POLICIES,    /* {store_policies} */
  CONFIG_LIST_PREFETCH_POLICIES, /* {prefetch_policies} */
  CONFIG_LISTS
} config_list;
typedef struct config_doc_lists {
  const char *names[CONFIG_LISTS];
} config_doc_lists;
/* The reference as text: malloc'd, NULL on ENOMEM. lists may be NULL. */
char *config_schema_markdown(const config_doc_lists *lists);
char *config_schema_text(const config_doc_lists *lists);

/* ------------------------------------------------------------------------
 * Loading and checking (scan.c, load.c, json.c, text.c, validate.c,
 * tiers.c, effective.c, pack.c)
 * ------------------------------------------------------------------------ */
/* Checks the framing of one msgpack object without allocating: *end is
 * where it stops. Errors name "<input>" and a byte offset. */
int config_msgpack_scan(const void *buf, size_t len, int max_depth, size_t *end, char *err,
                        size_t errlen);
/* msgpack bytes -> tree (root must be a map), before schema validation. */
int config_value_from_msgpack(const void *buf, size_t len, config_value *out, char *err,
                              size_t errlen);
int config_value_to_msgpack(const config_value *v, void **buf, size_t *len);
/* A JSON text -> tree. *at is the byte offset of a syntax error. */
int config_json_parse(const char *text, size_t len, config_value *out, size_t *at);
/* Text as kva_config_set takes it, for the value at path p of the explicit
 * tree root: parsed per the schema type found there (JSON for composites). */
int config_text_parse(const config_value *root, const config_path *p, const char *text,
                      config_value *out, char *err, size_t errlen);
int config_validate(const config_value *root, char *err, size_t errlen);
int config_validate_leaf(const config_key *k, const config_value *v, config_path *p, char *err,
                         size_t errlen);
int config_validate_tiers(const config_value *l2, config_path *p, char *err, size_t errlen);
/* "<path>: unknown key (did you mean "<sibling>"?)" for the last segment of
 * p, suggesting the closest of the sibling names (Levenshtein <= 3). */
typedef struct config_name {
  const char *s;
  size_t len;
} config_name;
int config_unknown_key(const config_name *names, size_t n, const config_path *p, char *err,
                       size_t errlen);
/* The explicit tree (validated) -> the effective tree. */
int config_effective(const config_value *root, unsigned ncpu, config_value *out);
/* One validated l2 entry, l2[i] -> its effective map (per-type defaults,
 * its name); kva_config_node_default's too. */
int config_effective_tier(const config_value *entry, size_t i, config_value *out);
/* The default of a row as a value (ncpu for CONFIG_F_NCPU). */
int config_default_value(const config_key *k, unsigned ncpu, config_value *out);
unsigned config_online_cpus(void);
/* File contents, at most CONFIG_MAX_BYTES; *buf is malloc'd. */
int config_read_file(const char *path, void **buf, size_t *len, char *err, size_t errlen);

/* ------------------------------------------------------------------------
 * Whole configs (config.c, get.c)
 * ------------------------------------------------------------------------ */
/* The config's mutex (config.c): the public calls take it; the internal
 * readers below do not, and serve configs nobody sets meanwhile (the
 * runtime's own copy, a tool's). config_lend, under the lock, marks the
 * effective tree as having lent a string (kept until kva_config_free). */
void config_lock(const kva_config *c);
void config_unlock(const kva_config *c);
void config_lend(const kva_config *c);
/* A deep copy (the runtime keeps its own); NULL -> the embedded default.
 * NULL only on ENOMEM. */
kva_config *config_copy(const kva_config *c);
const config_value *config_effective_root(const kva_config *c);
/* The effective value at a dotted path, or NULL. */
const config_value *config_get(const kva_config *c, const char *path);
int config_get_u64(const kva_config *c, const char *path, uint64_t *out);
/* The effective value of a schema key, for the library's own reads: no
 * default here, the schema's is in the effective tree. A path the schema
 * does not have (or of another type) is a bug of the caller: debug builds
 * abort naming it; release builds (NDEBUG) return 0, 0.0, false, "" or
 * CONFIG_AUTO. Strings live until kva_config_free. Under the config's lock. */
int64_t config_i64(const kva_config *c, const char *path);
double config_f64(const kva_config *c, const char *path);
bool config_bool(const kva_config *c, const char *path);
const char *config_str(const kva_config *c, const char *path);
/* A key of type true, false or "auto" (CONFIG_T_PINNED). */
typedef enum { CONFIG_FALSE = 0, CONFIG_TRUE = 1, CONFIG_AUTO = -1 } config_tristate;
config_tristate config_bool_auto(const kva_config *c, const char *path);

/* Plug-in view: each l2 entry (effective: per-type defaults filled in). */
size_t config_l2_count(const kva_config *c);
const kva_config_node *config_l2_node(const kva_config *c, size_t i);
const config_value *config_node_get(const kva_config_node *n, const char *key);

#endif /* KVACT_CONFIG_INTERNAL_H */
