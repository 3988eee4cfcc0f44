/* Subtree chaining values of BLAKE3, for swfs.b3tree.
 *
 * Built (by `python -m swfs.store.b3tree build`, which `make install` runs) together
 * with the reference C implementation of BLAKE3 that the system ships (Debian:
 * librust-blake3-dev), whose internal blake3_hash_many and
 * blake3_compress_in_place, dispatched to the best SIMD code the CPU has, do
 * the work.  The public C API has no way to hash a subtree at a chunk offset
 * without the root flag or to join subtrees into a root: that is all this adds.
 *
 * Every function is pure (no state, no allocation beyond the stack): callers
 * may run them on several threads at once.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "blake3_impl.h"

#define EXPORT __attribute__((visibility("default")))

/* Chunks or parents handed to one blake3_hash_many call: a multiple of every
 * SIMD degree (16 at most), small enough for the stack. */
#define BATCH 64

static const uint8_t ZERO_CHUNK[BLAKE3_CHUNK_LEN];

/* Chaining values of `n` full chunks, the first numbered `counter`, read from
 * `in` (NULL: zeros, without reading any memory but one zero chunk). */
static void chunk_cvs(const uint8_t *in, size_t n, uint64_t counter, uint8_t *out) {
  const uint8_t *ptrs[BATCH];
  while (n > 0) {
    size_t k = n < BATCH ? n : BATCH;
    for (size_t i = 0; i < k; i++) {
      ptrs[i] = in != NULL ? in + i * BLAKE3_CHUNK_LEN : ZERO_CHUNK;
    }
    blake3_hash_many(ptrs, k, BLAKE3_CHUNK_LEN / BLAKE3_BLOCK_LEN, IV, counter, true, 0,
                     CHUNK_START, CHUNK_END, out);
    if (in != NULL) {
      in += k * BLAKE3_CHUNK_LEN;
    }
    counter += k;
    out += k * BLAKE3_OUT_LEN;
    n -= k;
  }
}

/* Parents of `pairs` pairs of chaining values (64 bytes each) into `out`,
 * which may be `cvs` itself: a batch is read whole before it is written, and
 * its outputs land below the inputs still to be read. */
static void parent_cvs(const uint8_t *cvs, size_t pairs, uint8_t *out) {
  const uint8_t *ptrs[BATCH];
  uint8_t tmp[BATCH * BLAKE3_OUT_LEN];
  while (pairs > 0) {
    size_t k = pairs < BATCH ? pairs : BATCH;
    for (size_t i = 0; i < k; i++) {
      ptrs[i] = cvs + i * 2 * BLAKE3_OUT_LEN;
    }
    blake3_hash_many(ptrs, k, 1, IV, 0, false, PARENT, 0, 0, tmp);
    memcpy(out, tmp, k * BLAKE3_OUT_LEN);
    cvs += k * 2 * BLAKE3_OUT_LEN;
    out += k * BLAKE3_OUT_LEN;
    pairs -= k;
  }
}

static void parent(const uint8_t left[32], const uint8_t right[32], uint8_t flags,
                   uint8_t out[32]) {
  uint8_t block[BLAKE3_BLOCK_LEN];
  uint32_t cv[8];
  memcpy(block, left, BLAKE3_OUT_LEN);
  memcpy(block + BLAKE3_OUT_LEN, right, BLAKE3_OUT_LEN);
  memcpy(cv, IV, sizeof cv);
  blake3_compress_in_place(cv, block, BLAKE3_BLOCK_LEN, 0, (uint8_t)(PARENT | flags));
  store_cv_words(out, cv);
}

/* One chunk of 1..1024 bytes (0 only as the whole input, then with ROOT). */
static void chunk(const uint8_t *in, size_t len, uint64_t counter, uint8_t flags,
                  uint8_t out[32]) {
  uint32_t cv[8];
  uint8_t block[BLAKE3_BLOCK_LEN];
  size_t blocks = len == 0 ? 1 : (len + BLAKE3_BLOCK_LEN - 1) / BLAKE3_BLOCK_LEN;
  memcpy(cv, IV, sizeof cv);
  for (size_t b = 0; b < blocks; b++) {
    size_t take = len - b * BLAKE3_BLOCK_LEN;
    if (take > BLAKE3_BLOCK_LEN) {
      take = BLAKE3_BLOCK_LEN;
    }
    memset(block, 0, sizeof block);
    if (in != NULL && take > 0) {
      memcpy(block, in + b * BLAKE3_BLOCK_LEN, take);
    }
    uint8_t f = 0;
    if (b == 0) {
      f |= CHUNK_START;
    }
    if (b == blocks - 1) {
      f |= (uint8_t)(CHUNK_END | flags);
    }
    blake3_compress_in_place(cv, block, (uint8_t)take, counter, f);
  }
  store_cv_words(out, cv);
}

static uint64_t pow2_below(uint64_t x) { /* largest power of two <= x (x >= 1) */
  uint64_t p = 1;
  while (p <= x / 2) {
    p *= 2;
  }
  return p;
}

/* Non-root chaining value of the subtree of `len` >= 1 bytes whose first
 * chunk is numbered `counter`.  At most BATCH chunks are hashed at once (on
 * the stack); larger subtrees are split in halves and joined. */
static void subtree(const uint8_t *in, uint64_t len, uint64_t counter, uint8_t out[32]) {
  if (len <= BLAKE3_CHUNK_LEN) {
    chunk(in, (size_t)len, counter, 0, out);
    return;
  }
  uint64_t chunks = len / BLAKE3_CHUNK_LEN;
  if (len % BLAKE3_CHUNK_LEN == 0 && (chunks & (chunks - 1)) == 0 && chunks <= BATCH) {
    uint8_t cvs[BATCH * BLAKE3_OUT_LEN];
    chunk_cvs(in, (size_t)chunks, counter, cvs);
    for (uint64_t n = chunks; n > 1; n /= 2) {
      parent_cvs(cvs, (size_t)(n / 2), cvs);
    }
    memcpy(out, cvs, BLAKE3_OUT_LEN);
    return;
  }
  /* BLAKE3's split: the left subtree is the largest power of two of whole
   * chunks that leaves at least one byte to the right. */
  uint64_t left = pow2_below((len - 1) / BLAKE3_CHUNK_LEN) * BLAKE3_CHUNK_LEN;
  uint8_t l[32], r[32];
  subtree(in, left, counter, l);
  subtree(in != NULL ? in + left : NULL, len - left, counter + left / BLAKE3_CHUNK_LEN, r);
  parent(l, r, 0, out);
}

/* The subtree's chaining value: `len` >= 1 bytes at `in` (NULL: zeros), its
 * first chunk numbered `counter`, into `out` (32 bytes).  Not a root: input
 * of one chunk or less hashes with swfs_b3_small. */
EXPORT int swfs_b3_subtree(const uint8_t *in, uint64_t len, uint64_t counter, uint8_t *out) {
  if (len == 0) {
    return -1;
  }
  subtree(in, len, counter, out);
  return 0;
}

/* Chaining values of `n` consecutive subtrees of `leaf` bytes each (a power
 * of two multiple of the chunk length), the first numbered
 * `counter` in chunks, from `in` (NULL: zeros), into `out` (32 bytes each). */
EXPORT int swfs_b3_leaves(const uint8_t *in, uint64_t leaf, uint64_t n, uint64_t counter,
                          uint8_t *out) {
  for (uint64_t i = 0; i < n; i++) {
    int rc = swfs_b3_subtree(in != NULL ? in + i * leaf : NULL, leaf,
                             counter + i * (leaf / BLAKE3_CHUNK_LEN), out + i * BLAKE3_OUT_LEN);
    if (rc != 0) {
      return rc;
    }
  }
  return 0;
}

static void join(const uint8_t *cvs, uint64_t n, uint8_t flags, uint8_t out[32]) {
  if (n == 1) {
    memcpy(out, cvs, BLAKE3_OUT_LEN);
    return;
  }
  uint64_t left = pow2_below(n - 1);
  uint8_t l[32], r[32];
  join(cvs, left, 0, l);
  join(cvs + left * BLAKE3_OUT_LEN, n - left, 0, r);
  parent(l, r, flags, out);
}

/* The root hash (32 bytes) of input made of `n` >= 2 subtrees whose chaining
 * values are `cvs`: every subtree but the last of one power-of-two size, the
 * last of that size or smaller (BLAKE3's tree over such leaves is the tree
 * over chunks). */
EXPORT int swfs_b3_root(const uint8_t *cvs, uint64_t n, uint8_t *out) {
  if (n < 2) {
    return -1;
  }
  join(cvs, n, ROOT, out);
  return 0;
}

/* The SIMD degree the dispatcher picked on this CPU (1: portable). */
EXPORT size_t swfs_b3_simd_degree(void) { return blake3_simd_degree(); }
