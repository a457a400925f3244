/*
 * prefill.c — prefill.h's per-model prefill rates.
 */
#include "l2/prefill.h"

#include <string.h>

#include "kvact.h"

void prefill_init(prefill_rates *p, double tokens_per_s, uint32_t chunk_tokens) {
  memset(p, 0, sizeof(*p));
  pthread_mutex_init(&p->mu, NULL);
  p->default_tokens_per_s = tokens_per_s;
  p->default_chunk_tokens = chunk_tokens;
}

void prefill_destroy(prefill_rates *p) {
  pthread_mutex_destroy(&p->mu);
}

/* The entry of model, or -1. Under mu. */
static int find(const prefill_rates *p, const char *model) {
  for (int i = 0; i < PREFILL_MODELS; i++)
    if (p->m[i].used && strcmp(p->m[i].model, model) == 0) return i;
  return -1;
}

int prefill_report(prefill_rates *p, const char *model, uint32_t chunk_tokens, uint64_t tokens,
                   uint64_t ns) {
  if (!model || !model[0] || strlen(model) >= sizeof(p->m[0].model) || tokens == 0 || ns == 0)
    return KVA_EINVAL;
  double rate = (double)tokens * 1e9 / (double)ns;
  pthread_mutex_lock(&p->mu);
  int i = find(p, model);
  if (i < 0) {
    i = 0;
    for (int j = 1; j < PREFILL_MODELS; j++)
      if (p->m[j].used < p->m[i].used) i = j;
    memset(&p->m[i], 0, sizeof(p->m[i]));
    strcpy(p->m[i].model, model);
    p->m[i].chunk_tokens = p->default_chunk_tokens;
  }
  if (chunk_tokens) p->m[i].chunk_tokens = chunk_tokens;
  double old = p->m[i].tokens_per_s;
  p->m[i].tokens_per_s = old == 0 ? rate : old + PREFILL_ALPHA * (rate - old);
  p->m[i].used = ++p->clock;
  pthread_mutex_unlock(&p->mu);
  return KVA_OK;
}

double prefill_tokens_per_s(prefill_rates *p, const char *model, uint32_t *chunk_tokens) {
  pthread_mutex_lock(&p->mu);
  int i = model ? find(p, model) : -1;
  double rate = i >= 0 ? p->m[i].tokens_per_s : p->default_tokens_per_s;
  uint32_t ct = i >= 0 ? p->m[i].chunk_tokens : p->default_chunk_tokens;
  pthread_mutex_unlock(&p->mu);
  if (chunk_tokens) *chunk_tokens = ct;
  return rate;
}

double prefill_chunk_s(prefill_rates *p, const char *model) {
  uint32_t ct = 0;
  double rate = prefill_tokens_per_s(p, model, &ct);
  return rate > 0 ? (double)ct / rate : 0;
}
