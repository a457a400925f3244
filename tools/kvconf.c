/*
 * tools/kvconf.c — kvact's config tool: JSON <-> msgpack, check, show.
 *
 *   kvconf encode IN.json OUT.msgpack   validate, then write msgpack
 *   kvconf decode IN.msgpack            any msgpack -> pretty JSON on stdout
 *   kvconf check FILE                   "FILE: ok", or the error (exit 1)
 *   kvconf show [FILE]                  effective config as JSON
 *   kvconf schema [--markdown]          the configuration reference
 *   kvconf fsck PATH [--repair]         check a disk tier (kvconf_fsck.c)
 *   kvconf --version | --help
 *
 * Exit status: 0 success, 1 invalid input or I/O error, 2 usage error
 * (fsck: 0 clean or repaired, 1 damage left, 2 not checked).
 * JSON is read with jansson (integers stay integers, reals stay floats);
 * it is written here, because jansson prints 0.8 as 0.80000000000000004
 * and cannot hold integers above INT64_MAX, which msgpack seeds may be.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <msgpack.h>

#include "common/array.h"
#include "config/config_internal.h"
#include "kvact.h"
#include "l1/policy.h"
#include "l2/registry.h"
#include "tools/kvconf_fsck.h"
#include "tools/tool_version.h"

#define DECODE_MAX_BYTES (64u << 20)
#define DECODE_MAX_DEPTH 32 /* msgpack-c's own unpacker stack */

static const char usage_text[] =
    "usage: kvconf encode IN.json OUT.msgpack   validate a JSON config, write it as msgpack\n"
    "       kvconf decode IN.msgpack            print any msgpack value as JSON\n"
    "       kvconf check FILE                   validate a msgpack config\n"
    "       kvconf show [FILE]                  print the effective config (defaults filled in;\n"
    "                                           the embedded default without FILE)\n"
    "       kvconf schema [--markdown]          print the configuration reference\n"
    "       kvconf fsck PATH [--repair]         check a disk tier file or device; --repair\n"
    "                                           drops bad slots and rebuilds the index\n"
    "       kvconf --version                    print kvconf's and libkvact's versions\n"
    "       kvconf --help\n"
    "OUT.msgpack may be - for stdout. decode writes binary and extension values as hex\n"
    "strings, NaN and infinities as null, and bytes that are not UTF-8 as Latin-1.\n"
    "Exit status: 0 ok, 1 invalid input or I/O error, 2 usage error.\n"
    "fsck: 0 clean (or repaired), 1 bad slots found and not repaired, 2 not a disk tier,\n"
    "unreadable, or in use.\n";

static int usage(const char *why) {
  fprintf(stderr, "kvconf: %s\n%s", why, usage_text);
  return 2;
}

/* ---- reading and writing files ---- */

static int read_file(const char *path, size_t max, char **buf, size_t *len) {
  FILE *f = fopen(path, "rb");
  size_t cap = 65536, n = 0;
  char *b = malloc(cap);
  if (!f || !b) {
    fprintf(stderr, "kvconf: %s: %s\n", path, strerror(f ? ENOMEM : errno));
    if (f) fclose(f);
    free(b);
    return 1;
  }
  for (;;) {
    if (n == cap && !ARRAY_GROW(b, &cap, cap + 1)) break;
    size_t r = fread(b + n, 1, cap - n, f);
    n += r;
    if (r == 0 || n > max) break;
  }
  int bad = n == cap || ferror(f) || n > max; /* n == cap: realloc failed */
  if (bad) fprintf(stderr, "kvconf: %s: %s\n", path, n > max ? "file too large" : "read error");
  fclose(f);
  if (bad) return free(b), 1;
  *buf = b;
  *len = n;
  return 0;
}

static int write_file(const char *path, const void *buf, size_t len) {
  FILE *f = strcmp(path, "-") ? fopen(path, "wb") : stdout;
  if (!f) {
    fprintf(stderr, "kvconf: %s: %s\n", path, strerror(errno));
    return 1;
  }
  int bad = fwrite(buf, 1, len, f) != len;
  bad |= f == stdout ? fflush(f) != 0 : fclose(f) != 0;
  if (bad) fprintf(stderr, "kvconf: %s: write error\n", path);
  return bad;
}

/* Errors about the file itself already start with its name; "<input>"
 * (the loader's name for the bytes) becomes it; errors about its contents
 * ("l1.size_bytes: ...") get it in front. */
static void report(const char *file, const char *err) {
  size_t n = strlen(file);
  if (strncmp(err, file, n) == 0 && err[n] == ':')
    fprintf(stderr, "%s\n", err);
  else if (strncmp(err, "<input>:", 8) == 0)
    fprintf(stderr, "%s%s\n", file, err + 7);
  else
    fprintf(stderr, "%s: %s\n", file, err);
}

/* ---- JSON (jansson) -> msgpack ---- */

static int pack_json(msgpack_packer *pk, json_t *j) {
  const char *key;
  json_t *v;
  size_t i;
  int rc = 0;
  switch (json_typeof(j)) {
  case JSON_OBJECT:
    rc = msgpack_pack_map(pk, json_object_size(j));
    json_object_foreach(j, key, v) { /* insertion order (jansson >= 2.8) */
      rc |= msgpack_pack_str(pk, strlen(key)) | msgpack_pack_str_body(pk, key, strlen(key));
      rc |= pack_json(pk, v);
    }
    return rc;
  case JSON_ARRAY:
    rc = msgpack_pack_array(pk, json_array_size(j));
    json_array_foreach(j, i, v) rc |= pack_json(pk, v);
    return rc;
  case JSON_STRING:
    return msgpack_pack_str(pk, json_string_length(j)) |
           msgpack_pack_str_body(pk, json_string_value(j), json_string_length(j));
  case JSON_INTEGER:
    return msgpack_pack_int64(pk, json_integer_value(j));
  case JSON_REAL:
    return msgpack_pack_double(pk, json_real_value(j));
  case JSON_TRUE:
    return msgpack_pack_true(pk);
  case JSON_FALSE:
    return msgpack_pack_false(pk);
  case JSON_NULL:
    return msgpack_pack_nil(pk);
  }
  return -1;
}

static int cmd_encode(const char *in, const char *out) {
  json_error_t je;
  msgpack_sbuffer sb;
  msgpack_packer pk;
  kva_config *c = NULL;
  char err[512];
  json_t *j = json_load_file(in, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
  if (!j) {
    fprintf(stderr, "%s:%d:%d: %s\n", in, je.line, je.column, je.text);
    return 1;
  }
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  int rc = pack_json(&pk, j) ? (fprintf(stderr, "kvconf: out of memory\n"), 1) : 0;
  json_decref(j);
  if (rc == 0 && kva_config_from_msgpack(sb.data, sb.size, &c, err, sizeof err) != KVA_OK) {
    report(in, err);
    rc = 1;
  }
  kva_config_free(c);
  if (rc == 0) rc = write_file(out, sb.data, sb.size);
  msgpack_sbuffer_destroy(&sb);
  return rc;
}

/* ---- msgpack -> JSON text ---- */

static void write_string(const char *s, size_t len) {
  putchar('"');
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    size_t k = 1;
    while (n > 1 && k < n && i + k < len && ((unsigned char)s[i + k] >> 6) == 2) k++;
    if (n > 1 && k == n) { /* a well-formed UTF-8 sequence: as is */
      fwrite(s + i, 1, n, stdout);
      i += n - 1;
    } else if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c == '\n')
      fputs("\\n", stdout);
    else if (c == '\t')
      fputs("\\t", stdout);
    else if (c < 0x20 || c >= 0x7f)
      printf("\\u%04x", c); /* stray bytes read as Latin-1 */
    else
      putchar(c);
  }
  putchar('"');
}

static void write_hex(const char *s, size_t len) {
  putchar('"');
  for (size_t i = 0; i < len; i++) printf("%02x", (unsigned char)s[i]);
  putchar('"');
}

/* The shortest text that reads back as the same double, always with a
 * '.' or an exponent so that JSON readers keep it a real. */
static void write_double(double d) {
  char buf[40];
  if (isnan(d) || isinf(d)) {
    fputs("null", stdout);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, d);
    if (strtod(buf, NULL) == d) break;
  }
  fputs(buf, stdout);
  if (!strpbrk(buf, ".e")) fputs(".0", stdout);
}

static int is_scalar(const msgpack_object *o) {
  return o->type != MSGPACK_OBJECT_ARRAY && o->type != MSGPACK_OBJECT_MAP;
}

static int write_json(const msgpack_object *o, int indent);

static int write_array(const msgpack_object *o, int indent) {
  int inline_ = 1, rc = 0;
  uint32_t i;
  for (i = 0; i < o->via.array.size; i++) inline_ &= is_scalar(&o->via.array.ptr[i]);
  putchar('[');
  for (i = 0; i < o->via.array.size && rc == 0; i++) {
    if (i) putchar(',');
    if (inline_)
      printf("%s", i ? " " : "");
    else
      printf("\n%*s", indent + 2, "");
    rc = write_json(&o->via.array.ptr[i], indent + 2);
  }
  if (!inline_ && o->via.array.size) printf("\n%*s", indent, "");
  putchar(']');
  return rc;
}

static int write_map(const msgpack_object *o, int indent) {
  int rc = 0;
  putchar('{');
  for (uint32_t i = 0; i < o->via.map.size && rc == 0; i++) {
    const msgpack_object *k = &o->via.map.ptr[i].key;
    printf("%s\n%*s", i ? "," : "", indent + 2, "");
    if (k->type == MSGPACK_OBJECT_STR)
      write_string(k->via.str.ptr, k->via.str.size);
    else if (k->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
      printf("\"%llu\"", (unsigned long long)k->via.u64);
    else if (k->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
      printf("\"%lld\"", (long long)k->via.i64);
    else {
      fprintf(stderr, "kvconf: a map key is not a string or an integer\n");
      return 1;
    }
    fputs(": ", stdout);
    rc = write_json(&o->via.map.ptr[i].val, indent + 2);
  }
  if (o->via.map.size) printf("\n%*s", indent, "");
  putchar('}');
  return rc;
}

static int write_json(const msgpack_object *o, int indent) {
  switch (o->type) {
  case MSGPACK_OBJECT_NIL:
    fputs("null", stdout);
    return 0;
  case MSGPACK_OBJECT_BOOLEAN:
    fputs(o->via.boolean ? "true" : "false", stdout);
    return 0;
  case MSGPACK_OBJECT_POSITIVE_INTEGER:
    printf("%llu", (unsigned long long)o->via.u64);
    return 0;
  case MSGPACK_OBJECT_NEGATIVE_INTEGER:
    printf("%lld", (long long)o->via.i64);
    return 0;
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64:
    write_double(o->via.f64);
    return 0;
  case MSGPACK_OBJECT_STR:
    write_string(o->via.str.ptr, o->via.str.size);
    return 0;
  case MSGPACK_OBJECT_BIN:
    write_hex(o->via.bin.ptr, o->via.bin.size);
    return 0;
  case MSGPACK_OBJECT_EXT:
    write_hex(o->via.ext.ptr, o->via.ext.size);
    return 0;
  case MSGPACK_OBJECT_ARRAY:
    return write_array(o, indent);
  case MSGPACK_OBJECT_MAP:
    return write_map(o, indent);
  }
  return 1;
}

/* Checks the framing first (see config/scan.c), then prints one value. */
static int print_msgpack(const char *name, const void *buf, size_t len) {
  char err[256];
  size_t end = 0, off = 0;
  msgpack_unpacked u;
  if (config_msgpack_scan(buf, len, DECODE_MAX_DEPTH, &end, err, sizeof err) != KVA_OK) {
    report(name, err);
    return 1;
  }
  if (end < len) {
    fprintf(stderr, "%s: %zu trailing bytes after the first value\n", name, len - end);
    return 1;
  }
  msgpack_unpacked_init(&u);
  int rc = msgpack_unpack_next(&u, buf, len, &off) == MSGPACK_UNPACK_SUCCESS ? 0 : 1;
  if (rc)
    fprintf(stderr, "%s: cannot unpack (out of memory?)\n", name);
  else
    rc = write_json(&u.data, 0);
  putchar('\n');
  msgpack_unpacked_destroy(&u);
  return rc | (fflush(stdout) != 0);
}

static int cmd_decode(const char *in) {
  char *buf;
  size_t len;
  if (read_file(in, DECODE_MAX_BYTES, &buf, &len)) return 1;
  int rc = print_msgpack(in, buf, len);
  free(buf);
  return rc;
}

static int cmd_check(const char *file) {
  kva_config *c = NULL;
  char err[512];
  if (kva_config_from_file(file, &c, err, sizeof err) != KVA_OK) {
    report(file, err);
    return 1;
  }
  kva_config_free(c);
  printf("%s: ok\n", file);
  return 0;
}

static int cmd_show(const char *file) {
  kva_config *c = NULL;
  char err[512];
  void *buf;
  size_t len;
  if (!file)
    c = kva_config_default();
  else if (kva_config_from_file(file, &c, err, sizeof err) != KVA_OK) {
    report(file, err);
    return 1;
  }
  if (!c || kva_config_to_msgpack(c, &buf, &len) != KVA_OK) {
    fprintf(stderr, "kvconf: out of memory\n");
    kva_config_free(c);
    return 1;
  }
  int rc = print_msgpack(file ? file : "<default>", buf, len);
  free(buf);
  kva_config_free(c);
  return rc;
}

/* The registries' names for the reference (nothing is registered in
 * kvconf: the built-ins). */
static void registry_lists(config_doc_lists *l, char (*buf)[512]) {
  l2_adapter_names(", ", buf[CONFIG_LIST_TIER_TYPES], sizeof buf[0]);
  policy_names(", ", buf[CONFIG_LIST_EVICTION_POLICIES], sizeof buf[0]);
  store_policy_names(", ", buf[CONFIG_LIST_STORE_POLICIES], sizeof buf[0]);
  prefetch_policy_names(", ", buf[CONFIG_LIST_PREFETCH_POLICIES], sizeof buf[0]);
  for (int i = 0; i < CONFIG_LISTS; i++) l->names[i] = buf[i];
}

static int cmd_schema(int markdown) {
  config_doc_lists lists;
  char names[CONFIG_LISTS][512];
  registry_lists(&lists, names);
  char *text = markdown ? config_schema_markdown(&lists) : config_schema_text(&lists);
  if (!text) {
    fprintf(stderr, "kvconf: out of memory\n");
    return 1;
  }
  fputs(text, stdout);
  free(text);
  return fflush(stdout) != 0;
}

/* fsck PATH, fsck PATH --repair or fsck --repair PATH. */
static int cmd_fsck(int nargs, char **args) {
  if (nargs == 1 && args[0][0] != '-') return kvconf_fsck(args[0], false);
  for (int i = 0; nargs == 2 && i < 2; i++)
    if (!strcmp(args[i], "--repair") && args[1 - i][0] != '-')
      return kvconf_fsck(args[1 - i], true);
  return usage("fsck takes PATH [--repair]");
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : NULL;
  int nargs = argc - 2;
  if (!cmd) return usage("missing command");
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    fputs(usage_text, stdout);
    return 0;
  }
  if (!strcmp(cmd, "--version")) return tool_version("kvconf");
  if (!strcmp(cmd, "encode"))
    return nargs == 2 ? cmd_encode(argv[2], argv[3]) : usage("encode takes IN.json OUT.msgpack");
  if (!strcmp(cmd, "decode"))
    return nargs == 1 ? cmd_decode(argv[2]) : usage("decode takes IN.msgpack");
  if (!strcmp(cmd, "check")) return nargs == 1 ? cmd_check(argv[2]) : usage("check takes FILE");
  if (!strcmp(cmd, "show"))
    return nargs <= 1 ? cmd_show(nargs ? argv[2] : NULL) : usage("show takes at most FILE");
  if (!strcmp(cmd, "fsck")) return cmd_fsck(nargs, argv + 2);
  if (!strcmp(cmd, "schema")) {
    if (nargs == 0) return cmd_schema(0);
    if (nargs == 1 && !strcmp(argv[2], "--markdown")) return cmd_schema(1);
    return usage("schema takes only --markdown");
  }
  fprintf(stderr, "kvconf: unknown command \"%s\"\n%s", cmd, usage_text);
  return 2;
}
