/*
 * config/load.c — bytes to an (unvalidated) tree: files and msgpack.
 *
 * The framing is checked by scan.c first, so msgpack-c only ever sees
 * well-formed input of bounded size and depth; its objects live in the
 * msgpack_unpacked zone only while they are copied into a config_value
 * tree, which owns its strings and outlives the buffer.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <msgpack.h>

#include "common/array.h"
#include "config/config_internal.h"

static const char *type_name(msgpack_object_type t) {
  switch (t) {
  case MSGPACK_OBJECT_NIL:
    return "nil";
  case MSGPACK_OBJECT_BOOLEAN:
    return "boolean";
  case MSGPACK_OBJECT_POSITIVE_INTEGER:
  case MSGPACK_OBJECT_NEGATIVE_INTEGER:
    return "integer";
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64:
    return "float";
  case MSGPACK_OBJECT_STR:
    return "string";
  case MSGPACK_OBJECT_BIN:
    return "binary";
  case MSGPACK_OBJECT_EXT:
    return "extension";
  case MSGPACK_OBJECT_ARRAY:
    return "array";
  case MSGPACK_OBJECT_MAP:
    return "map";
  }
  return "unknown";
}

static int convert(const msgpack_object *o, config_value *out, config_path *p, char *err,
                   size_t errlen);

static int convert_array(const msgpack_object *o, config_value *out, config_path *p, char *err,
                         size_t errlen) {
  if (config_value_array(out, o->via.array.size)) return KVA_ENOMEM;
  for (uint32_t i = 0; i < o->via.array.size; i++) {
    config_value v;
    config_path_index(p, i);
    int rc = convert(&o->via.array.ptr[i], &v, p, err, errlen);
    if (rc == KVA_OK)
      rc = config_array_push(out, &v);
    else
      config_value_free(&v);
    if (rc) return rc;
    config_path_pop(p);
  }
  return KVA_OK;
}

/* Keys must be strings: JSON (kvconf) can only express those, and every
 * path in an error message is made of them. */
static int convert_map(const msgpack_object *o, config_value *out, config_path *p, char *err,
                       size_t errlen) {
  if (config_value_map(out, o->via.map.size)) return KVA_ENOMEM;
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    const msgpack_object_kv *kv = &o->via.map.ptr[i];
    if (kv->key.type != MSGPACK_OBJECT_STR)
      return config_fail(err, errlen, p, "expected string map keys, got %s",
                         type_name(kv->key.type));
    config_value v;
    config_path_key(p, kv->key.via.str.ptr, kv->key.via.str.size);
    int rc = convert(&kv->val, &v, p, err, errlen);
    if (rc == KVA_OK)
      rc = config_map_put(out, kv->key.via.str.ptr, kv->key.via.str.size, &v);
    else
      config_value_free(&v);
    if (rc) return rc;
    config_path_pop(p);
  }
  long dup = config_map_duplicate(out);
  if (dup < -1) return KVA_ENOMEM;
  if (dup < 0) return KVA_OK;
  config_path_key(p, out->as.map.items[dup].key, out->as.map.items[dup].klen);
  return config_fail(err, errlen, p, "duplicate key");
}

/* On failure *out is still a valid (partial) tree for the caller to free. */
static int convert(const msgpack_object *o, config_value *out, config_path *p, char *err,
                   size_t errlen) {
  *out = config_value_nil();
  switch (o->type) {
  case MSGPACK_OBJECT_NIL:
    return KVA_OK;
  case MSGPACK_OBJECT_BOOLEAN:
    *out = config_value_bool(o->via.boolean);
    return KVA_OK;
  case MSGPACK_OBJECT_POSITIVE_INTEGER:
    *out = config_value_uint(o->via.u64);
    return KVA_OK;
  case MSGPACK_OBJECT_NEGATIVE_INTEGER:
    *out = config_value_int(o->via.i64);
    return KVA_OK;
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64:
    *out = config_value_float(o->via.f64);
    return KVA_OK;
  case MSGPACK_OBJECT_STR:
    return config_value_str(out, o->via.str.ptr, o->via.str.size);
  case MSGPACK_OBJECT_ARRAY:
    return convert_array(o, out, p, err, errlen);
  case MSGPACK_OBJECT_MAP:
    return convert_map(o, out, p, err, errlen);
  default: /* bin, ext: nothing in a config needs them, and JSON has no form for them */
    return config_fail(err, errlen, p, "msgpack %s values are not supported", type_name(o->type));
  }
}

static int unpack(const void *buf, size_t len, size_t end, config_value *out, char *err,
                  size_t errlen) {
  msgpack_unpacked u;
  size_t off = 0;
  config_path p;
  int rc;
  msgpack_unpacked_init(&u);
  msgpack_unpack_return r = msgpack_unpack_next(&u, buf, len, &off);
  if (r == MSGPACK_UNPACK_NOMEM_ERROR)
    rc = KVA_ENOMEM;
  else if (r != MSGPACK_UNPACK_SUCCESS) /* the scan passed it: should not happen */
    rc = config_fail_at(err, errlen, "<input>", "invalid msgpack data at byte %zu", off);
  else if (u.data.type != MSGPACK_OBJECT_MAP) {
    config_path_init(&p);
    rc = config_fail(err, errlen, &p, "expected a map, got %s", type_name(u.data.type));
  } else if (end < len)
    rc = config_fail_at(err, errlen, "<input>", "%zu trailing bytes after the root map", len - end);
  else {
    config_path_init(&p);
    rc = convert(&u.data, out, &p, err, errlen);
  }
  msgpack_unpacked_destroy(&u);
  return rc;
}

int config_value_from_msgpack(const void *buf, size_t len, config_value *out, char *err,
                              size_t errlen) {
  size_t end = 0;
  *out = config_value_nil();
  if (!buf && len) return KVA_EINVAL;
  if (len > CONFIG_MAX_BYTES)
    return config_fail_at(err, errlen, "<input>", "%zu bytes, over the 1 MiB limit", len);
  int rc = config_msgpack_scan(buf, len, CONFIG_MAX_DEPTH, &end, err, errlen);
  if (rc == KVA_OK) rc = unpack(buf, len, end, out, err, errlen);
  if (rc) config_value_free(out);
  return rc;
}

static int cannot_read(const char *path, int e, char *err, size_t errlen) {
  char msg[128] = "unknown error";
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
  const char *s = strerror_r(e, msg, sizeof msg); /* GNU: may return a static string */
#else
  const char *s = strerror_r(e, msg, sizeof msg) == 0 ? msg : "unknown error";
#endif
  return config_fail_at(err, errlen, path, "cannot read: %s", s);
}

/* Reads at most CONFIG_MAX_BYTES + 1 bytes, so that pipes and files that
 * grow while we read are bounded too. KVA_EIO leaves errno in *eno. */
static int read_all(int fd, size_t hint, char **buf, size_t *len, int *eno) {
  size_t cap = hint + 1, n = 0;
  char *b = malloc(cap);
  if (!b) return KVA_ENOMEM;
  while (n < CONFIG_MAX_BYTES + 1) {
    if (n == cap) {
      size_t ncap = array_next_cap(cap, cap + 1, 1);
      if (ncap == 0 || ncap > CONFIG_MAX_BYTES + 1) ncap = CONFIG_MAX_BYTES + 1;
      if (!ARRAY_RESIZE(b, ncap)) {
        free(b);
        return KVA_ENOMEM;
      }
      cap = ncap;
    }
    ssize_t r = read(fd, b + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      *eno = errno;
      free(b);
      return KVA_EIO;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  *buf = b;
  *len = n;
  return KVA_OK;
}

int config_read_file(const char *path, void **buf, size_t *len, char *err, size_t errlen) {
  struct stat st;
  char *b = NULL;
  size_t n = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cannot_read(path, errno, err, errlen);
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return cannot_read(path, e, err, errlen);
  }
  if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > CONFIG_MAX_BYTES) {
    close(fd);
    return config_fail_at(err, errlen, path, "file is %lld bytes, over the 1 MiB limit",
                          (long long)st.st_size);
  }
  size_t hint = S_ISREG(st.st_mode) ? (size_t)st.st_size : 65536;
  int eno = 0;
  int rc = read_all(fd, hint > CONFIG_MAX_BYTES ? CONFIG_MAX_BYTES : hint, &b, &n, &eno);
  close(fd);
  if (rc == KVA_EIO) return cannot_read(path, eno, err, errlen);
  if (rc) return rc;
  if (n > CONFIG_MAX_BYTES) {
    free(b);
    return config_fail_at(err, errlen, path, "file is %zu bytes, over the 1 MiB limit", n);
  }
  *buf = b;
  *len = n;
  return KVA_OK;
}
