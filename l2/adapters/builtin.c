/*
 * builtin.c — the adapter types kvact ships, by name. The only file that
 * names them: adding an adapter is its own folder under l2/adapters/ plus
 * one line here (and its target in BUILD.bazel's builtin deps).
 */
#include "l2/adapters/disk/disk.h"
#include "l2/adapters/mock/mock.h"
#include "l2/adapters/redis/redis.h"
#include "l2/registry.h"

void l2_builtin_adapters(int (*add)(const char *type, kva_l2_factory f)) {
  add("mock", mock_adapter_spawn);
  add("disk", disk_adapter_spawn);
  add("redis", redis_adapter_spawn);
}
