/*
 * config/text.c — kva_config_set's text values, parsed per the schema.
 *
 * The schema row at the target path decides how the text reads: integers
 * and numbers in decimal, booleans as true/false/1/0, strings verbatim
 * (so a password may contain anything), composites as JSON. Keys the
 * schema does not know (plug-in tier keys) take JSON when the text is JSON
 * and a plain string otherwise. The schema's defaults go through the same
 * code, so a default can never be written in a form users could not use.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

typedef enum {
  MODE_INT,
  MODE_FLOAT,
  MODE_BOOL,
  MODE_STRING,
  MODE_PINNED,
  MODE_DEVICES,
  MODE_JSON,
  MODE_ANY
} mode;

static int seg_is(const config_seg *s, const char *key) {
  return s->key && strlen(key) == s->klen && memcmp(s->key, key, s->klen) == 0;
}

static mode mode_of(const config_key *k) {
  switch (k->type) {
  case CONFIG_T_INT:
    return MODE_INT;
  case CONFIG_T_FLOAT:
    return MODE_FLOAT;
  case CONFIG_T_BOOL:
    return MODE_BOOL;
  case CONFIG_T_STR:
  case CONFIG_T_ENUM:
    return MODE_STRING;
  case CONFIG_T_PINNED:
    return MODE_PINNED;
  case CONFIG_T_DEVICES:
    return MODE_DEVICES;
  case CONFIG_T_INTS:
  case CONFIG_T_STRS:
  case CONFIG_T_ADDRS:
  case CONFIG_T_TIERS:
    return MODE_JSON;
  }
  return MODE_ANY;
}

/* The row of "l2[i].key", given the type the explicit tree has there. */
static const config_key *tier_row(const config_value *root, const config_path *p) {
  const config_value *l2 = config_map_get(root, "l2"), *entry, *type;
  if (!l2 || l2->kind != CONFIG_ARRAY || p->seg[1].index >= l2->as.array.len) return NULL;
  entry = &l2->as.array.items[p->seg[1].index];
  type = config_map_get(entry, "type");
  const char *t = type && type->kind == CONFIG_STR ? type->as.str.ptr : "";
  return config_schema_tier_key(t, p->seg[2].key, p->seg[2].klen);
}

/* The top-level row of "section.key" (the first two segments), or NULL. */
static const config_key *section_row(const config_seg *s) {
  char joined[128];
  if (!s[0].key || !s[1].key || s[0].klen + s[1].klen + 2 >= sizeof joined) return NULL;
  memcpy(joined, s[0].key, s[0].klen);
  joined[s[0].klen] = '.';
  memcpy(joined + s[0].klen + 1, s[1].key, s[1].klen);
  return config_schema_find(NULL, joined, s[0].klen + 1 + s[1].klen);
}

static mode mode_for(const config_value *root, const config_path *p) {
  const config_seg *s = p->seg;
  const config_key *k = NULL;
  if (p->depth >= 2 && seg_is(&s[0], "l2") && !s[1].key) {
    if (p->depth == 2) return MODE_JSON;
    k = s[2].key ? tier_row(root, p) : NULL;
    if (k && p->depth == 4 && !s[3].key && k->type == CONFIG_T_ADDRS) return MODE_STRING;
    return k && p->depth == 3 ? mode_of(k) : MODE_ANY;
  }
  if (p->depth == 3 && seg_is(&s[0], "gpu") && seg_is(&s[1], "devices") && !s[2].key)
    return MODE_INT;
  /* an element of an array of strings: verbatim, so a name of digits stays a string */
  if (p->depth == 3 && !s[2].key) {
    k = section_row(s);
    return k && k->type == CONFIG_T_STRS ? MODE_STRING : MODE_ANY;
  }
  if (p->depth == 1 && s[0].key) k = config_schema_find(NULL, s[0].key, s[0].klen);
  if (p->depth == 2) k = section_row(s);
  return k ? mode_of(k) : MODE_ANY;
}

static int parse_int(const char *text, config_value *out) {
  const char *d = text[0] == '-' ? text + 1 : text;
  char *end;
  if (*d < '0' || *d > '9') return KVA_EINVAL;
  errno = 0;
  if (text[0] == '-') {
    long long v = strtoll(text, &end, 10);
    *out = config_value_int(v);
  } else {
    unsigned long long v = strtoull(text, &end, 10);
    *out = config_value_uint(v);
  }
  if (*end) return KVA_EINVAL;
  return errno ? KVA_ENOTSUP : KVA_OK; /* ERANGE: digits, but too many */
}

static int parse_bool(const char *text, config_value *out) {
  if (!strcmp(text, "true") || !strcmp(text, "1")) return *out = config_value_bool(1), KVA_OK;
  if (!strcmp(text, "false") || !strcmp(text, "0")) return *out = config_value_bool(0), KVA_OK;
  return KVA_EINVAL;
}

static int bad_text(const config_path *p, const char *what, const char *text, char *err,
                    size_t errlen) {
  char t[160];
  config_escape(text, strlen(text), 64, t, sizeof t);
  return config_fail(err, errlen, p, "expected %s, got \"%s\"", what, t);
}

static int text_int(const config_path *p, const char *text, config_value *out, char *err,
                    size_t errlen) {
  char t[160];
  int rc = parse_int(text, out);
  if (rc == KVA_EINVAL) return bad_text(p, "integer", text, err, errlen);
  config_escape(text, strlen(text), 64, t, sizeof t);
  if (rc) return config_fail(err, errlen, p, "%s does not fit in 64 bits", t);
  return KVA_OK;
}

static int text_float(const config_path *p, const char *text, config_value *out, char *err,
                      size_t errlen) {
  char *end;
  double v = strtod(text, &end);
  if (!*text || *end || strchr(" \t\n", *text)) return bad_text(p, "number", text, err, errlen);
  *out = config_value_float(v);
  return KVA_OK;
}

static int text_json(const config_path *p, const char *text, config_value *out, char *err,
                     size_t errlen) {
  size_t at = 0;
  int rc = config_json_parse(text, strlen(text), out, &at);
  if (rc == KVA_ECONFIG) return config_fail(err, errlen, p, "invalid JSON at byte %zu", at);
  return rc;
}

static int parse_mode(mode m, const config_path *p, const char *text, config_value *out, char *err,
                      size_t errlen) {
  *out = config_value_nil();
  switch (m) {
  case MODE_INT:
    return text_int(p, text, out, err, errlen);
  case MODE_FLOAT:
    return text_float(p, text, out, err, errlen);
  case MODE_BOOL:
    if (parse_bool(text, out)) return bad_text(p, "true, false, 1 or 0", text, err, errlen);
    return KVA_OK;
  case MODE_PINNED:
    if (parse_bool(text, out) == KVA_OK) return KVA_OK;
    break; /* "auto", or a string validation will refuse with the choices */
  case MODE_DEVICES:
    if (strcmp(text, "all") && config_json_parse(text, strlen(text), out, NULL) == KVA_OK)
      return KVA_OK;
    break;
  case MODE_JSON:
    return text_json(p, text, out, err, errlen);
  case MODE_ANY:
    if (config_json_parse(text, strlen(text), out, NULL) == KVA_OK) return KVA_OK;
    break;
  case MODE_STRING:
    break;
  }
  return config_value_str(out, text, strlen(text));
}

int config_text_parse(const config_value *root, const config_path *p, const char *text,
                      config_value *out, char *err, size_t errlen) {
  return parse_mode(mode_for(root, p), p, text, out, err, errlen);
}

/* Rows without a textual default: the CPU count, or nothing (required
 * keys, tier names) — the caller fills those in. */
int config_default_value(const config_key *k, unsigned ncpu, config_value *out) {
  config_path p;
  config_path_init(&p);
  *out = config_value_nil();
  if (k->flags & CONFIG_F_NCPU) return *out = config_value_uint(ncpu), KVA_OK;
  if (!k->def) return KVA_EINVAL;
  return parse_mode(mode_of(k), &p, k->def, out, NULL, 0);
}
