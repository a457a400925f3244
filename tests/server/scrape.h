/*
 * scrape.h — helpers of the metrics suite: fetch a URL with curl (a child
 * process), check a page against the text exposition format 0.0.4, and
 * read one sample's value.
 */
#ifndef KVA_TESTS_SCRAPE_H
#define KVA_TESTS_SCRAPE_H

#include <stddef.h>
#include <stdint.h>

#define SCRAPE_MAX (1u << 20) /* bytes of a page the helpers keep */

/* curl -s [-X method] http://host:port/path: the body into buf
 * (NUL-terminated) and the HTTP status; returns curl's exit status (0, or
 * 7 when nothing listens there). Fails the test when curl cannot run. */
int scrape_url(const char *method, const char *host, int port, const char *path, char *buf,
               size_t cap, int *http_status);
/* GET /metrics on 127.0.0.1:port, asserting a 200 answer. */
void scrape_metrics(int port, char *buf, size_t cap);

/* Asserts the page is well formed: every line ends in \n; each family has
 * # HELP then # TYPE (counter, gauge or histogram), once, before its
 * samples, which follow it together; sample names match their family
 * (a histogram's _bucket, _sum, _count); labels are name="value" with
 * valid escapes; values are numbers; a histogram's buckets have rising
 * le bounds ending at +Inf, cumulative counts, and +Inf == _count.
 * Returns the number of samples. */
size_t scrape_check_format(const char *page);
/* The value of the sample written exactly as `sample` (name and labels,
 * e.g. kvact_l1_hits_total or kvact_client_locks{pid="1",uid="2",kind="pin"});
 * fails the test when the page lacks it or it is not an integer. */
uint64_t scrape_u64(const char *page, const char *sample);
double scrape_f64(const char *page, const char *sample);
/* Whether the page has a sample written exactly so. */
int scrape_has(const char *page, const char *sample);
/* Samples whose name (before the labels) is `name`. */
size_t scrape_count(const char *page, const char *name);

#endif
