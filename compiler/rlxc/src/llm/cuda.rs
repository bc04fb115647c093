//! [`CudaStep`]: the cached step (`chunked.rs`) compiled for `--target cuda` and run by runtime-min's
//! CUDA executor: the weights uploaded once, the KV cache kept on the GPU between calls (the
//! schedule's state base), each call one CUDA-graph launch that moves only the tokens, positions
//! and the last row's logits.

use super::chunked::{step_shape, Chunked, Runner};
use crate::cli::{Failure, Target};
use crate::pipeline::Timings;
use crate::targets::Request;
use rlx_ir::Mir;

pub struct CudaRunner {
    ex: rlx_rt::cuda::Executor,
    /// The logits' bytes as the executor copies them out (kept: a decode call allocates nothing).
    out: Vec<u8>,
}

fn cuda(e: rlx_rt::cuda::CudaError) -> Failure {
    Failure::model(format!("CUDA: {e}"))
}

impl Runner for CudaRunner {
    fn run(&mut self, tokens: &[i64], positions: &[i64], logits: &mut [f32]) -> Result<(), Failure> {
        let bytes = |v: &[i64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let (t, p) = (bytes(tokens), bytes(positions));
        self.out.resize(logits.len() * 4, 0);
        self.ex.run(&[&t, &p], &mut [&mut self.out]).map_err(cuda)?;
        for (l, b) in logits.iter_mut().zip(self.out.chunks_exact(4)) {
            *l = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        Ok(())
    }
    fn reset(&mut self) -> Result<(), Failure> {
        self.ex.reset_state().map_err(cuda)
    }
}

/// The cached step on an NVIDIA GPU.
pub type CudaStep = Chunked<CudaRunner>;

impl Chunked<CudaRunner> {
    /// Compiles the cached-step `mir` for `--target cuda` (with `req`'s `--sm` / `--precision`) and
    /// loads it on the GPU (`RLX_CUDA_DEVICE`, else device 0). Without a CUDA driver: an error saying
    /// so, before compiling.
    pub fn compile(mir: &Mir, req: &Request, tm: &mut Timings) -> Result<CudaStep, Failure> {
        rlx_rt::cuda::probe().map_err(|e| Failure::model(format!("cannot run --target cuda here: {e}")))?;
        let c = crate::targets::cuda::compile(Target::Cuda, mir, req, tm)?;
        let shape = step_shape(&c.lir)?;
        let ex = tm.time("setup (CUDA)", || rlx_rt::cuda::Executor::new(&c.ptx, &c.schedule, &c.lir.weights)).map_err(cuda)?;
        let what = format!("cuda ({}, sm_{} PTX, {} launches in one CUDA graph), context {}, chunk {}", ex.device_name(), c.sm, ex.dispatches(), shape.1, shape.0);
        Ok(Chunked::new(CudaRunner { ex, out: Vec::new() }, shape, what))
    }
}
