/*
 * config/path.c — paths into a config tree ("l2[0].addrs[1]").
 *
 * One representation serves both directions: the loader pushes and pops
 * segments while it walks a tree so that any error can name where it is,
 * and the getters/setters parse the caller's dotted path into the same
 * segments to look a value up.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"

void config_path_init(config_path *p) {
  p->depth = 0;
  p->overflow = 0;
}

void config_path_key(config_path *p, const char *key, size_t klen) {
  if (p->depth == CONFIG_PATH_SEGS) {
    p->overflow++;
    return;
  }
  p->seg[p->depth].key = key;
  p->seg[p->depth].klen = klen;
  p->seg[p->depth].index = 0;
  p->depth++;
}

void config_path_index(config_path *p, size_t index) {
  if (p->depth == CONFIG_PATH_SEGS) {
    p->overflow++;
    return;
  }
  p->seg[p->depth].key = NULL;
  p->seg[p->depth].klen = 0;
  p->seg[p->depth].index = index;
  p->depth++;
}

void config_path_pop(config_path *p) {
  if (p->overflow)
    p->overflow--;
  else if (p->depth)
    p->depth--;
}

/* Keys are escaped and cut so that a hostile 1 MiB key cannot hide the
 * rest of the message. */
void config_path_format(const config_path *p, char *buf, size_t cap) {
  size_t o = 0;
  char key[100];
  if (cap == 0) return;
  buf[0] = '\0';
  if (p->depth == 0) {
    snprintf(buf, cap, "<root>");
    return;
  }
  for (int i = 0; i < p->depth && o < cap; i++) {
    const config_seg *s = &p->seg[i];
    if (!s->key) {
      o += (size_t)snprintf(buf + o, cap - o, "[%zu]", s->index);
      continue;
    }
    if (s->klen)
      config_escape(s->key, s->klen, 48, key, sizeof key);
    else
      snprintf(key, sizeof key, "\"\""); /* an empty key must still show */
    o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? "." : "", key);
  }
  if (p->overflow && o < cap) snprintf(buf + o, cap - o, "...");
}

/* key ('.' key | '[' digits ']')*; keys are non-empty and hold no '.', '['
 * or ']'. */
int config_path_parse(const char *text, config_path *out) {
  const char *s = text;
  config_path_init(out);
  if (!text || !*text) return KVA_EINVAL;
  for (;;) {
    size_t n = strcspn(s, ".[]");
    if (n == 0) return KVA_EINVAL;
    if (out->depth == CONFIG_PATH_SEGS) return KVA_EINVAL;
    config_path_key(out, s, n);
    s += n;
    while (*s == '[') {
      size_t idx = 0, digits = 0;
      for (s++; *s >= '0' && *s <= '9'; s++, digits++) {
        if (idx > 100000000) return KVA_EINVAL;
        idx = idx * 10 + (size_t)(*s - '0');
      }
      if (!digits || *s != ']' || out->depth == CONFIG_PATH_SEGS) return KVA_EINVAL;
      config_path_index(out, idx);
      s++;
    }
    if (*s == '\0') return KVA_OK;
    if (*s != '.') return KVA_EINVAL;
    s++;
  }
}

const config_value *config_value_at(const config_value *root, const config_path *p) {
  const config_value *v = root;
  for (int i = 0; v && i < p->depth; i++) {
    const config_seg *s = &p->seg[i];
    if (s->key)
      v = config_map_find(v, s->key, s->klen);
    else if (v->kind == CONFIG_ARRAY && s->index < v->as.array.len)
      v = &v->as.array.items[s->index];
    else
      v = NULL;
  }
  return v;
}

static int vfail(char *err, size_t errlen, const char *where, const char *fmt, va_list ap) {
  if (!err || errlen == 0) return KVA_ECONFIG;
  int n = snprintf(err, errlen, "%s: ", where);
  if (n >= 0 && (size_t)n < errlen) vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
  return KVA_ECONFIG;
}

int config_fail(char *err, size_t errlen, const config_path *p, const char *fmt, ...) {
  char where[512];
  va_list ap;
  config_path_format(p, where, sizeof where);
  va_start(ap, fmt);
  vfail(err, errlen, where, fmt, ap);
  va_end(ap);
  return KVA_ECONFIG;
}

int config_fail_at(char *err, size_t errlen, const char *where, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(err, errlen, where, fmt, ap);
  va_end(ap);
  return KVA_ECONFIG;
}
