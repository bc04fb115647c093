//! The region ops (`rlx_ir::region`): a `loop`'s body and an `if`'s branches are graphs of their own,
//! each run by [`crate::run`] on its operands.

use crate::tensor::T;
use rlx_ir::{Blob, ConstData, DType, Mir};

fn region(g: &Mir, args: &[ConstData], what: &str) -> Result<Vec<ConstData>, String> {
    crate::run(g, args).map_err(|e| format!("{what}: {e}"))
}

/// `loop`: the body run while iteration < trip and the condition holds; (carried…, scans…, count).
pub(crate) fn run_loop(max_trips: Option<u64>, carried: usize, body: &Mir, ins: &[&T]) -> Result<Vec<T>, String> {
    // The graph may not have been verified: its shape is checked here rather than trusted.
    let n_scan = body.outputs.len().checked_sub(1 + carried).ok_or("the loop body yields fewer values than the condition and the carried values")?;
    if ins.len() < 2 + carried || body.inputs.len() != ins.len() {
        return Err(format!("the loop binds {} operands to a body of {} inputs", ins.len(), body.inputs.len()));
    }
    let trip = *ins[0].to_i64().first().ok_or("the trip count is empty")?;
    let mut cond = *ins[1].to_i64().first().ok_or("the condition is empty")? != 0;
    let mut state: Vec<ConstData> = ins[2..2 + carried].iter().map(|t| t.to_const()).collect();
    let captured: Vec<ConstData> = ins[2 + carried..].iter().map(|t| t.to_const()).collect();
    let mut scans: Vec<Vec<u8>> = vec![Vec::new(); n_scan];
    let mut i: i64 = 0;
    while i < trip && cond {
        if let Some(m) = max_trips.filter(|&m| i as u64 >= m) {
            return Err(format!("the loop is still running after its bound of {m} iterations"));
        }
        let mut args = vec![ConstData::from_i64(vec![], &[i]), ConstData::scalar(DType::Bool, 1.0)];
        args.extend(state.iter().cloned());
        args.extend(captured.iter().cloned());
        let outs = region(body, &args, &format!("loop body, iteration {i}"))?;
        if outs[0].numel() != 1 {
            return Err(format!("the loop body's condition has {} elements", outs[0].numel()));
        }
        cond = outs[0].get_i64(0) != 0;
        state = outs[1..1 + carried].to_vec();
        for (k, s) in outs[1 + carried..].iter().enumerate() {
            scans[k].extend_from_slice(s.data.bytes());
        }
        i += 1;
    }
    let mut res: Vec<T> = state.iter().map(T::from_const).collect::<Result<_, _>>()?;
    for (k, mut bytes) in scans.into_iter().enumerate() {
        let ty = body.ty(body.outputs[1 + carried + k]);
        let elem = ty.shape.as_fixed().ok_or("a scan output needs a static shape")?;
        let m = max_trips.ok_or("scan outputs need a static maximum trip count")? as usize;
        let mut shape = vec![m];
        shape.extend(elem);
        let full = ty.dtype.bytes_for(shape.iter().product()).ok_or("scan output size overflows")?;
        bytes.resize(full, 0);
        res.push(T::from_const(&ConstData::new(ty.dtype, shape, Blob::from_vec(bytes))?)?);
    }
    res.push(T::from_const(&ConstData::from_i64(vec![], &[i]))?);
    Ok(res)
}

/// `if`: the branch the condition picks, run on the captured operands.
pub(crate) fn run_if(branches: &[Mir], ins: &[&T]) -> Result<Vec<T>, String> {
    if branches.len() != 2 {
        return Err(format!("an if has 2 branches, this one {}", branches.len()));
    }
    let take = *ins[0].to_i64().first().ok_or("the condition is empty")? != 0;
    let args: Vec<ConstData> = ins[1..].iter().map(|t| t.to_const()).collect();
    let (g, what) = if take { (&branches[0], "then-branch") } else { (&branches[1], "else-branch") };
    region(g, &args, what)?.iter().map(T::from_const).collect()
}
