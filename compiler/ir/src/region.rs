//! Control-flow regions: the `loop` and `if` ops of HIR and MIR own their sub-graphs (a body, two
//! branches). A region sees nothing of the graph around it: every outer value it reads is an explicit
//! operand of the op, bound to a trailing input of the region (its captures). This file holds their
//! signatures — the one type rule both op sets use — and the attributes of the text form.
//!
//! `loop {max_trips, carried}`: operands (trip: i64[], cond: bool[], carried…, captured…); the body
//! takes (iteration: i64[], cond: bool[], carried…, captured…) and yields (cond: bool[], carried…,
//! scans…). The op runs the body while iteration < trip and cond holds, the body's cond and carried
//! outputs feeding the next iteration; its results are (carried…, scans…, count: i64[]): the final
//! carried values, each scan output stacked along a new leading axis of `max_trips` slices — slices
//! past `count` (the iterations run) are zeros, as for `crate::bounded` —, and the count. A loop-carried
//! value keeps its type across an iteration (a body that changes it is refused). `max_trips` bounds the
//! iterations: a loop still running when it is reached is an error at run time; `None` is unbounded
//! (allowed only without scan outputs, whose size it sets).
//!
//! `if`: operands (cond: bool[], captured…); both branches take (captured…) and yield outputs of the
//! same types (static shapes), which are the op's results from the branch the condition picks.

use crate::attr::{Attr, Attrs};
use crate::{DType, Dim, Graph, OpSet, Shape, TensorType};

fn scalar(t: &TensorType, dt: DType, what: &str) -> Result<(), String> {
    if t.dtype != dt || t.shape.rank() != 0 {
        return Err(format!("{what} must be a {dt} scalar, got {t}"));
    }
    Ok(())
}

fn fixed(t: &TensorType, what: &str) -> Result<(), String> {
    if t.shape.as_fixed().is_none() {
        return Err(format!("{what} needs a static shape, got {t}"));
    }
    Ok(())
}

/// A region's inputs must be exactly `want` (the op's operand types, in order).
fn inputs<O: OpSet>(g: &Graph<O>, want: &[TensorType], what: &str) -> Result<(), String> {
    if g.inputs.len() != want.len() {
        return Err(format!("{what} takes {} inputs, the op binds {}", g.inputs.len(), want.len()));
    }
    for (k, (&i, w)) in g.inputs.iter().zip(want).enumerate() {
        if g.ty(i) != w {
            return Err(format!("{what} input {k} is {}, the op binds {w}", g.ty(i)));
        }
    }
    Ok(())
}

/// The result types of a `loop` (module doc) from its operand types.
pub fn infer_loop<O: OpSet>(max_trips: Option<u64>, carried: usize, body: &Graph<O>, ins: &[&TensorType]) -> Result<Vec<TensorType>, String> {
    if ins.len() < 2 + carried {
        return Err(format!("loop: {} operands, fewer than trip count, condition and {carried} carried values", ins.len()));
    }
    scalar(ins[0], DType::I64, "loop trip count")?;
    scalar(ins[1], DType::Bool, "loop condition")?;
    let want: Vec<TensorType> = ins.iter().map(|t| (*t).clone()).collect();
    inputs(body, &want, "loop body")?;
    let outs: Vec<&TensorType> = body.outputs.iter().map(|&o| body.ty(o)).collect();
    if outs.len() < 1 + carried {
        return Err(format!("loop body yields {} values, fewer than the condition and {carried} carried values", outs.len()));
    }
    scalar(outs[0], DType::Bool, "loop body output 0 (the condition)")?;
    let mut res = Vec::new();
    for k in 0..carried {
        let (a, b) = (ins[2 + k], outs[1 + k]);
        fixed(a, &format!("loop-carried value {k}"))?;
        if a != b {
            return Err(format!("loop body changes loop-carried value {k} from {a} to {b} across an iteration"));
        }
        res.push(a.clone());
    }
    for (k, t) in outs[1 + carried..].iter().enumerate() {
        let m = max_trips.ok_or_else(|| format!("loop scan output {k} needs a static maximum trip count (its length)"))?;
        fixed(t, &format!("loop scan output {k}"))?;
        let mut s = vec![Dim::Fixed(m)];
        s.extend(t.shape.0.iter().cloned());
        res.push(TensorType::new(t.dtype, Shape(s)));
    }
    res.push(TensorType::new(DType::I64, Shape(vec![])));
    Ok(res)
}

/// The result types of an `if` (module doc) from its operand types.
pub fn infer_if<O: OpSet>(branches: &[Graph<O>], ins: &[&TensorType]) -> Result<Vec<TensorType>, String> {
    let [then_g, else_g] = branches else {
        return Err(format!("if: {} branches, needs 2", branches.len()));
    };
    let Some((c, captured)) = ins.split_first() else {
        return Err("if: takes a condition".into());
    };
    scalar(c, DType::Bool, "if condition")?;
    let want: Vec<TensorType> = captured.iter().map(|t| (*t).clone()).collect();
    inputs(then_g, &want, "if then-branch")?;
    inputs(else_g, &want, "if else-branch")?;
    if then_g.outputs.len() != else_g.outputs.len() {
        return Err(format!("if: the then-branch yields {} values, the else-branch {}", then_g.outputs.len(), else_g.outputs.len()));
    }
    let mut res = Vec::new();
    for (k, (&a, &b)) in then_g.outputs.iter().zip(&else_g.outputs).enumerate() {
        let (a, b) = (then_g.ty(a), else_g.ty(b));
        fixed(a, &format!("if output {k}"))?;
        if a != b {
            return Err(format!("if: the branches differ in output {k} ({a} and {b})"));
        }
        res.push(a.clone());
    }
    Ok(res)
}

/// The text form's attributes of a `loop` (`max_trips` -1: unbounded).
pub fn loop_attrs(max_trips: Option<u64>, carried: usize) -> Vec<(&'static str, Attr)> {
    vec![("max_trips", Attr::Int(max_trips.map_or(-1, |m| m as i64))), ("carried", Attr::Int(carried as i64))]
}

/// (max_trips, carried) from the text form's attributes.
pub fn loop_from_attrs(attrs: &[(String, Attr)]) -> Result<(Option<u64>, usize), String> {
    let a = Attrs(attrs);
    let m = match a.int("max_trips")? {
        -1 => None,
        m => Some(u64::try_from(m).map_err(|_| format!("loop: max_trips {m}"))?),
    };
    Ok((m, a.usize("carried")?))
}

/// Moves `regions` into the region slots `slots` of an op, which must match in number.
pub fn fill<O>(kind: &str, slots: &mut [Graph<O>], regions: Vec<Graph<O>>) -> Result<(), String> {
    if slots.len() != regions.len() {
        return Err(format!("{kind} takes {} regions, got {}", slots.len(), regions.len()));
    }
    for (s, r) in slots.iter_mut().zip(regions) {
        *s = r;
    }
    Ok(())
}
