/* demo.c: `make demo`. Feeds a drawn "1" to the LeNet-style CNN from make_cnn.py (compiled by
 * rlxc into cnn.o / cnn.h) and prints the 10 class probabilities and the argmax.
 * The weights are seeded random (untrained), so the predicted class is arbitrary but reproducible.
 *
 *     cc -I DIR tests/native/demo.c DIR/cnn.o DIR/librlx_rt.a -lpthread -ldl -lm -lrt -lutil
 */
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>

#include "cnn.h"

/* A 28x28 "1" in [0, 1]: a vertical stroke, a flag at the top and a foot. */
static void draw_one(float img[28][28]) {
    for (int y = 0; y < 28; y++)
        for (int x = 0; x < 28; x++) img[y][x] = 0.0f;
    for (int y = 4; y < 24; y++) {
        img[y][13] = 1.0f;
        img[y][14] = 1.0f;
        img[y][12] = 0.5f;
        img[y][15] = 0.5f;
    }
    for (int i = 0; i < 4; i++) img[5 + i][12 - i] = 1.0f; /* flag */
    for (int x = 10; x < 18; x++) img[24][x] = 1.0f;      /* foot */
}

int main(void) {
    static float image[28][28];
    float probs[cnn_OUTPUT_0_ELEMS];
    _Static_assert(sizeof image == cnn_INPUT_0_BYTES, "cnn input is f32[1,1,28,28]");
    _Static_assert(sizeof probs == cnn_OUTPUT_0_BYTES, "cnn output is f32[1,10]");
    draw_one(image);

    for (int y = 2; y < 27; y += 2) { /* every other row */
        for (int x = 6; x < 22; x++) putchar(image[y][x] >= 1.0f ? '#' : image[y][x] > 0.0f ? '+' : '.');
        putchar('\n');
    }

    void *arena = NULL;
    if (posix_memalign(&arena, cnn_ARENA_ALIGN, cnn_ARENA_BYTES) != 0) return 1;
    const void *inputs[cnn_NUM_INPUTS] = {image};
    void *outputs[cnn_NUM_OUTPUTS] = {probs};
    int rc = cnn_run(arena, inputs, outputs);
    free(arena);
    if (rc != cnn_OK) {
        fprintf(stderr, "cnn_run failed with code %d\n", rc);
        return 1;
    }

    int best = 0;
    for (int k = 0; k < cnn_OUTPUT_0_ELEMS; k++) {
        printf("class %d: %.4f\n", k, probs[k]);
        if (probs[k] > probs[best]) best = k;
    }
    printf("argmax: %d (p = %.4f; untrained seeded weights: the class is arbitrary)\n", best, probs[best]);
    return 0;
}
