/*
 * scrape.c — see scrape.h.
 */
#include "tests/server/scrape.h"

#include <check.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- curl ----------------------------------------------------------------- */

#define STATUS_MARK "\nHTTP-STATUS "

/* The child: stdout into the pipe, then curl; 127 when it cannot run. */
static void exec_curl(int out, const char *method, const char *url) {
  dup2(out, STDOUT_FILENO);
  const char *argv[] = {
      "curl", "-s",   "-S", "--max-time", "10", "-o", "-", "-w", STATUS_MARK "%{http_code}\n",
      "-X",   method, url,  NULL};
  execvp("curl", (char *const *)argv);
  _exit(127);
}

/* Reads the pipe to its end, keeping what fits in buf. */
static void read_all(int fd, char *buf, size_t cap) {
  size_t len = 0;
  char sink[4096];
  for (;;) {
    char *to = len + 1 < cap ? buf + len : sink;
    size_t room = len + 1 < cap ? cap - 1 - len : sizeof(sink);
    ssize_t n = read(fd, to, room);
    if (n <= 0) break;
    if (to == buf + len) len += (size_t)n;
  }
  buf[len] = '\0';
}

int scrape_url(const char *method, const char *host, int port, const char *path, char *buf,
               size_t cap, int *http_status) {
  char url[256];
  snprintf(url, sizeof(url), "http://%s:%d%s", host, port, path);
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) exec_curl(fds[1], method, url);
  close(fds[1]);
  read_all(fds[0], buf, cap);
  close(fds[0]);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 127,
                "curl did not run: this suite scrapes with curl (is it installed, in PATH?)");
  char *mark = strstr(buf, STATUS_MARK);
  *http_status = mark ? atoi(mark + strlen(STATUS_MARK)) : 0;
  if (mark) *mark = '\0';
  return WEXITSTATUS(st);
}

void scrape_metrics(int port, char *buf, size_t cap) {
  int status = 0;
  int rc = scrape_url("GET", "127.0.0.1", port, "/metrics", buf, cap, &status);
  ck_assert_msg(rc == 0 && status == 200, "GET /metrics: curl %d, HTTP %d", rc, status);
}

/* ---- the format --------------------------------------------------------------- */

#define MAX_FAMILIES 256

typedef struct checker {
  char names[MAX_FAMILIES][128]; /* families seen, in order */
  size_t n;
  char type[16];   /* of the current family, names[n - 1] */
  double le;       /* histogram: the last bucket's bound */
  double bucket;   /* its count */
  int inf, counts; /* +Inf seen; _count seen */
  double inf_value;
  size_t samples;
} checker;

/* A name of [a-zA-Z_:][a-zA-Z0-9_:]* at p; its length. */
static size_t name_len(const char *p, int colons) {
  size_t n = 0;
  while (isalpha((unsigned char)p[n]) || p[n] == '_' || (colons && p[n] == ':') ||
         (n && isdigit((unsigned char)p[n])))
    n++;
  return n;
}

static void end_family(checker *c) {
  if (c->n == 0 || strcmp(c->type, "histogram")) return;
  ck_assert_msg(c->inf && c->counts, "histogram %s lacks its +Inf bucket or _count",
                c->names[c->n - 1]);
}

/* "# HELP name text\n# TYPE name type\n": a new family. Returns the end of
 * the TYPE line. */
static const char *start_family(checker *c, const char *line) {
  const char *name = line + strlen("# HELP ");
  size_t len = name_len(name, 1);
  ck_assert_msg(len > 0 && name[len] == ' ' && name[len + 1] != '\n', "bad HELP: %.80s", line);
  const char *type = strchr(name, '\n');
  ck_assert_ptr_nonnull(type);
  type++;
  ck_assert_msg(!strncmp(type, "# TYPE ", 7) && !strncmp(type + 7, name, len) &&
                    type[7 + len] == ' ',
                "HELP of %.*s is not followed by its TYPE", (int)len, name);
  end_family(c);
  for (size_t i = 0; i < c->n; i++)
    ck_assert_msg(strlen(c->names[i]) != len || strncmp(c->names[i], name, len),
                  "family %.*s appears twice", (int)len, name);
  ck_assert_uint_lt(c->n, MAX_FAMILIES);
  snprintf(c->names[c->n++], sizeof(c->names[0]), "%.*s", (int)len, name);
  const char *t = type + 8 + len, *eol = strchr(t, '\n');
  ck_assert_ptr_nonnull(eol);
  snprintf(c->type, sizeof(c->type), "%.*s", (int)(eol - t), t);
  ck_assert_msg(!strcmp(c->type, "counter") || !strcmp(c->type, "gauge") ||
                    !strcmp(c->type, "histogram"),
                "family %s: unknown type %s", c->names[c->n - 1], c->type);
  c->le = -INFINITY;
  c->bucket = c->inf_value = 0;
  c->inf = c->counts = 0;
  return eol;
}

/* Labels {a="x",b="y\"z"} from p; the le label's value into le (if any).
 * Returns the end of the labels. */
static const char *parse_labels(const char *p, char *le, size_t lecap) {
  if (*p != '{') return p;
  p++;
  while (*p != '}') {
    size_t n = name_len(p, 0);
    ck_assert_msg(n > 0 && p[n] == '=' && p[n + 1] == '"', "bad label at %.40s", p);
    int is_le = n == 2 && !strncmp(p, "le", 2);
    p += n + 2;
    size_t o = 0;
    for (; *p != '"'; p++) {
      ck_assert_msg(*p && *p != '\n', "unterminated label value");
      if (*p == '\\') {
        p++;
        ck_assert_msg(*p == '\\' || *p == '"' || *p == 'n', "bad escape \\%c", *p);
      }
      if (is_le && o + 1 < lecap) le[o++] = *p;
    }
    if (is_le) le[o] = '\0';
    p++;
    ck_assert_msg(*p == ',' || *p == '}', "bad label list at %.40s", p);
    if (*p == ',') p++;
  }
  return p + 1;
}

/* A histogram's sample: buckets rise in le and count, +Inf == _count. */
static void check_histogram(checker *c, const char *suffix, const char *le, double v) {
  const char *family = c->names[c->n - 1];
  if (!strcmp(suffix, "_bucket")) {
    ck_assert_msg(*le && !c->inf, "%s: a bucket without le, or after +Inf", family);
    double bound = strcmp(le, "+Inf") ? strtod(le, NULL) : INFINITY;
    ck_assert_msg(bound > c->le, "%s: le=%s does not rise", family, le);
    ck_assert_msg(v >= c->bucket, "%s: bucket le=%s is not cumulative", family, le);
    c->le = bound;
    c->bucket = v;
    c->inf = isinf(bound);
    c->inf_value = v;
  } else if (!strcmp(suffix, "_count")) {
    ck_assert_msg(c->inf && v == c->inf_value, "%s: _count %g != +Inf bucket", family, v);
    c->counts = 1;
  } else {
    ck_assert_msg(!strcmp(suffix, "_sum"), "%s: sample %s%s", family, family, suffix);
  }
}

/* One sample line; returns its end. */
static const char *check_sample(checker *c, const char *line) {
  ck_assert_msg(c->n > 0, "a sample before any family: %.80s", line);
  const char *family = c->names[c->n - 1];
  size_t len = name_len(line, 1), flen = strlen(family);
  ck_assert_msg(len >= flen && !strncmp(line, family, flen), "sample %.*s in family %s", (int)len,
                line, family);
  char suffix[16], le[32] = "";
  snprintf(suffix, sizeof(suffix), "%.*s", (int)(len - flen), line + flen);
  const char *p = parse_labels(line + len, le, sizeof(le));
  ck_assert_msg(*p == ' ', "no value: %.80s", line);
  char *end;
  double v = strtod(p + 1, &end);
  ck_assert_msg(end > p + 1 && *end == '\n', "bad value: %.80s", line);
  if (!strcmp(c->type, "histogram"))
    check_histogram(c, suffix, le, v);
  else
    ck_assert_msg(!*suffix, "sample %.*s in family %s", (int)len, line, family);
  c->samples++;
  return end;
}

size_t scrape_check_format(const char *page) {
  static checker c;
  memset(&c, 0, sizeof(c));
  size_t plen = strlen(page);
  ck_assert_msg(plen > 0 && page[plen - 1] == '\n', "the page does not end with a newline");
  for (const char *line = page; *line; line++) {
    if (!strncmp(line, "# HELP ", 7)) {
      line = start_family(&c, line);
    } else {
      ck_assert_msg(*line != '#' && *line != '\n', "unexpected line: %.80s", line);
      line = check_sample(&c, line);
    }
  }
  end_family(&c);
  return c.samples;
}

/* ---- samples ------------------------------------------------------------------- */

static const char *next_line(const char *line) {
  const char *eol = strchr(line, '\n');
  return eol ? eol + 1 : NULL;
}

/* The value text of the line written as `sample`, or NULL. */
static const char *find_sample(const char *page, const char *sample) {
  size_t n = strlen(sample);
  for (const char *line = page; line && *line; line = next_line(line))
    if (!strncmp(line, sample, n) && line[n] == ' ') return line + n + 1;
  return NULL;
}

int scrape_has(const char *page, const char *sample) {
  return find_sample(page, sample) != NULL;
}

uint64_t scrape_u64(const char *page, const char *sample) {
  const char *v = find_sample(page, sample);
  ck_assert_msg(v != NULL, "the page lacks %s", sample);
  char *end;
  unsigned long long x = strtoull(v, &end, 10);
  ck_assert_msg(end > v && *end == '\n', "%s: not an integer: %.30s", sample, v);
  return x;
}

double scrape_f64(const char *page, const char *sample) {
  const char *v = find_sample(page, sample);
  ck_assert_msg(v != NULL, "the page lacks %s", sample);
  return strtod(v, NULL);
}

size_t scrape_count(const char *page, const char *name) {
  size_t n = strlen(name), count = 0;
  for (const char *line = page; line && *line; line = next_line(line))
    count += !strncmp(line, name, n) && (line[n] == ' ' || line[n] == '{');
  return count;
}
