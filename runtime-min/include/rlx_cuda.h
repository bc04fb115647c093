/* rlx_cuda.h: the C API of runtime-min's CUDA executor (runtime-min/src/cuda_c.rs), for artifacts
 * written by `rlxc compile --target cuda` (NAME.ptx, NAME.schedule.bin, NAME.weights.bin).
 *
 * Link target/rt-cuda/release/librlx_rt.a (`make cuda-c-example` builds it: rlx-rt-capi with
 * `--features cuda`) and the system libraries Rust's std uses:
 *     -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
 * libcuda is opened at run time: building needs no CUDA SDK, and a machine without the driver or a
 * device gets an error from rlx_cuda_load, never a link error.
 *
 * Ownership: a handle is the caller's from rlx_cuda_load until rlx_cuda_free. The strings of
 * rlx_cuda_device (until rlx_cuda_free) and rlx_cuda_error (until the next call on the handle) belong
 * to the handle. Buffers stay the caller's; rlx_cuda_run reads and writes them only during the call.
 * Thread safety: a handle may be used from any thread, one thread at a time.
 * No call panics or aborts on caller input: NULL handles and pointers are error returns. */
#ifndef RLX_CUDA_H
#define RLX_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A loaded artifact on one CUDA device (opaque). */
typedef struct RlxCuda RlxCuda;

/* Loads DIR/NAME.ptx, NAME.schedule.bin and NAME.weights.bin and sets the program up on device 0
 * (RLX_CUDA_DEVICE=i another): device buffers, weights uploaded once, the schedule captured as one
 * CUDA graph. NULL on failure (no CUDA driver, no device, a missing or malformed file, a driver
 * error), the message written NUL-terminated into err (at most err_len bytes with the NUL) when err
 * is not NULL. */
RlxCuda *rlx_cuda_load(const char *dir, const char *name, char *err, size_t err_len);

/* The number of input / output ports (0 for NULL). */
size_t rlx_cuda_inputs(const RlxCuda *m);
size_t rlx_cuda_outputs(const RlxCuda *m);

/* Bytes of input / output port i (0 for NULL or i out of range). */
uint64_t rlx_cuda_input_bytes(const RlxCuda *m, size_t i);
uint64_t rlx_cuda_output_bytes(const RlxCuda *m, size_t i);

/* Copies the inputs in, launches the graph once, copies the outputs out; returns once the outputs
 * are written. inputs[i] points to exactly rlx_cuda_input_bytes(m, i) bytes, outputs[i] to exactly
 * rlx_cuda_output_bytes(m, i), overlapping neither each other nor an input (a NULL array is accepted
 * only for no ports, a NULL buffer only for a port of 0 bytes). 0 on success; non-zero on an error,
 * its message in rlx_cuda_error(m). */
int rlx_cuda_run(RlxCuda *m, const void *const *inputs, void *const *outputs);

/* Launches the graph again on the inputs already on the device (those of the last rlx_cuda_run) and
 * waits for it; nothing is copied. 0 on success; non-zero on an error, its message in
 * rlx_cuda_error(m). */
int rlx_cuda_launch(RlxCuda *m);

/* The message of the last failed rlx_cuda_run / rlx_cuda_launch on m ("" when the last one
 * succeeded); for NULL, a static message saying so. Never NULL. */
const char *rlx_cuda_error(const RlxCuda *m);

/* The device's name ("" for NULL). Never NULL. */
const char *rlx_cuda_device(const RlxCuda *m);

/* Releases the handle and its device memory, graph and context reference. NULL does nothing. */
void rlx_cuda_free(RlxCuda *m);

#ifdef __cplusplus
}
#endif

#endif /* RLX_CUDA_H */
