/*
 * kvinspect_show.c — kvinspect's two outputs: the table (one block per
 * segment, one row per actor, like top) and the --once --json object.
 * A segment its dead process left is shown all the same, marked stale.
 */
#include <ck_pr.h>
#include <jansson.h>
#include <stdio.h>

#include "tools/kvinspect.h"

#define CLEAR_SCREEN "\033[H\033[2J"

/* A receive-time bucket bound: "-" (no receive), "512ns", "4.1us" ... */
static const char *fmt_ns(char *buf, size_t len, uint64_t ns) {
  if (ns == 0)
    snprintf(buf, len, "-");
  else if (ns < 1000)
    snprintf(buf, len, "%lluns", (unsigned long long)ns);
  else if (ns < 1000000)
    snprintf(buf, len, "%.1fus", (double)ns / 1e3);
  else if (ns < 1000000000)
    snprintf(buf, len, "%.1fms", (double)ns / 1e6);
  else
    snprintf(buf, len, "%.1fs", (double)ns / 1e9);
  return buf;
}

/* Whether the segment's trace ring records now, and why: "off", "on
 * (runtime.trace)", "on (kvinspect trace)". */
static const char *tracing(const kvi_segment *s) {
  uint32_t on = ck_pr_load_32((uint32_t *)&s->hdr->trace_on);
  if (on & TRACE_ON_CONFIG) return "on (runtime.trace)";
  return on & TRACE_ON_LEASE ? "on (kvinspect trace)" : "off";
}

/* After a segment's header line: why its counters are frozen. */
static const char *stale_note(const kvi_segment *s) {
  if (s->owner == STATS_OWNER_EXITED) return ", stale (its process exited, not yet reaped)";
  if (s->owner == STATS_OWNER_GONE)
    return ", stale (its process is gone; the next runtime start removes it)";
  return "";
}

/* Under a labelled actor's row: "  pid 1234 uid 0: requests 57 (12/s),
 * write_locks 1, read_locks 2, pins 3" (gauge 0 with its rate). */
static void show_gauges(const kvi_row *r) {
  printf("  %s", r->label);
  for (unsigned i = 0; i < r->ngauges; i++) {
    printf("%s %s %llu", i ? "," : ":", r->gauge_name[i], (unsigned long long)r->gauge[i]);
    if (i == 0) printf(" (%.0f/s)", r->gauge0_rate);
  }
  putchar('\n');
}

static void show_row(const kvi_row *r) {
  char p50[16], p99[16];
  printf("%-24s %-6s %-7s %7llu %7llu %10.0f %8s %8s %9llu %9llu\n", r->name, r->kind, r->state,
         (unsigned long long)r->depth, (unsigned long long)r->peak_depth, r->rate,
         fmt_ns(p50, sizeof(p50), r->p50_ns), fmt_ns(p99, sizeof(p99), r->p99_ns),
         (unsigned long long)r->overflowed, (unsigned long long)r->backpressure);
  if (r->label[0]) show_gauges(r);
}

void kvi_show_table(int pid, const kvi_segment *segs, int count, int interval_ms,
                    const char *sort_name, int clear) {
  if (clear) fputs(CLEAR_SCREEN, stdout);
  printf("kvinspect: pid %d, %d segment%s, interval %d ms, sorted by %s\n", pid, count,
         count == 1 ? "" : "s", interval_ms, sort_name);
  for (int i = 0; i < count; i++) {
    const kvi_segment *s = &segs[i];
    printf("\n%s: %u actors, up %.1fs, tracing %s%s\n", s->name, s->nrows, s->uptime_s, tracing(s),
           stale_note(s));
    printf("%-24s %-6s %-7s %7s %7s %10s %8s %8s %9s %9s\n", "ACTOR", "KIND", "STATE", "DEPTH",
           "PEAK", "MSG/S", "RECV_P50", "RECV_P99", "OVERFLOW", "BACKPRESS");
    for (uint32_t r = 0; r < s->nrows; r++) show_row(&s->rows[r]);
  }
  if (!clear) putchar('\n');
  fflush(stdout);
}

static json_t *row_counters_json(const kvi_row *r) {
  return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:I}", "name",
                   r->name, "kind", r->kind, "state", r->state, "depth", (json_int_t)r->depth,
                   "peak_depth", (json_int_t)r->peak_depth, "enqueued", (json_int_t)r->enqueued,
                   "dequeued", (json_int_t)r->dequeued, "rate", r->rate, "recv_p50_ns",
                   (json_int_t)r->p50_ns, "recv_p99_ns", (json_int_t)r->p99_ns, "overflowed",
                   (json_int_t)r->overflowed, "backpressure", (json_int_t)r->backpressure, "turns",
                   (json_int_t)r->turns);
}

/* {"requests": 57, "requests_per_s": 12.0, "write_locks": 1, ...} */
static json_t *gauges_json(const kvi_row *r) {
  json_t *g = json_object();
  for (unsigned i = 0; g && i < r->ngauges; i++) {
    json_object_set_new(g, r->gauge_name[i], json_integer((json_int_t)r->gauge[i]));
    if (i > 0) continue;
    char per_s[KVA_STATS_GAUGE_NAMES + 8];
    snprintf(per_s, sizeof(per_s), "%s_per_s", r->gauge_name[0]);
    json_object_set_new(g, per_s, json_real(r->gauge0_rate));
  }
  return g;
}

/* An actor's object; one with a label has "label" and "gauges" as well. */
static json_t *row_json(const kvi_row *r) {
  json_t *o = row_counters_json(r);
  if (o && r->label[0]) {
    json_object_set_new(o, "label", json_string(r->label));
    json_object_set_new(o, "gauges", gauges_json(r));
  }
  return o;
}

static json_t *segment_json(const kvi_segment *s) {
  json_t *actors = json_array();
  for (uint32_t r = 0; actors && r < s->nrows; r++)
    json_array_append_new(actors, row_json(&s->rows[r]));
  return json_pack("{s:s, s:i, s:i, s:f, s:s, s:s, s:b, s:o}", "name", s->name, "version",
                   (int)s->hdr->version, "max_slots", (int)s->hdr->max_slots, "uptime_s",
                   s->uptime_s, "tracing", tracing(s), "owner", stats_owner_name(s->owner), "stale",
                   kvi_stale(s), "actors", actors);
}

int kvi_show_json(int pid, const kvi_segment *segs, int count, int interval_ms) {
  json_t *arr = json_array();
  for (int i = 0; arr && i < count; i++) json_array_append_new(arr, segment_json(&segs[i]));
  json_t *root = json_pack("{s:i, s:i, s:s, s:o}", "pid", pid, "interval_ms", interval_ms,
                           "recv_time", "upper bound of the log2 bucket, ns", "segments", arr);
  if (!root) return -1;
  int rc = json_dumpf(root, stdout, JSON_INDENT(2)) == 0 ? 0 : -1;
  putchar('\n');
  json_decref(root);
  return rc;
}
