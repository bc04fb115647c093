//! A control-flow region (`rlx_ir::lir::Region`) as control flow in the driver: a loop's header,
//! bound check, body call, carried copies and counter; an if's two calls. Each body is a local driver
//! of its own (`program`); a body's non-zero return code is returned as is.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, FuncRef, InstBuilder, MemFlagsData, StackSlot, StackSlotData, StackSlotKind, Value};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_frontend::FunctionBuilder;
use rlx_ir::lir::{Lir, Region, RegionKind, LOOP_ERROR_CODES};

/// Calls `f(scratch, ins, outs)` and returns its code from the driver when it is not zero.
fn call_checked(b: &mut FunctionBuilder, f: FuncRef, args: [Value; 3]) {
    let call = b.ins().call(f, &args);
    let rc = b.inst_results(call)[0];
    let (err, next) = (b.create_block(), b.create_block());
    b.ins().brif(rc, err, &[], next, &[]);
    b.switch_to_block(err);
    b.seal_block(err);
    b.ins().return_(&[rc]);
    b.switch_to_block(next);
    b.seal_block(next);
}

/// A stack array of `n` pointers.
fn array(b: &mut FunctionBuilder, ptr: types::Type, n: usize, ptrs: &[Value]) -> StackSlot {
    let slot = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, (n.max(1) * 8) as u32, 3));
    for (k, &p) in ptrs.iter().enumerate() {
        b.ins().stack_store(ptr, p, slot, (k * 8) as i32);
    }
    slot
}

/// Writes region `r`; `calls`: its bodies' drivers; `addr`: a buffer's address; `check`: branches to
/// the driver's failure block for a code when a value is non-zero.
pub(super) fn emit(
    b: &mut FunctionBuilder,
    cfg: TargetFrontendConfig,
    lir: &Lir,
    r: &Region,
    calls: &[FuncRef],
    addr: &dyn Fn(&mut FunctionBuilder, u32) -> Value,
    check: &mut dyn FnMut(&mut FunctionBuilder, Value, i32),
) {
    let ptr = cfg.pointer_type();
    let bytes = |b: &mut FunctionBuilder, buf: u32| b.ins().iconst(ptr, lir.buffers[buf as usize].bytes() as i64);
    let scratch = match r.scratch {
        Some(s) => addr(b, s),
        None => b.ins().iconst(ptr, 0),
    };
    let flags = MemFlagsData::trusted();
    match r.kind {
        RegionKind::If => {
            let cond = addr(b, r.operands[0]);
            let ins: Vec<Value> = r.operands[1..].iter().map(|&o| addr(b, o)).collect();
            let outs: Vec<Value> = r.results.iter().map(|&o| addr(b, o)).collect();
            let (si, so) = (array(b, ptr, ins.len(), &ins), array(b, ptr, outs.len(), &outs));
            let (insp, outsp) = (b.ins().stack_addr(ptr, si, 0), b.ins().stack_addr(ptr, so, 0));
            let c = b.ins().load(types::I8, flags, cond, 0);
            let (then_b, else_b, join) = (b.create_block(), b.create_block(), b.create_block());
            b.ins().brif(c, then_b, &[], else_b, &[]);
            for (bi, blk) in [then_b, else_b].into_iter().enumerate() {
                b.switch_to_block(blk);
                b.seal_block(blk);
                call_checked(b, calls[bi], [scratch, insp, outsp]);
                b.ins().jump(join, &[]);
            }
            b.switch_to_block(join);
            b.seal_block(join);
        }
        RegionKind::Loop { .. } => {
            let lp = r.loop_parts().expect("a loop region");
            let trip = addr(b, lp.trip);
            let cond_in = addr(b, lp.cond);
            let carried_res: Vec<Value> = lp.carried.iter().map(|&o| addr(b, o)).collect();
            let scans = lp.scans;
            let scan_res: Vec<Value> = scans.iter().map(|&o| addr(b, o)).collect();
            let count = addr(b, lp.count);
            let temps: Vec<Value> = r.temps.iter().map(|&o| addr(b, o)).collect();
            let truth = addr(b, r.truth.expect("a loop region has its true constant"));
            // The carried values start as the operands; scans start as zeros; the count at 0.
            for (k, &dst) in carried_res.iter().enumerate() {
                let src = addr(b, lp.init[k]);
                let n = bytes(b, lp.carried[k]);
                b.call_memcpy(cfg, dst, src, n);
            }
            for (&s, &o) in scan_res.iter().zip(scans) {
                let (z, n) = (b.ins().iconst(types::I8, 0), bytes(b, o));
                b.call_memset(cfg, s, z, n);
            }
            let z = b.ins().iconst(types::I64, 0);
            b.ins().store(flags, z, count, 0);
            let c0 = b.ins().load(types::I8, flags, cond_in, 0);
            b.ins().store(flags, c0, temps[0], 0);
            let mut ins = vec![count, truth];
            ins.extend(&carried_res);
            for &o in lp.captured {
                ins.push(addr(b, o));
            }
            let si = array(b, ptr, ins.len(), &ins);
            let so = array(b, ptr, temps.len() + scans.len(), &temps);
            let (head, body, done) = (b.create_block(), b.create_block(), b.create_block());
            b.ins().jump(head, &[]);
            b.switch_to_block(head);
            let i = b.ins().load(types::I64, flags, count, 0);
            let t = b.ins().load(types::I64, flags, trip, 0);
            let c = b.ins().load(types::I8, flags, temps[0], 0);
            let lt = b.ins().icmp(IntCC::SignedLessThan, i, t);
            let cn = b.ins().icmp_imm_s(IntCC::NotEqual, c, 0);
            let go = b.ins().band(lt, cn);
            b.ins().brif(go, body, &[], done, &[]);
            b.switch_to_block(body);
            b.seal_block(body);
            if let Some(m) = lp.max_trips {
                let over = b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, i, m as i64);
                check(b, over, LOOP_ERROR_CODES[0].0);
            }
            // Each scan output's slice of this iteration.
            for (s, (&p, &o)) in scan_res.iter().zip(scans).enumerate() {
                let slice = lp.scan_slice_bytes(lir, o);
                let off = b.ins().imul_imm_s(i, slice as i64);
                let sp = b.ins().iadd(p, off);
                b.ins().stack_store(ptr, sp, so, ((temps.len() + s) * 8) as i32);
            }
            let (insp, outsp) = (b.ins().stack_addr(ptr, si, 0), b.ins().stack_addr(ptr, so, 0));
            call_checked(b, calls[0], [scratch, insp, outsp]);
            for (k, &dst) in carried_res.iter().enumerate() {
                let n = bytes(b, lp.carried[k]);
                b.call_memcpy(cfg, dst, temps[1 + k], n);
            }
            let i1 = b.ins().iadd_imm_s(i, 1);
            b.ins().store(flags, i1, count, 0);
            b.ins().jump(head, &[]);
            b.seal_block(head);
            b.switch_to_block(done);
            b.seal_block(done);
        }
    }
}
