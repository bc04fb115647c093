//! A control-flow region (`rlx_ir::lir::Region`) as control flow in the driver: a loop's header,
//! bound check, body call, carried copies and counter; an if's two calls. Each body is a driver of its
//! own (`PREFIX_B_run`, written by `program`); a body's non-zero return code is returned as is.

use rlx_ir::lir::{Buffer, Lir, Region, RegionKind, LOOP_ERROR_CODES};
use std::collections::BTreeSet;
use std::fmt::Write;

const MEMCPY: &str = "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)";
const MEMSET: &str = "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)";

/// Writes region `r` (in place of launch `li`); `prefix`: its bodies' driver names. Returns whether
/// the driver needs the loop-bound return code (its `fail` block).
pub(super) fn emit(e: &mut String, lir: &Lir, r: &Region, li: usize, prefix: &str, base_of: &dyn Fn(&Buffer) -> String, decls: &mut BTreeSet<String>) -> bool {
    let mut n = 0;
    // A fresh pointer to buffer `b`.
    let mut ptr = |e: &mut String, b: u32| {
        n += 1;
        let buf = &lir.buffers[b as usize];
        let _ = writeln!(e, "  %r{li}.p{n} = getelementptr inbounds i8, ptr {}, i64 {}", base_of(buf), buf.offset);
        format!("%r{li}.p{n}")
    };
    let bytes = |b: u32| lir.buffers[b as usize].bytes();
    let scratch = match r.scratch {
        Some(s) => ptr(e, s),
        None => "null".to_string(),
    };
    // An array of pointers, stored once (slots given as `None` are stored later).
    let array = |e: &mut String, what: &str, slots: &[Option<String>]| {
        let _ = writeln!(e, "  %r{li}.{what} = alloca [{} x ptr], align 8", slots.len().max(1));
        for (k, s) in slots.iter().enumerate() {
            if let Some(p) = s {
                let _ = writeln!(e, "  %r{li}.{what}{k} = getelementptr inbounds ptr, ptr %r{li}.{what}, i64 {k}\n  store ptr {p}, ptr %r{li}.{what}{k}, align 8");
            }
        }
    };
    match r.kind {
        RegionKind::If => {
            let cond = ptr(e, r.operands[0]);
            let ins: Vec<Option<String>> = r.operands[1..].iter().map(|&b| Some(ptr(e, b))).collect();
            let outs: Vec<Option<String>> = r.results.iter().map(|&b| Some(ptr(e, b))).collect();
            array(e, "ins", &ins);
            array(e, "outs", &outs);
            let _ = writeln!(e, "  %r{li}.c = load i8, ptr {cond}, align 1\n  %r{li}.cb = icmp ne i8 %r{li}.c, 0\n  br i1 %r{li}.cb, label %r{li}.then, label %r{li}.else");
            for (bi, side) in ["then", "else"].iter().enumerate() {
                let _ = writeln!(e, "r{li}.{side}:\n  %r{li}.rc{bi} = call i32 @{prefix}_{bi}_run(ptr {scratch}, ptr %r{li}.ins, ptr %r{li}.outs)\n  br label %r{li}.join");
            }
            let _ = writeln!(e, "r{li}.join:\n  %r{li}.rc = phi i32 [ %r{li}.rc0, %r{li}.then ], [ %r{li}.rc1, %r{li}.else ]");
            let _ = writeln!(e, "  %r{li}.bad = icmp ne i32 %r{li}.rc, 0\n  br i1 %r{li}.bad, label %r{li}.err, label %r{li}.ok\nr{li}.err:\n  ret i32 %r{li}.rc\nr{li}.ok:");
            false
        }
        RegionKind::Loop { .. } => {
            let lp = r.loop_parts().expect("a loop region");
            decls.insert(MEMCPY.to_string());
            decls.insert(MEMSET.to_string());
            let trip = ptr(e, lp.trip);
            let cond_in = ptr(e, lp.cond);
            let carried_res: Vec<String> = lp.carried.iter().map(|&b| ptr(e, b)).collect();
            let scans = lp.scans;
            let scan_res: Vec<String> = scans.iter().map(|&b| ptr(e, b)).collect();
            let count = ptr(e, lp.count);
            let temps: Vec<String> = r.temps.iter().map(|&b| ptr(e, b)).collect();
            let truth = ptr(e, r.truth.expect("a loop region has its true constant"));
            // The carried values start as the operands; scans start as zeros; the count at 0.
            for (k, dst) in carried_res.iter().enumerate() {
                let src = ptr(e, lp.init[k]);
                let _ = writeln!(e, "  call void @llvm.memcpy.p0.p0.i64(ptr {dst}, ptr {src}, i64 {}, i1 false)", bytes(lp.carried[k]));
            }
            for (s, &b) in scan_res.iter().zip(scans) {
                let _ = writeln!(e, "  call void @llvm.memset.p0.i64(ptr {s}, i8 0, i64 {}, i1 false)", bytes(b));
            }
            let _ = writeln!(e, "  store i64 0, ptr {count}, align 8\n  %r{li}.c0 = load i8, ptr {cond_in}, align 1\n  store i8 %r{li}.c0, ptr {}, align 1", temps[0]);
            let mut ins = vec![Some(count.clone()), Some(truth)];
            ins.extend(carried_res.iter().map(|p| Some(p.clone())));
            for &b in lp.captured {
                ins.push(Some(ptr(e, b)));
            }
            let mut outs: Vec<Option<String>> = temps.iter().map(|p| Some(p.clone())).collect();
            outs.extend(scans.iter().map(|_| None));
            array(e, "ins", &ins);
            array(e, "outs", &outs);
            let _ = writeln!(e, "  br label %r{li}.head\nr{li}.head:");
            let _ = writeln!(e, "  %r{li}.i = load i64, ptr {count}, align 8\n  %r{li}.t = load i64, ptr {trip}, align 8\n  %r{li}.c = load i8, ptr {}, align 1", temps[0]);
            let _ = writeln!(e, "  %r{li}.lt = icmp slt i64 %r{li}.i, %r{li}.t\n  %r{li}.cn = icmp ne i8 %r{li}.c, 0\n  %r{li}.go = and i1 %r{li}.lt, %r{li}.cn\n  br i1 %r{li}.go, label %r{li}.body, label %r{li}.done\nr{li}.body:");
            if let Some(m) = lp.max_trips {
                let _ = writeln!(e, "  %r{li}.over = icmp sge i64 %r{li}.i, {m}\n  br i1 %r{li}.over, label %fail{}, label %r{li}.run\nr{li}.run:", LOOP_ERROR_CODES[0].0);
            }
            // Each scan output's slice of this iteration.
            for (s, (p, &b)) in scan_res.iter().zip(scans).enumerate() {
                let slice = lp.scan_slice_bytes(lir, b);
                let k = temps.len() + s;
                let _ = writeln!(e, "  %r{li}.so{s} = mul i64 %r{li}.i, {slice}\n  %r{li}.sp{s} = getelementptr inbounds i8, ptr {p}, i64 %r{li}.so{s}");
                let _ = writeln!(e, "  %r{li}.outs{k} = getelementptr inbounds ptr, ptr %r{li}.outs, i64 {k}\n  store ptr %r{li}.sp{s}, ptr %r{li}.outs{k}, align 8");
            }
            let _ = writeln!(e, "  %r{li}.rc = call i32 @{prefix}_0_run(ptr {scratch}, ptr %r{li}.ins, ptr %r{li}.outs)");
            let _ = writeln!(e, "  %r{li}.bad = icmp ne i32 %r{li}.rc, 0\n  br i1 %r{li}.bad, label %r{li}.err, label %r{li}.next\nr{li}.err:\n  ret i32 %r{li}.rc\nr{li}.next:");
            for (k, dst) in carried_res.iter().enumerate() {
                let _ = writeln!(e, "  call void @llvm.memcpy.p0.p0.i64(ptr {dst}, ptr {}, i64 {}, i1 false)", temps[1 + k], bytes(lp.carried[k]));
            }
            let _ = writeln!(e, "  %r{li}.i1 = add i64 %r{li}.i, 1\n  store i64 %r{li}.i1, ptr {count}, align 8\n  br label %r{li}.head\nr{li}.done:");
            lp.max_trips.is_some()
        }
    }
}
