/*
 * config/pack.c — a tree as msgpack bytes (kva_config_to_msgpack).
 *
 * msgpack-c picks the shortest encoding for every integer and length, so
 * equal trees always give equal bytes; floats are always written as
 * float64 so that no precision is lost.
 */
#include <stdlib.h>

#include <msgpack.h>

#include "config/config_internal.h"

static int pack(msgpack_packer *pk, const config_value *v) {
  size_t i;
  int rc = 0;
  switch (v->kind) {
  case CONFIG_NIL:
    return msgpack_pack_nil(pk);
  case CONFIG_BOOL:
    return v->as.b ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
  case CONFIG_UINT:
    return msgpack_pack_uint64(pk, v->as.u);
  case CONFIG_INT:
    return msgpack_pack_int64(pk, v->as.i);
  case CONFIG_FLOAT:
    return msgpack_pack_double(pk, v->as.f);
  case CONFIG_STR:
    if (msgpack_pack_str(pk, v->as.str.len)) return -1;
    return msgpack_pack_str_body(pk, v->as.str.ptr, v->as.str.len);
  case CONFIG_ARRAY:
    rc = msgpack_pack_array(pk, v->as.array.len);
    for (i = 0; rc == 0 && i < v->as.array.len; i++) rc = pack(pk, &v->as.array.items[i]);
    return rc;
  case CONFIG_MAP:
    rc = msgpack_pack_map(pk, v->as.map.len);
    for (i = 0; rc == 0 && i < v->as.map.len; i++) {
      const config_entry *e = &v->as.map.items[i];
      rc = msgpack_pack_str(pk, e->klen);
      if (rc == 0) rc = msgpack_pack_str_body(pk, e->key, e->klen);
      if (rc == 0) rc = pack(pk, &e->value);
    }
    return rc;
  }
  return -1;
}

int config_value_to_msgpack(const config_value *v, void **buf, size_t *len) {
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  if (pack(&pk, v) != 0) { /* the only failure of an sbuffer is ENOMEM */
    msgpack_sbuffer_destroy(&sb);
    return KVA_ENOMEM;
  }
  *buf = sb.data; /* malloc'd by the sbuffer: ownership passes to the caller */
  *len = sb.size;
  return KVA_OK;
}
