/*
 * prefill.h — how fast each model's engine computes a prefill, for the
 * load plan (issue 30; docs/load-plan.md): seconds to compute one chunk,
 * C = chunk tokens / tokens per second. Starts from the config
 * (load_plan.prefill_tokens_per_s, load_plan.chunk_tokens) and is refined
 * by what engines report (kva_report_prefill), per model (kva_key.model):
 * in kvactd the process that plans and the ones that measure are different
 * clients, and the model name is what they share.
 *
 * PREFILL_MODELS entries; a model beyond them replaces the one reported
 * least recently. A mutex guards the table: reports come once per engine
 * step, reads once per prefetch.
 */
#ifndef KVA_L2_PREFILL_H
#define KVA_L2_PREFILL_H

#include <pthread.h>
#include <stdint.h>

#define PREFILL_MODELS 16
#define PREFILL_ALPHA 0.3

typedef struct prefill_rates {
  pthread_mutex_t mu;
  double default_tokens_per_s; /* config; 0 = unknown (load all found) */
  uint32_t default_chunk_tokens;
  uint64_t clock; /* report count, for least-recently-reported */
  struct {
    char model[64];
    uint32_t chunk_tokens;
    double tokens_per_s; /* EWMA of the reports */
    uint64_t used;
  } m[PREFILL_MODELS];
} prefill_rates;

void prefill_init(prefill_rates *p, double tokens_per_s, uint32_t chunk_tokens);
void prefill_destroy(prefill_rates *p);
/* An engine of model computed `tokens` in `ns` (chunk_tokens per chunk; 0 =
 * keep the last known). KVA_EINVAL for a zero count or time. */
int prefill_report(prefill_rates *p, const char *model, uint32_t chunk_tokens, uint64_t tokens,
                   uint64_t ns);
/* C for model, in seconds; 0 when no rate is known. */
double prefill_chunk_s(prefill_rates *p, const char *model);
/* The rate in use for model (tokens/s, 0 = unknown) and its chunk tokens. */
double prefill_tokens_per_s(prefill_rates *p, const char *model, uint32_t *chunk_tokens);

#endif
