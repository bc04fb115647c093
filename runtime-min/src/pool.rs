//! The `std` thread pool behind `rlx_rt_parallel_for`.
//!
//! - Threads: `RLX_NUM_THREADS` if it is a positive integer, else `available_parallelism()`; the
//!   calling thread counts as one, so `threads - 1` workers are spawned, once, on first use.
//! - A loop is cut into `min(threads, n / grain)` chunks of near-equal size, so each has at least
//!   `grain` iterations. Workers and the caller claim chunks under one mutex; the caller waits on a
//!   condvar until every chunk is done, so `body` and `ctx` are never used after the call returns.
//! - Runs inline, with no synchronization, when there is one chunk or one thread, when the caller
//!   is itself running a chunk (a nested call) or when another thread is using the pool (so
//!   concurrent callers never wait for each other and never deadlock).
//! - Never panics: a failed thread spawn leaves a smaller pool; a poisoned lock is taken anyway
//!   (bodies are `extern "C"` and cannot unwind).

use crate::Body;
use core::cell::Cell;
use core::ffi::c_void;
use std::string::String;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, TryLockError};
use std::thread;

/// Upper bound on the pool size, whatever `RLX_NUM_THREADS` says.
const MAX_THREADS: usize = 256;

std::thread_local! {
    /// True on pool workers, and on a caller while it runs chunks: nested loops run inline.
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
}

#[derive(Clone, Copy)]
struct Job {
    body: Body,
    /// The loop's context pointer, as an integer so that `Job` is `Send`.
    ctx: usize,
    n: i64,
    chunks: i64,
}

impl Job {
    /// Runs chunk `i` of `chunks`: `[n*i/chunks, n*(i+1)/chunks)`.
    fn run_chunk(&self, i: i64) {
        let bound = |k: i64| (self.n as i128 * k as i128 / self.chunks as i128) as i64;
        // SAFETY: the contract of `parallel_for`: disjoint sub-ranges, while the call lasts.
        unsafe { (self.body)(self.ctx as *const c_void, bound(i), bound(i + 1)) }
    }
}

struct State {
    job: Option<Job>,
    /// The next chunk to claim, and how many have finished.
    next: i64,
    done: i64,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a job is posted (or on shutdown).
    work: Condvar,
    /// Signalled when the last chunk of a job finishes.
    finished: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claims and runs chunks of the current job until none is left; returns the lock held.
    fn help<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        while let Some(job) = st.job.filter(|j| st.next < j.chunks) {
            let i = st.next;
            st.next += 1;
            drop(st);
            job.run_chunk(i);
            st = self.lock();
            st.done += 1;
            if st.done == job.chunks {
                self.finished.notify_all();
            }
        }
        st
    }
}

fn worker(shared: Arc<Shared>) {
    IN_POOL.set(true);
    let mut st = shared.lock();
    while !st.shutdown {
        st = shared.help(st);
        if !st.shutdown {
            st = shared.work.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

pub(crate) struct Pool {
    shared: Arc<Shared>,
    /// Workers plus the calling thread.
    threads: usize,
    /// Held by the thread whose job the pool is running.
    submit: Mutex<()>,
}

impl Pool {
    /// A pool of `threads` threads in all (the caller included): spawns `threads - 1` workers.
    pub(crate) fn new(threads: usize) -> Pool {
        let shared = Arc::new(Shared {
            state: Mutex::new(State { job: None, next: 0, done: 0, shutdown: false }),
            work: Condvar::new(),
            finished: Condvar::new(),
        });
        let mut workers = 0;
        for _ in 1..threads.clamp(1, MAX_THREADS) {
            let s = Arc::clone(&shared);
            match thread::Builder::new().name(String::from("rlx-rt-worker")).spawn(move || worker(s)) {
                Ok(_) => workers += 1,
                Err(_) => break,
            }
        }
        Pool { shared, threads: workers + 1, submit: Mutex::new(()) }
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
        let chunks = (n / grain.max(1)).min(self.threads as i64);
        if chunks <= 1 || IN_POOL.get() {
            // SAFETY: the caller's contract; one call covers the whole range.
            return unsafe { body(ctx, 0, n) };
        }
        let _submit = match self.submit.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            // SAFETY: as above.
            Err(TryLockError::WouldBlock) => return unsafe { body(ctx, 0, n) },
        };
        let mut st = self.shared.lock();
        *st = State { job: Some(Job { body, ctx: ctx as usize, n, chunks }), next: 0, done: 0, shutdown: false };
        self.shared.work.notify_all();
        IN_POOL.set(true);
        st = self.shared.help(st);
        IN_POOL.set(false);
        while st.done < chunks {
            st = self.shared.finished.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.job = None;
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.work.notify_all();
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
            assert!(seen.calls.load(Ordering::Relaxed) <= pool.threads() as u64);
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
        assert_eq!(v.len(), 3);
        assert_eq!((v[0].0, v[2].1), (0, i64::MAX));
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

    #[test]
    fn global_pool_through_the_c_symbol() {
        let seen = Seen::new();
        unsafe { crate::rlx_rt_parallel_for(Some(record), seen.ctx(), 100_000, 64) };
        assert_eq!(seen.sum.load(Ordering::Relaxed), closed_form(100_000));
        assert!(global().threads >= 1);
    }
}
