//! The `std` thread pool behind `rlx_rt_parallel_for`.
//!
//! - Threads: `RLX_NUM_THREADS` if it is a positive integer, else `available_parallelism()`; the
//!   calling thread counts as one, so `threads - 1` workers are spawned, once, on first use.
//! - A loop is cut into `min(4 × threads, n / grain)` chunks of near-equal size (each at least
//!   `grain` iterations), claimed one at a time — the caller from the front, the workers from the
//!   back (`Shared::help`: on two threads each runs the same contiguous half loop after loop, so the
//!   data a kernel reads mostly sits in its own core's cache) —, so a worker that wakes late takes
//!   fewer chunks instead of holding everyone up. The caller returns only when every chunk has
//!   finished, so `body` and `ctx` are never used after the call returns.
//! - Hand-off is lock-free: one atomic word holds the job's epoch and the range of chunks left to
//!   claim, so a claim is valid only for the job it was made for. The word and the job's fields
//!   share one cache line, and the finished-chunk counter has a line of its own. Chunk 0 is published
//!   as already claimed by the caller, which starts it at once, without an atomic read-modify-write
//!   on a line the workers are reading; a worker counts each chunk as done before it claims the next.
//!   A job of two chunks on two threads costs about 0.2 µs of hand-off (two cache-line transfers).
//! - Workers spin (with the CPU's pause hint) for a while after each job, so the next kernel of a
//!   model starts them within a fraction of a microsecond, then sleep on a condvar. The caller wakes
//!   sleepers when it sees any as it publishes, and checks again behind a fence after its first
//!   chunk, so a worker that fell asleep at that moment misses at most one chunk's time.
//! - Runs inline, with no synchronization, when there is one chunk or one thread, when the caller
//!   is itself running a chunk (a nested call) or when another thread is using the pool (so
//!   concurrent callers never wait for each other and never deadlock).
//! - Never panics: a failed thread spawn leaves a smaller pool; a poisoned lock is taken anyway
//!   (bodies are `extern "C"` and cannot unwind).

use crate::Body;
use core::cell::Cell;
use core::ffi::c_void;
use core::sync::atomic::{fence, AtomicI64, AtomicU64, AtomicUsize, Ordering::*};
use std::string::String;
use std::sync::{Arc, Condvar, Mutex, OnceLock, TryLockError};
use std::thread;

/// Upper bound on the pool size, whatever `RLX_NUM_THREADS` says.
const MAX_THREADS: usize = 256;
/// Chunks per thread: more than one lets early finishers take over a late worker's share.
const CHUNKS_PER_THREAD: i64 = 4;
/// Pause-spins a worker waits for the next job before it sleeps (a few hundred microseconds).
const SPINS_BEFORE_SLEEP: u32 = 1 << 14;
/// Pause-spins the caller waits for the last chunks before it starts yielding its CPU.
const SPINS_BEFORE_YIELD: u32 = 1 << 12;

std::thread_local! {
    /// True on pool workers, and on a caller while it runs chunks: nested loops run inline.
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
}

/// The claim word: epoch (upper 32 bits), the first chunk not yet claimed from the front (16 bits) and
/// one past the last not yet claimed from the back (16 bits); the chunks left are `front..back`.
fn word(epoch: u64, front: i64, back: i64) -> u64 {
    (epoch << 32) | ((front as u64) << 16) | back as u64
}
fn fields(w: u64) -> (u64, i64, i64) {
    (w >> 32, ((w >> 16) & 0xffff) as i64, (w & 0xffff) as i64)
}

/// The published job: the claim word and the fields it guards share one cache line, so a worker
/// that sees a new epoch finds the job's fields on the line it has just fetched, and the caller's
/// stores drain with one ownership request.
#[repr(C, align(128))]
struct Job {
    /// See [`word`]. Chunk counts stay below 2^16.
    claim: AtomicU64,
    /// The job of the current epoch, written before the epoch is published: its chunk count, body,
    /// context and range.
    chunks: AtomicI64,
    body: AtomicUsize,
    ctx: AtomicUsize,
    n: AtomicI64,
}

/// A counter on a cache line (pair) of its own: the threads that bump it do not take the job's line.
#[repr(C, align(128))]
struct Counter(AtomicI64);

#[repr(C)]
struct Shared {
    job: Job,
    /// Chunks of the current job that workers have finished (the caller counts its own).
    done: Counter,
    /// Workers that are asleep (or about to be) on `wake`.
    sleepers: AtomicUsize,
    shutdown: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Shared {
    /// Runs chunk `k` of the current job.
    ///
    /// # Safety
    /// Chunk `k` of the current job must have been claimed by this thread (or reserved for it) while
    /// the job was unfinished: the job's fields are then that job's (the next job's are written only
    /// after every chunk of this one has finished).
    unsafe fn run_chunk(&self, k: i64) {
        let chunks = self.job.chunks.load(Relaxed);
        // SAFETY: `body` was stored from a valid `Body` for this job.
        let body: Body = unsafe { core::mem::transmute::<usize, Body>(self.job.body.load(Relaxed)) };
        let n = self.job.n.load(Relaxed);
        let bound = |k: i64| match n.checked_mul(k) {
            Some(p) => p / chunks,
            None => (n as i128 * k as i128 / chunks as i128) as i64,
        };
        // SAFETY: the contract of `parallel_for`: disjoint sub-ranges, while the call lasts.
        unsafe { body(self.job.ctx.load(Relaxed) as *const c_void, bound(k), bound(k + 1)) };
    }

    /// Claims and runs chunks of job `epoch` until none is left; returns how many it ran. The caller
    /// claims from the front, workers (`worker`) from the back, so on two threads each runs a
    /// contiguous half of the range unless one is late — the same half, loop after loop, which keeps
    /// a kernel's share of its input in the cache of the core that wrote it (the kernels deal their
    /// units to chunks in order). A worker counts each finished chunk in `done` at once, before the
    /// next claim.
    fn help(&self, epoch: u64, worker: bool) -> i64 {
        let mut ran = 0;
        let mut w = self.job.claim.load(Acquire);
        loop {
            let (e, front, back) = fields(w);
            if e != epoch || front >= back {
                return ran;
            }
            let (next, k) = if worker { (w - 1, back - 1) } else { (w + (1 << 16), front) };
            match self.job.claim.compare_exchange_weak(w, next, AcqRel, Acquire) {
                Ok(_) => {
                    // SAFETY: claimed while job `epoch` was unfinished.
                    unsafe { self.run_chunk(k) };
                    ran += 1;
                    if worker {
                        self.done.0.fetch_add(1, Release);
                    }
                    w = self.job.claim.load(Acquire);
                }
                Err(now) => w = now,
            }
        }
    }

    /// Wakes the workers that sleep on `wake`.
    fn wake_sleepers(&self) {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.wake.notify_all();
    }
}

fn worker(shared: Arc<Shared>) {
    IN_POOL.set(true);
    let mut seen = fields(shared.job.claim.load(Acquire)).0;
    loop {
        // Spin for the next job, then sleep until one is posted.
        let mut spins = 0u32;
        let epoch = loop {
            let e = fields(shared.job.claim.load(Acquire)).0;
            if e != seen || shared.shutdown.load(Acquire) != 0 {
                break e;
            }
            if spins < SPINS_BEFORE_SLEEP {
                spins += 1;
                core::hint::spin_loop();
                continue;
            }
            let guard = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.sleepers.fetch_add(1, SeqCst);
            let e = fields(shared.job.claim.load(SeqCst)).0;
            if e == seen && shared.shutdown.load(SeqCst) == 0 {
                drop(shared.wake.wait(guard).unwrap_or_else(|e| e.into_inner()));
            }
            shared.sleepers.fetch_sub(1, SeqCst);
            spins = 0;
        };
        if shared.shutdown.load(Acquire) != 0 {
            return;
        }
        seen = epoch;
        shared.help(epoch, true);
    }
}

pub(crate) struct Pool {
    shared: Arc<Shared>,
    /// Workers plus the calling thread.
    threads: usize,
    /// Held by the thread whose job the pool is running; guards the last epoch published (kept
    /// here so that publishing does not first read the job line back from a worker's cache).
    submit: Mutex<u64>,
}

impl Pool {
    /// A pool of `threads` threads in all (the caller included): spawns `threads - 1` workers.
    pub(crate) fn new(threads: usize) -> Pool {
        let shared = Arc::new(Shared {
            job: Job { claim: AtomicU64::new(0), chunks: AtomicI64::new(0), body: AtomicUsize::new(0), ctx: AtomicUsize::new(0), n: AtomicI64::new(0) },
            done: Counter(AtomicI64::new(0)),
            sleepers: AtomicUsize::new(0),
            shutdown: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut workers = 0;
        for _ in 1..threads.clamp(1, MAX_THREADS) {
            let s = Arc::clone(&shared);
            match thread::Builder::new().name(String::from("rlx-rt-worker")).spawn(move || worker(s)) {
                Ok(_) => workers += 1,
                Err(_) => break,
            }
        }
        Pool { shared, threads: workers + 1, submit: Mutex::new(0) }
    }

    #[cfg(test)]
    pub(crate) fn threads(&self) -> usize {
        self.threads
    }

    /// `parallel_for` on this pool. `n` may be any value; nothing runs when `n <= 0`.
    ///
    /// # Safety
    /// As `crate::parallel_for`.
    pub(crate) unsafe fn run(&self, body: Body, ctx: *const c_void, n: i64, grain: i64) {
        if n <= 0 {
            return;
        }
        let chunks = (n / grain.max(1)).min(self.threads as i64 * CHUNKS_PER_THREAD).min(0xffff);
        if chunks <= 1 || self.threads == 1 || IN_POOL.get() {
            // SAFETY: the caller's contract; one call covers the whole range.
            return unsafe { body(ctx, 0, n) };
        }
        let mut submit = match self.submit.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            // SAFETY: as above.
            Err(TryLockError::WouldBlock) => return unsafe { body(ctx, 0, n) },
        };
        let sh = &*self.shared;
        // Publish the job: fields first, then the claim word with the next epoch. Chunk 0 is the
        // caller's (published as already claimed), so it starts at once, while the workers claim the
        // others; `done` counts the workers' finished chunks.
        sh.job.chunks.store(chunks, Relaxed);
        sh.job.body.store(body as usize, Relaxed);
        sh.job.ctx.store(ctx as usize, Relaxed);
        sh.job.n.store(n, Relaxed);
        sh.done.0.store(0, Relaxed);
        let epoch = (*submit + 1) & 0xffff_ffff;
        *submit = epoch;
        sh.job.claim.store(word(epoch, 1, chunks), Release);
        // Sleepers are woken now if any are seen; a worker that falls asleep at this very moment is
        // caught by the check after the first chunk (the fence pairs with the worker's SeqCst
        // increment of `sleepers` and re-read of the epoch). No full fence before the first chunk:
        // it would wait for the store of the claim word to reach the other cores.
        let mut woken = sh.sleepers.load(Relaxed) > 0;
        if woken {
            sh.wake_sleepers();
        }
        IN_POOL.set(true);
        // SAFETY: chunk 0 was reserved for this thread in the published word.
        unsafe { sh.run_chunk(0) };
        if !woken {
            fence(SeqCst);
            woken = sh.sleepers.load(Relaxed) > 0;
            if woken {
                sh.wake_sleepers();
            }
        }
        let mine = 1 + sh.help(epoch, false);
        IN_POOL.set(false);
        let mut spins = 0u32;
        while sh.done.0.load(Acquire) < chunks - mine {
            if spins < SPINS_BEFORE_YIELD {
                spins += 1;
                core::hint::spin_loop();
            } else {
                thread::yield_now();
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(1, SeqCst);
        self.shared.wake_sleepers();
    }
}

/// The thread count from `RLX_NUM_THREADS`, else the machine's parallelism.
fn threads_from_env() -> usize {
    std::env::var("RLX_NUM_THREADS")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|&t| t > 0)
        .unwrap_or_else(|| thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The process-wide pool, created on first use.
pub(crate) fn global() -> &'static Pool {
    static GLOBAL: OnceLock<Pool> = OnceLock::new();
    GLOBAL.get_or_init(|| Pool::new(threads_from_env()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicI64, AtomicU64, Ordering};
    use std::vec::Vec;

    /// What a loop saw: the sum of its indices, the number of chunks, the shortest chunk.
    struct Seen {
        sum: AtomicU64,
        calls: AtomicU64,
        shortest: AtomicI64,
    }

    impl Seen {
        fn new() -> Seen {
            Seen { sum: AtomicU64::new(0), calls: AtomicU64::new(0), shortest: AtomicI64::new(i64::MAX) }
        }
        fn ctx(&self) -> *const c_void {
            self as *const Seen as *const c_void
        }
    }

    unsafe extern "C" fn record(ctx: *const c_void, start: i64, end: i64) {
        // SAFETY: the tests pass a `Seen`.
        let seen = unsafe { &*(ctx as *const Seen) };
        seen.sum.fetch_add((start as u64..end as u64).sum(), Ordering::Relaxed);
        seen.calls.fetch_add(1, Ordering::Relaxed);
        seen.shortest.fetch_min(end - start, Ordering::Relaxed);
    }

    fn closed_form(n: u64) -> u64 {
        n * (n - 1) / 2
    }

    #[test]
    fn sums_match_the_closed_form() {
        let pool = Pool::new(4);
        for round in 0..500u64 {
            let n = 1000 + round * 37;
            let seen = Seen::new();
            unsafe { pool.run(record, seen.ctx(), n as i64, 1) };
            assert_eq!(seen.sum.load(Ordering::Relaxed), closed_form(n));
            assert!(seen.calls.load(Ordering::Relaxed) <= pool.threads() as u64 * CHUNKS_PER_THREAD as u64);
        }
    }

    #[test]
    fn chunks_respect_grain() {
        let pool = Pool::new(8);
        let seen = Seen::new();
        unsafe { pool.run(record, seen.ctx(), 10, 4) };
        assert_eq!(seen.sum.load(Ordering::Relaxed), closed_form(10));
        assert_eq!(seen.calls.load(Ordering::Relaxed), 2);
        assert!(seen.shortest.load(Ordering::Relaxed) >= 4);
        // n <= grain: one inline call.
        let seen = Seen::new();
        unsafe { pool.run(record, seen.ctx(), 3, 4) };
        assert_eq!(seen.calls.load(Ordering::Relaxed), 1);
        // grain 0 or negative counts as 1.
        for grain in [0, -7] {
            let seen = Seen::new();
            unsafe { pool.run(record, seen.ctx(), 100, grain) };
            assert_eq!(seen.sum.load(Ordering::Relaxed), closed_form(100));
        }
    }

    #[test]
    fn empty_and_negative_ranges_do_nothing() {
        let pool = Pool::new(4);
        for n in [0, -1, i64::MIN] {
            let seen = Seen::new();
            unsafe { pool.run(record, seen.ctx(), n, 1) };
            assert_eq!(seen.calls.load(Ordering::Relaxed), 0);
        }
    }

    #[test]
    fn huge_ranges_do_not_overflow_chunk_bounds() {
        unsafe extern "C" fn bounds(ctx: *const c_void, start: i64, end: i64) {
            // SAFETY: the test passes a Mutex<Vec<(i64, i64)>>.
            let v = unsafe { &*(ctx as *const Mutex<Vec<(i64, i64)>>) };
            v.lock().unwrap().push((start, end));
        }
        let pool = Pool::new(3);
        let v: Mutex<Vec<(i64, i64)>> = Mutex::new(Vec::new());
        unsafe { pool.run(bounds, &v as *const _ as *const c_void, i64::MAX, 1) };
        let mut v = v.into_inner().unwrap();
        v.sort();
        assert_eq!(v.len(), 3 * CHUNKS_PER_THREAD as usize);
        assert_eq!((v[0].0, v[v.len() - 1].1), (0, i64::MAX));
        assert!(v.windows(2).all(|w| w[0].1 == w[1].0));
    }

    #[test]
    fn one_thread_runs_inline() {
        unsafe extern "C" fn on_caller(ctx: *const c_void, start: i64, end: i64) {
            // SAFETY: the test passes a Mutex<Vec<..>>.
            let v = unsafe { &*(ctx as *const Mutex<Vec<(thread::ThreadId, i64, i64)>>) };
            v.lock().unwrap().push((thread::current().id(), start, end));
        }
        let pool = Pool::new(1);
        assert_eq!(pool.threads(), 1);
        let v: Mutex<Vec<(thread::ThreadId, i64, i64)>> = Mutex::new(Vec::new());
        unsafe { pool.run(on_caller, &v as *const _ as *const c_void, 1000, 1) };
        assert_eq!(v.into_inner().unwrap(), [(thread::current().id(), 0, 1000)]);
        assert_eq!(Pool::new(0).threads(), 1);
    }

    /// Context of a loop whose body runs a loop of its own on the same pool.
    struct Nested {
        pool: Pool,
        inner: Seen,
    }

    unsafe extern "C" fn outer(ctx: *const c_void, start: i64, end: i64) {
        // SAFETY: the test passes a `Nested`.
        let nested = unsafe { &*(ctx as *const Nested) };
        for _ in start..end {
            unsafe { nested.pool.run(record, nested.inner.ctx(), 100, 1) };
        }
    }

    #[test]
    fn nested_calls_run_serially_without_deadlock() {
        let nested = Nested { pool: Pool::new(4), inner: Seen::new() };
        unsafe { nested.pool.run(outer, &nested as *const Nested as *const c_void, 64, 1) };
        assert_eq!(nested.inner.sum.load(Ordering::Relaxed), 64 * closed_form(100));
        // Every inner loop ran inline: one call each.
        assert_eq!(nested.inner.calls.load(Ordering::Relaxed), 64);
    }

    #[test]
    fn concurrent_callers_share_one_pool() {
        let pool = Pool::new(4);
        thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..300 {
                        let seen = Seen::new();
                        unsafe { pool.run(record, seen.ctx(), 5000, 16) };
                        assert_eq!(seen.sum.load(Ordering::Relaxed), closed_form(5000));
                    }
                });
            }
        });
    }

    /// Records which threads ran chunks of a loop.
    unsafe extern "C" fn threads_seen(ctx: *const c_void, start: i64, end: i64) {
        // SAFETY: the test passes a Mutex<Vec<..>>.
        let v = unsafe { &*(ctx as *const Mutex<Vec<(thread::ThreadId, i64, i64)>>) };
        // Long enough that a woken worker can take a chunk before the caller has run them all.
        std::thread::sleep(std::time::Duration::from_micros(200));
        v.lock().unwrap().push((thread::current().id(), start, end));
    }

    #[test]
    fn sleeping_workers_are_woken_for_the_next_job() {
        let pool = Pool::new(3);
        for _ in 0..5 {
            // Wait for both workers to stop spinning and sleep on the condvar (they spin for well under
            // a millisecond; the deadline is for a loaded machine).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while pool.shared.sleepers.load(Ordering::SeqCst) < 2 {
                assert!(std::time::Instant::now() < deadline, "the workers did not go to sleep within 10 s");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let v: Mutex<Vec<(thread::ThreadId, i64, i64)>> = Mutex::new(Vec::new());
            unsafe { pool.run(threads_seen, &v as *const _ as *const c_void, 24, 1) };
            let mut v = v.into_inner().unwrap();
            v.sort_by_key(|e| e.1);
            assert_eq!(v.len(), 3 * CHUNKS_PER_THREAD as usize);
            assert!(v.windows(2).all(|w| w[0].2 == w[1].1) && v[0].1 == 0 && v[v.len() - 1].2 == 24);
            let mut ids: Vec<_> = v.iter().map(|e| e.0).collect();
            ids.sort_by_key(|id| std::format!("{id:?}"));
            ids.dedup();
            if ids.len() > 1 {
                return;
            }
        }
        panic!("in five jobs of 12 chunks of 200 µs, no sleeping worker was woken to take a chunk");
    }

    #[test]
    fn on_two_threads_each_runs_one_contiguous_part() {
        // The caller claims from the front and the worker from the back, so whatever the timing the
        // caller's chunks are a prefix of the range and the worker's the rest (`Shared::help`).
        let pool = Pool::new(2);
        let caller = thread::current().id();
        let mut both = 0;
        for _ in 0..50 {
            let v: Mutex<Vec<(thread::ThreadId, i64, i64)>> = Mutex::new(Vec::new());
            unsafe { pool.run(threads_seen, &v as *const _ as *const c_void, 16, 1) };
            let mut v = v.into_inner().unwrap();
            v.sort_by_key(|e| e.1);
            assert_eq!(v.len(), 2 * CHUNKS_PER_THREAD as usize);
            let mine = v.iter().take_while(|e| e.0 == caller).count();
            assert!(mine >= 1 && v[mine..].iter().all(|e| e.0 != caller), "the caller's chunks are not a prefix: {v:?}");
            both += (mine < v.len()) as usize;
        }
        assert!(both > 0, "in 50 jobs of 8 chunks of 200 µs the worker never took one");
    }

    #[test]
    fn back_to_back_jobs_of_two_chunks() {
        // The shape of a split matrix-vector product: two chunks, one for the caller (reserved) and one
        // for the worker, many times in a row.
        let pool = Pool::new(2);
        for round in 0..20_000u64 {
            let seen = Seen::new();
            unsafe { pool.run(record, seen.ctx(), 2 + (round % 3) as i64, 1) };
            assert_eq!(seen.sum.load(Ordering::Relaxed), closed_form(2 + round % 3));
        }
    }

    #[test]
    fn global_pool_through_the_c_symbol() {
        let seen = Seen::new();
        unsafe { crate::rlx_rt_parallel_for(Some(record), seen.ctx(), 100_000, 64) };
        assert_eq!(seen.sum.load(Ordering::Relaxed), closed_form(100_000));
        assert!(global().threads >= 1);
    }
}
