//! [`Step`] for one rank of a tensor-parallel language model under `mpirun -np N` (feature `mpi`):
//! the cached step sharded (`--shard tp=N`: attention by heads, each rank's KV cache its key/value
//! heads' part), this process's rank compiled and loaded as a [`CompiledStep`], its collectives over
//! MPI_COMM_WORLD. Every rank runs the same tokens and, after the step's all-reduces, gets the same
//! logits, so every rank samples the same next token.

use super::{CompiledStep, Step};
use crate::cli::{Failure, Target};
use crate::pipeline::Timings;
use crate::shard::Shard;
use crate::targets::Request;
use rlx_ir::Mir;
use rlx_rt::comm::mpi::MpiComm;

pub struct ShardedStep {
    // Dropped in this order: the library, then the communicator it points to, then MPI.
    step: CompiledStep,
    comm: Box<MpiComm>,
    // MPI's environment (finalized when dropped).
    _universe: Box<dyn std::any::Any>,
    rank: usize,
    size: usize,
}

impl ShardedStep {
    /// Shards the cached-step `mir` over the MPI world (its size must be `s`'s rank count), compiles
    /// and loads this process's rank for `t`, and gives it MPI_COMM_WORLD.
    pub fn compile(t: Target, mir: &Mir, s: Shard, req: &Request, tm: &mut Timings) -> Result<ShardedStep, Failure> {
        let sh = tm.time("shard", || crate::shard::shard(mir, s))?;
        let (universe, comm, rank, size) = crate::shard::mpi_world(&sh)?;
        let mut step = CompiledStep::compile(t, &sh.ranks[rank], req, tm)?;
        step.set_comm(comm.as_comm() as *const std::ffi::c_void)?;
        Ok(ShardedStep { step, comm, _universe: universe, rank, size })
    }

    /// A failure on this rank ends the job (the others would wait for it in their next collective).
    fn or_abort<T>(&self, r: Result<T, Failure>) -> Result<T, Failure> {
        r.map_err(|f| {
            eprintln!("error: rank {}: {}", self.rank, f.msg);
            self.comm.abort(i32::from(f.code))
        })
    }
}

impl Step for ShardedStep {
    fn describe(&self) -> String {
        format!("rank {} of {} (tp), {}", self.rank, self.size, self.step.describe())
    }
    fn context(&self) -> usize {
        self.step.context()
    }
    fn prefill(&mut self, tokens: &[i64]) -> Result<Vec<f32>, Failure> {
        let r = self.step.prefill(tokens);
        self.or_abort(r)
    }
    fn decode(&mut self, token: i64, pos: usize) -> Result<Vec<f32>, Failure> {
        let r = self.step.decode(token, pos);
        self.or_abort(r)
    }
}
