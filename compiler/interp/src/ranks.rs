//! Every rank of a sharded model in one process: the oracle for `--shard`. Each rank's graph runs on
//! a thread of its own with the plain interpreter; its collectives meet the other ranks' in an
//! in-process exchange (sums in rank order, computed with the interpreter's own `add`), and `send` /
//! `recv` go through one mailbox per (sender, receiver) pair, in order. When a rank fails, the
//! others stop waiting and the first error is reported, with its rank.

use super::{exec, run_rank, InterpError, T};
use rlx_ir::{BinaryOp, ConstData, Mir, MirOp, OpSet};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};

/// Runs rank r's graph on `inputs[r]`, all ranks at once; returns each rank's outputs.
pub fn run_ranks(graphs: &[Mir], inputs: &[Vec<ConstData>]) -> Result<Vec<Vec<ConstData>>, InterpError> {
    if graphs.len() != inputs.len() {
        return Err(InterpError::graph(format!("{} ranks, {} input lists", graphs.len(), inputs.len())));
    }
    let group = Arc::new(Group::new(graphs.len()));
    let results: Vec<Result<Vec<ConstData>, InterpError>> = std::thread::scope(|s| {
        let handles: Vec<_> = graphs
            .iter()
            .zip(inputs)
            .enumerate()
            .map(|(rank, (g, ins))| {
                let m = Member { rank, group: group.clone() };
                s.spawn(move || {
                    let r = run_rank(g, ins, Some(&m));
                    if let Err(e) = &r {
                        m.group.abort(&format!("rank {rank} failed: {e}"));
                    }
                    r
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(InterpError::graph("a rank's thread panicked".into())))).collect()
    });
    // The rank that failed first names the problem (the others only saw the abort).
    let first = group.state.lock().map(|s| s.first_failure).unwrap_or(None);
    let mut out = Vec::with_capacity(results.len());
    for (rank, r) in results.into_iter().enumerate() {
        match r {
            Ok(o) => out.push(o),
            Err(e) if first.is_none_or(|f| f == rank) => {
                return Err(InterpError { msg: format!("rank {rank}: {}", e.msg), ..e });
            }
            Err(_) => {}
        }
    }
    if let Some(f) = first {
        return Err(InterpError::graph(format!("rank {f} failed")));
    }
    Ok(out)
}

struct State {
    /// Deposits of the collective being gathered, by rank.
    slots: Vec<Option<T>>,
    deposited: usize,
    /// The completed round, read by every rank before the next one starts.
    round: Option<Arc<Vec<T>>>,
    readers: usize,
    generation: u64,
    mail: BTreeMap<(usize, usize), VecDeque<T>>,
    aborted: Option<String>,
    first_failure: Option<usize>,
}

struct Group {
    n: usize,
    state: Mutex<State>,
    cv: Condvar,
}

impl Group {
    fn new(n: usize) -> Group {
        let state = State { slots: vec![None; n], deposited: 0, round: None, readers: 0, generation: 0, mail: BTreeMap::new(), aborted: None, first_failure: None };
        Group { n, state: Mutex::new(state), cv: Condvar::new() }
    }

    fn abort(&self, why: &str) {
        if let Ok(mut s) = self.state.lock() {
            if s.aborted.is_none() {
                s.aborted = Some(why.to_string());
                s.first_failure = why.strip_prefix("rank ").and_then(|r| r.split(' ').next()).and_then(|r| r.parse().ok());
            }
        }
        self.cv.notify_all();
    }

    /// Every rank's `t`, in rank order, once all have given theirs.
    fn all(&self, rank: usize, t: T) -> Result<Arc<Vec<T>>, String> {
        let lock = |e: std::sync::PoisonError<_>| format!("exchange lock poisoned: {e}");
        let mut s = self.state.lock().map_err(lock)?;
        // The previous round must be read by everyone before this one fills.
        while s.round.is_some() && s.aborted.is_none() {
            s = self.cv.wait(s).map_err(lock)?;
        }
        if let Some(a) = &s.aborted {
            return Err(format!("stopped: {a}"));
        }
        s.slots[rank] = Some(t);
        s.deposited += 1;
        if s.deposited == self.n {
            let all: Vec<T> = s.slots.iter_mut().map(|x| x.take().expect("every rank deposited")).collect();
            s.round = Some(Arc::new(all));
            s.deposited = 0;
            s.readers = 0;
            s.generation += 1;
            self.cv.notify_all();
        } else {
            let g = s.generation;
            while s.generation == g && s.aborted.is_none() {
                s = self.cv.wait(s).map_err(lock)?;
            }
            if let Some(a) = &s.aborted {
                return Err(format!("stopped: {a}"));
            }
        }
        let r = s.round.clone().expect("a completed round");
        s.readers += 1;
        if s.readers == self.n {
            s.round = None;
            self.cv.notify_all();
        }
        Ok(r)
    }

    fn send(&self, from: usize, to: usize, t: T) -> Result<(), String> {
        let mut s = self.state.lock().map_err(|e| format!("mailbox lock poisoned: {e}"))?;
        s.mail.entry((from, to)).or_default().push_back(t);
        self.cv.notify_all();
        Ok(())
    }

    fn recv(&self, from: usize, to: usize) -> Result<T, String> {
        let lock = |e: std::sync::PoisonError<_>| format!("mailbox lock poisoned: {e}");
        let mut s = self.state.lock().map_err(lock)?;
        loop {
            if let Some(t) = s.mail.get_mut(&(from, to)).and_then(VecDeque::pop_front) {
                return Ok(t);
            }
            if let Some(a) = &s.aborted {
                return Err(format!("stopped: {a}"));
            }
            s = self.cv.wait(s).map_err(lock)?;
        }
    }
}

/// One rank's handle on the group.
pub(crate) struct Member {
    rank: usize,
    group: Arc<Group>,
}

impl Member {
    /// Runs a collective or transfer `op` with this rank's input `x` (none for `recv`).
    pub(crate) fn exchange(&self, op: &MirOp, x: Option<&T>) -> Result<T, String> {
        let n = self.group.n;
        let ranks_ok = |r: usize| if r == n { Ok(()) } else { Err(format!("{}: built for {r} ranks, run with {n}", op.kind())) };
        let peer_ok = |p: usize| if p < n && p != self.rank { Ok(()) } else { Err(format!("{}: peer {p} is not another rank of {n}", op.kind())) };
        let x = || x.cloned().ok_or_else(|| format!("{}: no input", op.kind()));
        let sum = |all: &[T]| -> Result<T, String> {
            let mut acc = all[0].clone();
            for t in &all[1..] {
                acc = one(exec(&MirOp::Binary(BinaryOp::Add), &[&acc, t], &BTreeMap::new())?)?;
            }
            Ok(acc)
        };
        match op {
            MirOp::AllReduce { ranks } => {
                ranks_ok(*ranks)?;
                sum(&self.group.all(self.rank, x()?)?)
            }
            MirOp::AllGather { axis, ranks } => {
                ranks_ok(*ranks)?;
                let all = self.group.all(self.rank, x()?)?;
                let refs: Vec<&T> = all.iter().collect();
                one(exec(&MirOp::Concat { axis: *axis }, &refs, &BTreeMap::new())?)
            }
            MirOp::ReduceScatter { axis, ranks } => {
                ranks_ok(*ranks)?;
                let total = sum(&self.group.all(self.rank, x()?)?)?;
                let part = (total.shape.get(*axis).copied().unwrap_or(0) / n) as i64;
                let start = part * self.rank as i64;
                let slice = MirOp::Slice { axes: vec![*axis], starts: vec![start], ends: vec![start + part], steps: vec![1] };
                one(exec(&slice, &[&total], &BTreeMap::new())?)
            }
            MirOp::Send { peer } => {
                peer_ok(*peer)?;
                let t = x()?;
                self.group.send(self.rank, *peer, t.clone())?;
                Ok(t)
            }
            MirOp::Recv { peer, .. } => {
                peer_ok(*peer)?;
                self.group.recv(*peer, self.rank)
            }
            _ => Err(format!("{} is not a collective", op.kind())),
        }
    }
}

fn one(mut v: Vec<T>) -> Result<T, String> {
    v.pop().ok_or_else(|| "no output".to_string())
}
