/* Greedy generation from token ids with a stateful language-model artifact compiled by
 *   rlxc compile MODEL.gguf --target host --name llm --dim context=N --dim chunk=C -o DIR
 * and linked as
 *   cc -O2 -I DIR tests/native/llm_generate.c DIR/llm.o DIR/librlx_rt.a -lpthread -ldl -lm -lrt -lutil
 *
 * usage: llm_generate [--bench] N ID,ID,... [LOGITS.f32]
 * Prefills the prompt in chunks of llm_MAX_CHUNK tokens (llm_prefill), then decodes greedily one
 * token at a time (llm_decode) until N tokens are generated or the state's llm_MAX_CONTEXT positions
 * are full. Prints "generated: ID,ID,..." on stdout and prefill / decode tokens per second on stderr.
 * With LOGITS.f32, writes the logits every call returns (float32, llm_VOCAB per row): the next-token
 * logits after each prompt chunk's last token and after every decoded token but the last — rows of
 * a full-sequence run over prompt + generated, for tests (the step computes only its chunk's last row). With --bench, stdout is one JSON line instead (tests/bench/llm.py reads it):
 * {"prefill_s", "decode_s", "prefill_cpu_s", "decode_cpu_s" (the process's CPU time, all threads),
 *  "prompt_tokens", "decode_tokens", "tokens": [generated ids], "peak_rss_mb": the process's peak
 *  resident memory (getrusage)}.
 * Exit 1 on a bad argument or an error code from the artifact. */
#define _POSIX_C_SOURCE 200809L
#include "llm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double clock_s(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
static double cpu(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static int64_t argmax(const float *row) {
  int64_t best = 0;
  for (int64_t i = 1; i < llm_VOCAB; i++) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

/* 16-byte aligned, zeroed memory of at least `bytes` (at least 16). */
static void *alloc16(size_t bytes) {
  size_t n = (bytes + 15) / 16 * 16;
  void *p = aligned_alloc(16, n ? n : 16);
  if (p) memset(p, 0, n ? n : 16);
  return p;
}

int main(int argc, char **argv) {
  int bench = argc > 1 && strcmp(argv[1], "--bench") == 0;
  if (bench) {
    argv++;
    argc--;
  }
  if (argc < 3 || argc > 4) {
    fprintf(stderr, "usage: %s [--bench] N ID,ID,... [LOGITS.f32]\n", argv[0]);
    return 1;
  }
  long want = strtol(argv[1], NULL, 10);
  static int64_t prompt[llm_MAX_CONTEXT], gen[llm_MAX_CONTEXT + 1];
  int64_t np = 0;
  for (char *s = argv[2]; *s;) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || np == llm_MAX_CONTEXT || v < 0 || v >= llm_VOCAB) {
      fprintf(stderr, "bad prompt '%s': token ids in 0..%d, at most %d of them\n", argv[2], llm_VOCAB - 1, llm_MAX_CONTEXT);
      return 1;
    }
    prompt[np++] = v;
    s = *end == ',' ? end + 1 : end;
  }
  if (np == 0 || want < 1) {
    fprintf(stderr, "need at least one prompt token and N >= 1\n");
    return 1;
  }
  FILE *dump = argc == 4 ? fopen(argv[3], "wb") : NULL;
  if (argc == 4 && !dump) {
    perror(argv[3]);
    return 1;
  }
  void *arena = alloc16(llm_ARENA_BYTES);
  void *state = alloc16(llm_STATE_BYTES);
  float *logits = alloc16(sizeof(float) * (size_t)llm_VOCAB);
  if (!arena || !state || !logits) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  llm_reset(state);

  double c0 = cpu(), t0 = now();
  int64_t next = 0;
  for (int64_t s = 0; s < np; s += llm_MAX_CHUNK) {
    int64_t n = np - s < llm_MAX_CHUNK ? np - s : llm_MAX_CHUNK;
    int rc = llm_prefill(arena, state, prompt + s, n, s, logits);
    if (rc != llm_OK) {
      fprintf(stderr, "llm_prefill at position %lld returned %d\n", (long long)s, rc);
      return 1;
    }
    if (dump) fwrite(logits, sizeof(float), llm_VOCAB, dump);
    next = argmax(logits);
  }
  double c1 = cpu(), t1 = now();

  gen[0] = next;
  long got = 1;
  int64_t pos = np;
  while (got < want && pos < llm_MAX_CONTEXT) {
    int rc = llm_decode(arena, state, next, pos, logits);
    if (rc != llm_OK) {
      fprintf(stderr, "llm_decode at position %lld returned %d\n", (long long)pos, rc);
      return 1;
    }
    if (dump) fwrite(logits, sizeof(float), llm_VOCAB, dump);
    next = argmax(logits);
    gen[got] = next;
    got++;
    pos++;
  }
  double c2 = cpu(), t2 = now();
  if (bench) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"prefill_s\": %.6f, \"decode_s\": %.6f, \"prefill_cpu_s\": %.6f, \"decode_cpu_s\": %.6f, \"prompt_tokens\": %lld, "
           "\"decode_tokens\": %ld, \"peak_rss_mb\": %.1f, \"tokens\": [",
           t1 - t0, t2 - t1, c1 - c0, c2 - c1, (long long)np, got - 1, ru.ru_maxrss / 1024.0);
  } else {
    printf("generated: ");
  }
  for (long i = 0; i < got; i++) printf(i ? ",%lld" : "%lld", (long long)gen[i]);
  printf(bench ? "]}\n" : "\n");
  if (dump) fclose(dump);
  fprintf(stderr, "prefill: %lld tokens, %.1f tokens/s; decode: %ld tokens, %.1f tokens/s\n", (long long)np, np / (t1 - t0),
          got - 1, got > 1 ? (got - 1) / (t2 - t1) : 0.0);
  free(arena);
  free(state);
  free(logits);
  return 0;
}
