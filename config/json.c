/*
 * config/json.c — a small JSON parser for kva_config_set's composite values.
 *
 * Why not jansson: the library must not depend on it (only kvconf does).
 * Only what a config needs: RFC 8259 values, integers kept as integers
 * (uint64 range, negative int64), nesting limited to CONFIG_MAX_DEPTH and
 * duplicate object keys rejected, like the msgpack loader.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "config/config_internal.h"

#define NUMBER_MAX 400 /* longer number literals are refused, not copied */

typedef struct parser {
  const char *s;
  size_t len, pos;
  int depth;
} parser;

typedef struct strbuf {
  char *p;
  size_t len, cap;
} strbuf;

static int parse_value(parser *j, config_value *out);

static void skip_ws(parser *j) {
  while (j->pos < j->len && strchr(" \t\r\n", j->s[j->pos]) && j->s[j->pos]) j->pos++;
}

static int peek(parser *j) {
  return j->pos < j->len ? (unsigned char)j->s[j->pos] : -1;
}

static int sb_put(strbuf *b, const char *s, size_t n) {
  if (!ARRAY_GROW(b->p, &b->cap, b->len + n + 1)) return KVA_ENOMEM;
  memcpy(b->p + b->len, s, n);
  b->len += n;
  return KVA_OK;
}

static int hex4(parser *j, unsigned *out) {
  unsigned v = 0;
  if (j->len - j->pos < 4) return KVA_ECONFIG;
  for (int i = 0; i < 4; i++) {
    char c = j->s[j->pos++];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= (unsigned)(c - 'A' + 10);
    else
      return KVA_ECONFIG;
  }
  *out = v;
  return KVA_OK;
}

/* \uXXXX (with surrogate pairs) as UTF-8. */
static int unicode_escape(parser *j, strbuf *b) {
  unsigned cp, lo;
  char u[4];
  size_t n;
  if (hex4(j, &cp)) return KVA_ECONFIG;
  if (cp >= 0xdc00 && cp <= 0xdfff) return KVA_ECONFIG;
  if (cp >= 0xd800 && cp <= 0xdbff) {
    if (j->len - j->pos < 2 || j->s[j->pos] != '\\' || j->s[j->pos + 1] != 'u') return KVA_ECONFIG;
    j->pos += 2;
    if (hex4(j, &lo) || lo < 0xdc00 || lo > 0xdfff) return KVA_ECONFIG;
    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
  }
  if (cp < 0x80)
    u[0] = (char)cp, n = 1;
  else if (cp < 0x800)
    u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
  else if (cp < 0x10000) {
    u[0] = (char)(0xe0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    u[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
  } else {
    u[0] = (char)(0xf0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), u[3] = (char)(0x80 | (cp & 0x3f)), n = 4;
  }
  return sb_put(b, u, n);
}

static int escape(parser *j, strbuf *b) {
  static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
  int c = peek(j);
  const char *at = c > 0 ? strchr(from, c) : NULL;
  if (c < 0) return KVA_ECONFIG;
  j->pos++;
  if (c == 'u') return unicode_escape(j, b);
  if (!at) return KVA_ECONFIG;
  return sb_put(b, &to[at - from], 1);
}

static int parse_string_raw(parser *j, strbuf *b) {
  j->pos++; /* the opening quote */
  for (;;) {
    int c = peek(j), rc;
    if (c < 0x20) return KVA_ECONFIG; /* end of input, or a raw control character */
    if (c == '"') {
      j->pos++;
      return sb_put(b, "", 0); /* makes b->p non-NULL even for "" */
    }
    if (c == '\\') {
      j->pos++;
      rc = escape(j, b);
    } else {
      size_t start = j->pos;
      while (peek(j) >= 0x20 && peek(j) != '"' && peek(j) != '\\') j->pos++;
      rc = sb_put(b, j->s + start, j->pos - start);
    }
    if (rc) return rc;
  }
}

static int parse_string(parser *j, config_value *out) {
  strbuf b = {0};
  int rc = parse_string_raw(j, &b);
  if (rc == KVA_OK) rc = config_value_str(out, b.p, b.len);
  free(b.p);
  return rc;
}

static size_t digits(parser *j) {
  size_t n = 0;
  while (peek(j) >= '0' && peek(j) <= '9') j->pos++, n++;
  return n;
}

/* Integers that fit 64 bits stay integers; everything else is a double. */
static int parse_number(parser *j, config_value *out) {
  size_t start = j->pos, n;
  int is_int = 1;
  char buf[NUMBER_MAX + 1], *end;
  if (peek(j) == '-') j->pos++;
  if (peek(j) == '0')
    j->pos++;
  else if (!digits(j))
    return KVA_ECONFIG;
  if (peek(j) == '.') {
    j->pos++, is_int = 0;
    if (!digits(j)) return KVA_ECONFIG;
  }
  if (peek(j) == 'e' || peek(j) == 'E') {
    j->pos++, is_int = 0;
    if (peek(j) == '+' || peek(j) == '-') j->pos++;
    if (!digits(j)) return KVA_ECONFIG;
  }
  n = j->pos - start;
  if (n > NUMBER_MAX) return KVA_ECONFIG;
  memcpy(buf, j->s + start, n);
  buf[n] = '\0';
  errno = 0;
  if (is_int && buf[0] == '-') {
    long long v = strtoll(buf, &end, 10);
    if (errno == 0) return *out = config_value_int(v), KVA_OK;
  } else if (is_int) {
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno == 0) return *out = config_value_uint(v), KVA_OK;
  }
  *out = config_value_float(strtod(buf, &end));
  return KVA_OK;
}

static int literal(parser *j, const char *word, config_value v, config_value *out) {
  size_t n = strlen(word);
  if (j->len - j->pos < n || memcmp(j->s + j->pos, word, n) != 0) return KVA_ECONFIG;
  j->pos += n;
  *out = v;
  return KVA_OK;
}

static int parse_array(parser *j, config_value *out) {
  int rc = config_value_array(out, 0);
  j->pos++;
  skip_ws(j);
  if (rc || peek(j) == ']') return j->pos++, rc;
  for (;;) {
    config_value v;
    if ((rc = parse_value(j, &v))) return config_value_free(&v), rc;
    if ((rc = config_array_push(out, &v))) return rc;
    skip_ws(j);
    if (peek(j) == ']') return j->pos++, KVA_OK;
    if (peek(j) != ',') return KVA_ECONFIG;
    j->pos++;
  }
}

static int parse_member(parser *j, config_value *obj) {
  strbuf key = {0};
  config_value v;
  int rc;
  size_t key_at = j->pos;
  skip_ws(j);
  if (peek(j) != '"') return KVA_ECONFIG;
  if ((rc = parse_string_raw(j, &key))) return free(key.p), rc;
  if (config_map_find(obj, key.p, key.len)) { /* duplicate key */
    j->pos = key_at;
    return free(key.p), KVA_ECONFIG;
  }
  skip_ws(j);
  if (peek(j) != ':') return free(key.p), KVA_ECONFIG;
  j->pos++;
  if ((rc = parse_value(j, &v))) return free(key.p), config_value_free(&v), rc;
  rc = config_map_put(obj, key.p, key.len, &v);
  free(key.p);
  return rc;
}

static int parse_object(parser *j, config_value *out) {
  int rc = config_value_map(out, 0);
  j->pos++;
  skip_ws(j);
  if (rc || peek(j) == '}') return j->pos++, rc;
  for (;;) {
    if ((rc = parse_member(j, out))) return rc;
    skip_ws(j);
    if (peek(j) == '}') return j->pos++, KVA_OK;
    if (peek(j) != ',') return KVA_ECONFIG;
    j->pos++;
  }
}

/* On failure *out is left freeable. */
static int parse_value(parser *j, config_value *out) {
  int c, rc;
  *out = config_value_nil();
  skip_ws(j);
  c = peek(j);
  if (c == '{' || c == '[') {
    if (++j->depth > CONFIG_MAX_DEPTH) return KVA_ECONFIG;
    rc = c == '{' ? parse_object(j, out) : parse_array(j, out);
    j->depth--;
    return rc;
  }
  if (c == '"') return parse_string(j, out);
  if (c == '-' || (c >= '0' && c <= '9')) return parse_number(j, out);
  if (c == 't') return literal(j, "true", config_value_bool(1), out);
  if (c == 'f') return literal(j, "false", config_value_bool(0), out);
  if (c == 'n') return literal(j, "null", config_value_nil(), out);
  return KVA_ECONFIG;
}

int config_json_parse(const char *text, size_t len, config_value *out, size_t *at) {
  parser j = {.s = text, .len = len};
  *out = config_value_nil();
  int rc = len > CONFIG_MAX_BYTES ? KVA_ECONFIG : parse_value(&j, out);
  if (rc == KVA_OK) {
    skip_ws(&j);
    if (j.pos < j.len) rc = KVA_ECONFIG; /* trailing text */
  }
  if (rc) config_value_free(out);
  if (at) *at = j.pos;
  return rc;
}
