/* N training steps with a resident training-step artifact compiled by
 *   rlxc compile MODEL --train [--loss --optimizer --lr ...] --batch B --name mnist -o DIR
 * and linked as
 *   cc -O2 -DSTEP=mnist_train_step -I DIR tests/native/train_steps.c DIR/mnist_train_step.o DIR/librlx_rt.a \
 *      -lpthread -ldl -lm -lrt -lutil
 *
 * usage: train_steps N DIR/STEP.init.bin X.bin Y.bin OUT_LOSSES.f32 OUT_STATE.bin
 * Loads the initial state image (STEP_STATE_BYTES bytes) into the state, then runs N steps on
 * consecutive batches of X.bin and Y.bin (the inputs' raw bytes, STEP_INPUT_i_BYTES per batch), each
 * step updating the parameters and optimizer state in place; writes the N losses (float32) and the
 * final state image (parameters read back at STEP_STATE_i_OFFSET by the caller). Exit 1 on a bad
 * argument, a short file or an error code from the artifact. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define STR_(a) #a
#define STR(a) STR_(a)
#include STR(STEP.h)

#define M(x) CAT(STEP, x)
_Static_assert(M(_NUM_INPUTS) == 2 && M(_NUM_OUTPUTS) == 1, "a training step: inputs [x, target], output [loss]");

static void *alloc16(size_t bytes) {
  size_t n = (bytes + 15) / 16 * 16;
  void *p = aligned_alloc(16, n ? n : 16);
  if (p) memset(p, 0, n ? n : 16);
  return p;
}

/* Reads exactly `bytes` bytes of `path` from byte `at`. */
static int read_at(const char *path, long at, void *dst, size_t bytes) {
  FILE *f = fopen(path, "rb");
  if (!f) return fprintf(stderr, "cannot open %s\n", path), 1;
  int bad = fseek(f, at, SEEK_SET) != 0 || fread(dst, 1, bytes, f) != bytes;
  fclose(f);
  if (bad) fprintf(stderr, "%s: fewer than %zu bytes at byte %ld\n", path, bytes, at);
  return bad;
}

static int write_all(const char *path, const void *src, size_t bytes) {
  FILE *f = fopen(path, "wb");
  int bad = !f || fwrite(src, 1, bytes, f) != bytes;
  if (f) fclose(f);
  if (bad) fprintf(stderr, "cannot write %s\n", path);
  return bad;
}

int main(int argc, char **argv) {
  if (argc != 7 || atoi(argv[1]) < 1) {
    fprintf(stderr, "usage: train_steps N STEP.init.bin X.bin Y.bin LOSSES.f32 STATE.bin\n");
    return 1;
  }
  int n = atoi(argv[1]);
  void *arena = alloc16(M(_ARENA_BYTES)), *state = alloc16(M(_STATE_BYTES));
  void *x = alloc16(M(_INPUT_0_BYTES)), *y = alloc16(M(_INPUT_1_BYTES));
  float *losses = calloc((size_t)n, sizeof(float));
  if (!arena || !state || !x || !y || !losses) return fprintf(stderr, "out of memory\n"), 1;
  if (read_at(argv[2], 0, state, M(_STATE_BYTES))) return 1;
  for (int i = 0; i < n; i++) {
    float loss;
    if (read_at(argv[3], (long)i * M(_INPUT_0_BYTES), x, M(_INPUT_0_BYTES))) return 1;
    if (read_at(argv[4], (long)i * M(_INPUT_1_BYTES), y, M(_INPUT_1_BYTES))) return 1;
    const void *ins[2] = {x, y};
    void *outs[1] = {&loss};
    int code = M(_step)(arena, state, ins, outs);
    if (code != M(_OK)) return fprintf(stderr, "step %d: error %d\n", i, code), 1;
    losses[i] = loss;
  }
  printf("%d steps; loss %g -> %g; state %d tensors, first %s at byte %d\n", n, losses[0], losses[n - 1], M(_NUM_STATE),
         M(_STATE_0_NAME), M(_STATE_0_OFFSET));
  return write_all(argv[5], losses, (size_t)n * sizeof(float)) || write_all(argv[6], state, M(_STATE_BYTES));
}
