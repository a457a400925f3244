/*
 * fuzz_seeds.c — writes the fuzzers' seed corpora (tests/fuzz/fuzz_corpus/) with
 * the real writers: a disk tier and a redis tier of a real runtime store
 * small objects, and the files and values they leave are saved in each
 * fuzzer's input format (see the top of each tests/fuzz/fuzz_*.c).
 *
 *   bazel run //tests/fuzz:fuzz_seeds -- "$PWD/tests/fuzz/fuzz_corpus"
 *
 * Also a cluster's replies as raw RESP bytes (fuzz_redis_reply.c), and
 * frames of multi-process mode written by the protocol's encoders
 * (fuzz_protocol.c; its case alone: CK_RUN_CASE=protocol, no redis).
 *
 * A Check suite run as a program (not a test): its output depends on the
 * clock (the superblock's created_ns) and the fuzzers keep what they find
 * anyway. Payloads are at most 256 bytes in 8 KiB slots, so a file loses
 * nothing in fuzz_disk_recover's block-head format (asserted).
 */
#include <check.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/l2/l2_redis_test.h"
#include "tests/support/fixture.h"
#include "tests/support/l2_client.h"
#include "tests/wire/protocol_samples.h"

#define SLOT (2 * DISK_BLOCK)
#define NSLOTS 6u
#define HEAD 256u /* fuzz_disk_recover.c's input bytes per block */
#define FILE_BYTES (2 * DISK_BLOCK + NSLOTS * SLOT)

static const char *out_dir(const char *fuzzer) {
  static char dir[1024];
  const char *root = fixture_arg(1);
  ck_assert_msg(root != NULL, "usage: fuzz_seeds OUTPUT_DIR (tests/fuzz/fuzz_corpus)");
  snprintf(dir, sizeof dir, "%s/%s", root, fuzzer);
  mkdir(dir, 0755);
  return dir;
}

static void save(const char *fuzzer, const char *name, const void *a, size_t na, const void *b,
                 size_t nb) {
  char path[1200];
  snprintf(path, sizeof path, "%s/seed-%s", out_dir(fuzzer), name);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(a, 1, na, f), na);
  if (nb) ck_assert_uint_eq(fwrite(b, 1, nb, f), nb);
  ck_assert_int_eq(fclose(f), 0);
}

/* One object of len bytes for key id (version v), straight to tier 0. */
static void store(kva_storage *s, uint64_t id, size_t len, uint32_t v) {
  kva_layout l = fixture_layout_bytes(len);
  kva_key k = fixture_key(id);
  uint8_t buf[HEAD];
  l2_fill(buf, len, id, v);
  kva_buf b = {buf, len};
  kva_l2_req r = {.keys = &k, .n = 1, .layout = &l, .bufs = &b};
  ck_assert_int_eq(l2_ask(s, 0, KVA_L2_STORE, &r), KVA_OK);
}

/* ---- disk --------------------------------------------------------------- */

static void read_file(const char *path, uint8_t *img) {
  int fd = open(path, O_RDONLY);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pread(fd, img, FILE_BYTES, 0), FILE_BYTES);
  close(fd);
}

/* The file as each disk fuzzer takes it, all with flags 0 (bytes as they
 * are on disk). */
static void save_disk(const char *path, const char *name) {
  static uint8_t img[FILE_BYTES], heads[1 + FILE_BYTES / DISK_BLOCK * HEAD];
  read_file(path, img);
  heads[0] = 0;
  for (uint32_t b = 0; b < FILE_BYTES / DISK_BLOCK; b++) {
    const uint8_t *blk = img + (size_t)b * DISK_BLOCK;
    ck_assert_msg(disk_block_is_zero(blk + HEAD, DISK_BLOCK - HEAD), "block %u: past 256", b);
    memcpy(heads + 1 + (size_t)b * HEAD, blk, HEAD);
  }
  save("disk_recover", name, heads, sizeof heads, NULL, 0);
  uint8_t super[1 + 8 + sizeof(disk_super)] = {0};
  uint64_t file_bytes = FILE_BYTES;
  memcpy(super + 1, &file_bytes, 8);
  memcpy(super + 9, img, sizeof(disk_super));
  save("disk_super", name, super, sizeof super, NULL, 0);
}

/* Every intact header of the file, with its payload. */
static void save_headers(const char *path, const char *name) {
  static uint8_t img[FILE_BYTES];
  read_file(path, img);
  const disk_super *s = (const disk_super *)img;
  for (uint64_t i = 0; i < s->nslots; i++) {
    uint8_t hdr[1 + sizeof(object_header)] = {0};
    const uint8_t *slot = img + s->data_offset + i * s->slot_bytes;
    const object_header *h = (const object_header *)slot;
    if (!object_header_valid(h)) continue;
    char n[64];
    snprintf(n, sizeof n, "%s-slot%llu", name, (unsigned long long)i);
    memcpy(hdr + 1, h, sizeof *h);
    save("disk_header", n, hdr, sizeof hdr, slot + DISK_BLOCK, h->length);
  }
}

static kva_runtime *start_disk(const char *path) {
  char json[1024];
  snprintf(json, sizeof json,
           "\"path\":\"%s\",\"capacity_bytes\":%u,\"slot_bytes\":%u,\"o_direct\":false", path,
           FILE_BYTES, SLOT);
  return l2_start_disk(1, 32u << 20, json, NULL);
}

/* What two stores of one new key in flight at once leave (each takes a
 * free slot; the later commit frees the other, whose header stays): a
 * second intact copy of the object in slot `from`, with a newer sequence
 * number, in the free slot `to`; the superblock says "crashed". Written
 * with the tier's own format functions. */
static void add_second_copy(const char *path, uint32_t from, uint32_t to) {
  static uint8_t img[FILE_BYTES];
  read_file(path, img);
  disk_super *s = (disk_super *)img;
  const uint8_t *src = img + s->data_offset + from * s->slot_bytes;
  uint8_t *dst = img + s->data_offset + to * s->slot_bytes;
  object_header h;
  memcpy(&h, src, sizeof h);
  ck_assert(object_header_valid(&h) && disk_block_is_zero(dst, DISK_BLOCK));
  memcpy(dst + DISK_BLOCK, src + DISK_BLOCK, h.length);
  object_header_init((object_header *)dst, &h.key, h.fingerprint, src + DISK_BLOCK, h.length,
                     ++s->seq);
  s->clean = 0;
  disk_super_seal(s);
  int fd = open(path, O_WRONLY);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, img, FILE_BYTES, 0), FILE_BYTES);
  close(fd);
}

/* Three keys, one stored twice (rewritten in place); the file while
 * running (as a crash leaves it) and after a clean stop; with a second
 * copy of a key; then more keys than slots (evictions), stopped cleanly. */
START_TEST(disk_tier_files) {
  char path[512];
  dt_path(path, sizeof path, "seeds.kvd");
  kva_runtime *rt = start_disk(path);
  store(kva_storage_of(rt), 0, 100, 1);
  store(kva_storage_of(rt), 1, 200, 1);
  store(kva_storage_of(rt), 2, 256, 1);
  store(kva_storage_of(rt), 1, 200, 2);
  save_disk(path, "crashed");
  l2_finish(rt);
  save_disk(path, "clean");
  save_headers(path, "clean");
  add_second_copy(path, 1, 4);
  save_disk(path, "second-copy");
  rt = start_disk(path);
  for (uint64_t id = 3; id < 3 + NSLOTS; id++) store(kva_storage_of(rt), id, 1 + id * 20, 1);
  l2_finish(rt);
  save_disk(path, "evicted");
  unlink(path);
}
END_TEST

/* ---- redis -------------------------------------------------------------- */

/* fuzz_redis_value.c's input: [flags 0][payload length: u64][value]. */
static void save_value(int port, uint64_t id, uint64_t len, const char *name) {
  char key[512];
  const char *argv[2] = {"GET", rt_key("kvact", id, key, sizeof key)};
  size_t lens[2] = {3, strlen(key)};
  redisReply *v = rs_cmd_argv(port, NULL, 2, argv, lens);
  ck_assert_ptr_nonnull(v);
  ck_assert_int_eq(v->type, REDIS_REPLY_STRING);
  uint8_t head[1 + 8] = {0};
  memcpy(head + 1, &len, 8);
  save("redis_value", name, head, sizeof head, v->str, v->len);
  freeReplyObject(v);
}

START_TEST(redis_tier_values) {
  rs_server srv;
  kva_storage *s = rt_open(&srv, 1, "");
  store(s, 0, 1, 1);
  store(s, 1, 256, 1);
  save_value(srv.port, 0, 1, "1-byte");
  save_value(srv.port, 1, 256, "256-bytes");
  rt_close(s, &srv);
}
END_TEST

/* The bytes of the server's reply to one RESP command, as they come off
 * the socket (read until hiredis's reader has a whole reply). */
static void save_raw_reply(int port, const char *cmd, const char *name) {
  static char raw[1 << 16];
  size_t n = 0;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  ck_assert_int_eq(write(fd, cmd, strlen(cmd)), (ssize_t)strlen(cmd));
  redisReader *rd = redisReaderCreate();
  void *reply = NULL;
  while (!reply) {
    ssize_t got = read(fd, raw + n, sizeof raw - n);
    ck_assert_int_gt(got, 0);
    ck_assert_int_eq(redisReaderFeed(rd, raw + n, (size_t)got), REDIS_OK);
    n += (size_t)got;
    ck_assert_int_eq(redisReaderGetReply(rd, &reply), REDIS_OK);
  }
  freeReplyObject(reply);
  redisReaderFree(rd);
  close(fd);
  save("redis_reply", name, raw, n, NULL, 0);
}

/* fuzz_redis_reply.c's input: a 3-master cluster's CLUSTER SLOTS, and
 * the MOVED a node answers for a key of another node's slot. */
START_TEST(redis_cluster_replies) {
  rs_cluster c;
  rs_cluster_start(&c);
  save_raw_reply(c.node[0].port, "CLUSTER SLOTS\r\n", "cluster-slots");
  redisReply *slot = rs_cmd(c.node[0].port, "CLUSTER KEYSLOT k");
  ck_assert_ptr_nonnull(slot);
  ck_assert_int_eq(slot->type, REDIS_REPLY_INTEGER);
  int owner = rs_cluster_owner(&c, (int)slot->integer);
  freeReplyObject(slot);
  save_raw_reply(c.node[(owner + 1) % 3].port, "GET k\r\n", "moved");
  rs_cluster_stop(&c);
}
END_TEST

/* ---- protocol -------------------------------------------------------------- */

/* fuzz_protocol.c's input: [flags][expect 0: the frame's own request]
 * [n: u32][pool_bytes: u64][frame]; flags 0, or 2 for the reply to a READ
 * that asked for layouts. */
static void save_frame(const char *name, uint8_t flags, uint32_t n, const uint8_t *frame,
                       size_t size) {
  uint8_t head[1 + 1 + 4 + 8] = {flags};
  uint64_t pool = SAMPLE_POOL_BYTES;
  memcpy(head + 2, &n, 4);
  memcpy(head + 6, &pool, 8);
  ck_assert_uint_gt(size, 0);
  save("protocol", name, head, sizeof head, frame, size);
}

/* Requests and replies of most types, small enough for run_fuzz.sh's
 * max_len; the replies answer requests of n keys. */
START_TEST(protocol_frames) {
  static const struct {
    const char *name;
    uint16_t type;
    uint32_t n;
    int32_t result;
  } frames[] = {
      {"hello", P_HELLO, 0, 0},
      {"reserve-write", P_RESERVE_WRITE, 3, 0},
      {"prefetch", P_PREFETCH, 2, 0},
      {"finish-read", P_FINISH_READ, 2, 0},
      {"l2-contains", P_L2_CONTAINS, 1, 0},
      {"set-bypass", P_SET_BYPASS, 0, 0},
      {"flush", P_FLUSH, 0, 0},
      {"memcheck", P_MEMCHECK, 0, KVA_EIO},
      {"stats", P_STATS, 0, 0},
      {"tier-stats", P_TIER_STATS, 0, 0},
      {"tier-keys", P_TIER_KEYS, 0, 0},
      {"tier-nodes", P_TIER_NODES, SAMPLE_NODES_CAP, 0}, /* n: the nodes asked for */
      {"lookup", P_LOOKUP, 3, 0},
      {"read", P_READ, 3, 0},
      {"delete", P_DELETE, 2, KVA_EINVAL},
  };
  static uint8_t buf[16384];
  static sample_rep rep;
  kva_key keys[3] = {sample_key(0), sample_key(1), sample_key(2)};
  for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++) {
    char name[64];
    proto_req r = sample_req(frames[i].type, keys, frames[i].n ? frames[i].n : 1);
    snprintf(name, sizeof name, "req-%s", frames[i].name);
    save_frame(name, 0, 0, buf, proto_req_put(buf, sizeof buf, &r, i + 1));
    sample_rep_fill(&rep, frames[i].type, frames[i].n, frames[i].result, 40);
    snprintf(name, sizeof name, "rep-%s", frames[i].name);
    save_frame(name, 0, frames[i].n, buf, proto_rep_put(buf, sizeof buf, &rep.r, i + 1));
  }
  sample_rep_fill(&rep, P_REFUSED, 0, KVA_ECONFIG, 24);
  save_frame("rep-refused", 0, 0, buf, proto_rep_put(buf, sizeof buf, &rep.r, 99));
  sample_rep_read_layouts(&rep, 5, 0); /* runs of 2, 2 and 1 keys */
  save_frame("rep-read-layouts", 2, 5, buf, proto_rep_put(buf, sizeof buf, &rep.r, 100));
  sample_rep_read_layouts(&rep, 3, KVA_KEY_NOT_EXIST); /* failed: no run */
  memset(rep.spans, 0, sizeof rep.spans);
  save_frame("rep-read-layouts-failed", 2, 3, buf, proto_rep_put(buf, sizeof buf, &rep.r, 101));
}
END_TEST

Suite *kva_test_suite(void) {
  Suite *s = suite_create("fuzz_seeds");
  TCase *tc = tcase_create("seeds");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, disk_tier_files);
  tcase_add_test(tc, redis_tier_values);
  tcase_add_test(tc, redis_cluster_replies);
  suite_add_tcase(s, tc);
  TCase *proto = tcase_create("protocol");
  tcase_add_test(proto, protocol_frames);
  suite_add_tcase(s, proto);
  return s;
}
