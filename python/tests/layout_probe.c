/* layout_probe.c — prints sizeof/offsetof of kvact.h's structs that the
 * Python package mirrors in ctypes; test_layout.py compares them. */
#include <stddef.h>
#include <stdio.h>

#include "kvact.h"

#define SIZE(t) printf("%s %zu\n", #t, sizeof(t))
#define OFF(t, f) printf("%s.%s %zu\n", #t, #f, offsetof(t, f))

int main(void) {
  SIZE(kva_key);
  OFF(kva_key, kv_rank);
  OFF(kva_key, group);
  OFF(kva_key, hash_len);
  OFF(kva_key, hash);
  SIZE(kva_layout);
  OFF(kva_layout, tensor);
  OFF(kva_layout, tensor[1]);
  OFF(kva_layout, tensor[0].shape);
  OFF(kva_layout, tensor[0].dtype);
  SIZE(kva_buf);
  OFF(kva_buf, len);
  SIZE(kva_storage_stats);
  OFF(kva_storage_stats, l2_load_failures);
  OFF(kva_storage_stats, l1_pinned);
  OFF(kva_storage_stats, l1_numa_node);
  OFF(kva_storage_stats, l2_skipped_slow_keys);
  SIZE(kva_tier_hits);
  OFF(kva_tier_hits, ntiers);
  OFF(kva_tier_hits, tier);
  OFF(kva_tier_hits, tier[1]);
  OFF(kva_tier_hits, tier[0].hits);
  SIZE(kva_l2_tier_stats);
  OFF(kva_l2_tier_stats, bypassed);
  OFF(kva_l2_tier_stats, adapter);
  OFF(kva_l2_tier_stats, adapter.evictions);
  OFF(kva_l2_tier_stats, skipped_slow_keys);
  OFF(kva_l2_tier_stats, lookups_skipped);
  OFF(kva_l2_tier_stats, latency_s);
  SIZE(kva_l2_tier_keys);
  OFF(kva_l2_tier_keys, dropped);
  OFF(kva_l2_tier_keys, absent_overflowed);
  SIZE(kva_l2_node_stats);
  OFF(kva_l2_node_stats, state);
  OFF(kva_l2_node_stats, slots);
  OFF(kva_l2_node_stats, failed_s);
  OFF(kva_l2_node_stats, outages);
  OFF(kva_l2_node_stats, failed_cmds);
  SIZE(kva_load_plan);
  OFF(kva_load_plan, worth);
  OFF(kva_load_plan, skipped);
  OFF(kva_load_plan, load_s);
  OFF(kva_load_plan, split_s);
  OFF(kva_load_plan, split_at);
  OFF(kva_load_plan, not_asked);
  SIZE(kva_prefetch_opts);
  OFF(kva_prefetch_opts, warm);
  OFF(kva_prefetch_opts, sparse);
  OFF(kva_prefetch_opts, found);
  OFF(kva_prefetch_opts, flags);
  SIZE(kva_memcheck_opts);
  OFF(kva_memcheck_opts, callers_only);
  SIZE(kva_memcheck_report);
  OFF(kva_memcheck_report, l2_keys_locked);
  SIZE(kva_paged_kv);
  OFF(kva_paged_kv, num_layers);
  OFF(kva_paged_kv, head_dim);
  OFF(kva_paged_kv, layers);
  OFF(kva_paged_kv, block_stride);
  OFF(kva_paged_kv, page_bytes);
  return 0;
}
