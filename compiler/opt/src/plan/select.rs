//! Kernels of the data-dependent-length ops (`rlx_ir::bounded`): `nonzero`, `compress`, `nms`, `unique`. Each is
//! one serial kernel that fills its output with the padding (zeros), then writes the selected entries to
//! the front through a running count (a mutable scalar; `nms` stores it as its second output), the
//! interpreter's order exactly. Inputs are read
//! through `elem`, so a producer may be inlined. `nms` needs no sort: each step scans the class's boxes
//! for the best candidate after the previous one in (descending score, ascending index) order, then
//! tests it against the boxes kept so far, which it reads back from its own output rows.

use super::index::linear;
use super::kernel::{lit, nest, KB};
use super::Planner;
use rlx_ir::loops::{Access, Expr, IOp, Kernel, LoopKind, Stmt, Var};
use rlx_ir::{BinaryOp, DType, MirOp, NodeId, UnaryOp};
use std::collections::HashMap;

fn b(op: BinaryOp, dt: DType, x: Expr, y: Expr) -> Expr {
    Expr::Bin(op, dt, Box::new(x), Box::new(y))
}
fn f(op: BinaryOp, x: Expr, y: Expr) -> Expr {
    b(op, DType::F32, x, y)
}
/// An index expression (1/0) from a bool scalar.
fn truth(c: Expr) -> Expr {
    Expr::Select(Box::new(c), Box::new(Expr::Int(1)), Box::new(Expr::Int(0)))
}
fn all(cs: Vec<Expr>) -> Expr {
    cs.into_iter().reduce(|x, y| b(BinaryOp::And, DType::Bool, x, y)).unwrap_or(Expr::Lit(1.0, DType::Bool))
}
fn idx(v: Var) -> Expr {
    Expr::ToIndex { from: DType::I64, x: Box::new(Expr::Var(v)) }
}
fn inc(v: Var) -> Stmt {
    Stmt::Assign { var: v, value: b(BinaryOp::Add, DType::I64, Expr::Var(v), lit(1.0, DType::I64)) }
}
fn serial(var: Var, extent: usize, body: Vec<Stmt>) -> Stmt {
    Stmt::For { var, extent: extent as i64, kind: LoopKind::Serial, body }
}

impl Planner<'_> {
    /// The kernel of `nonzero`, `compress`, `nms` or `unique` node `r`.
    pub(super) fn select_kernel(&mut self, r: NodeId) -> (Kernel, Vec<u32>, Vec<NodeId>) {
        let node = self.g.node(r).clone();
        if let MirOp::Unique { axis, sorted } = node.op {
            return self.unique_kernel(&node, r, axis, sorted);
        }
        let out = node.outputs[0];
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let o = self.output_param(&mut kb, out, Access::Write);
        let (odt, oshape) = (self.dt(out), self.shape(out));
        let total: usize = oshape.iter().product();
        let fill = kb.var();
        let mut body = vec![Stmt::For { var: fill, extent: total as i64, kind: LoopKind::Serial, body: vec![Stmt::Store { buf: o, index: Expr::Var(fill), value: lit(0.0, odt) }] }];
        let cnt = kb.var();
        body.push(Stmt::Decl { var: cnt, dtype: DType::I64, init: lit(0.0, DType::I64) });
        match node.op {
            MirOp::NonZero => {
                let x = node.inputs[0];
                let (s, dt) = (self.shape(x), self.dt(x));
                let n = total / s.len();
                body.extend(nest(&mut kb, &s, LoopKind::Serial, &mut |kb, ix| {
                    let v = self.elem(kb, x, ix);
                    let mut st: Vec<Stmt> = ix
                        .iter()
                        .enumerate()
                        .map(|(d, e)| Stmt::Store { buf: o, index: Expr::add(Expr::Int((d * n) as i64), idx(cnt)), value: Expr::ToIndex { from: DType::I64, x: Box::new(e.clone()) } })
                        .collect();
                    st.push(inc(cnt));
                    vec![Stmt::If { cond: truth(Expr::Un(UnaryOp::Not, DType::Bool, Box::new(b(BinaryOp::Eq, dt, v, lit(0.0, dt))))), body: st }]
                }));
            }
            MirOp::Compress { axis } => {
                let (x, c) = (node.inputs[0], node.inputs[1]);
                let s = self.shape(x);
                let (outer, len, inner) = (s[..axis].iter().product::<usize>(), s[axis], s[axis + 1..].iter().product::<usize>());
                let k = kb.var();
                let cv = self.elem(&mut kb, c, &[Expr::Var(k)]);
                let (ov, iv) = (kb.var(), kb.var());
                let src = [Expr::Var(ov), Expr::Var(k), Expr::Var(iv)];
                let x3 = [outer, len, inner];
                let xi = unflatten(&linear(&src, &x3), &s);
                let v = self.elem(&mut kb, x, &xi);
                let at = linear(&[Expr::Var(ov), idx(cnt), Expr::Var(iv)], &x3);
                let copy = serial(ov, outer, vec![serial(iv, inner, vec![Stmt::Store { buf: o, index: at, value: v }])]);
                body.push(serial(k, self.shape(c)[0], vec![Stmt::If { cond: truth(cv), body: vec![copy, inc(cnt)] }]));
            }
            MirOp::Nms { center_point_box, max_per_class } => {
                body.extend(self.nms_body(&mut kb, &node, o, cnt, center_point_box, max_per_class));
                let cb = self.buf_of[node.outputs[1].index()].expect("nms's count is materialized");
                let cbuf = self.buffers[cb as usize].clone();
                let c = kb.param(cb, &cbuf, Access::Write);
                body.push(Stmt::Store { buf: c, index: Expr::Int(0), value: Expr::Var(cnt) });
            }
            ref other => unreachable!("select_kernel on {other:?}"),
        }
        (Kernel { name: node.name.clone(), params: kb.params, body, vars: kb.vars }, kb.bindings, vec![r])
    }

    fn nms_body(&mut self, kb: &mut KB, node: &rlx_ir::Node<MirOp>, o: u32, cnt: Var, center: bool, max: usize) -> Vec<Stmt> {
        let (boxes, scores, iou, st) = (node.inputs[0], node.inputs[1], node.inputs[2], node.inputs[3]);
        let ss = self.shape(scores);
        let (nb, nc, n) = (ss[0], ss[1], ss[2]);
        let per = max.min(n);
        let zeros = |r: usize| vec![Expr::Int(0); r];
        let iou = self.elem(kb, iou, &zeros(self.shape(iou).len()));
        let st = self.elem(kb, st, &zeros(self.shape(st).len()));
        let (bv, cv, step, i, j) = (kb.var(), kb.var(), kb.var(), kb.var(), kb.var());
        let (kept, prev_s, prev_i, best_s, best_i, ok) = (kb.var(), kb.var(), kb.var(), kb.var(), kb.var(), kb.var());
        let s = self.elem(kb, scores, &[Expr::Var(bv), Expr::Var(cv), Expr::Var(i)]);
        let i64v = |v: Var| Expr::Var(v);
        let iv = Expr::ToIndex { from: DType::I64, x: Box::new(Expr::Var(i)) };
        // After (prev_s, prev_i) in the order, better than the best so far (ties keep the lower index).
        let after = b(BinaryOp::Or, DType::Bool, f(BinaryOp::Lt, s.clone(), Expr::Var(prev_s)), b(BinaryOp::And, DType::Bool, f(BinaryOp::Eq, s.clone(), Expr::Var(prev_s)), b(BinaryOp::Gt, DType::I64, iv.clone(), i64v(prev_i))));
        let better = b(BinaryOp::Or, DType::Bool, b(BinaryOp::Lt, DType::I64, i64v(best_i), lit(0.0, DType::I64)), f(BinaryOp::Gt, s.clone(), Expr::Var(best_s)));
        let cand = all(vec![f(BinaryOp::Gt, s.clone(), st), after, better]);
        let scan = serial(i, n, vec![Stmt::If { cond: truth(cand), body: vec![Stmt::Assign { var: best_s, value: s }, Stmt::Assign { var: best_i, value: iv }] }]);
        // Box j of the kept rows: its index is column 2 of row cnt - kept + j.
        let row = Expr::add(Expr::i(IOp::Sub, idx(cnt), idx(kept)), Expr::Var(j));
        let other = Expr::ToIndex { from: DType::I64, x: Box::new(Expr::load(o, Expr::add(Expr::mul(row, Expr::Int(3)), Expr::Int(2)))) };
        let mut coord = |bi: Expr, k: i64| self.elem(kb, boxes, &[Expr::Var(bv), bi, Expr::Int(k)]);
        let a: Vec<Expr> = (0..4).map(|k| coord(idx(best_i), k)).collect();
        let c: Vec<Expr> = (0..4).map(|k| coord(other.clone(), k)).collect();
        let sup = suppresses(&a, &c, center, iou);
        let test = serial(j, per, vec![Stmt::If { cond: Expr::i(IOp::Lt, Expr::Var(j), idx(kept)), body: vec![Stmt::If { cond: truth(sup), body: vec![Stmt::Assign { var: ok, value: lit(0.0, DType::I64) }] }] }]);
        let at = |k: i64| Expr::add(Expr::mul(idx(cnt), Expr::Int(3)), Expr::Int(k));
        let i64of = |v: Var| Expr::ToIndex { from: DType::I64, x: Box::new(Expr::Var(v)) };
        let keep = vec![
            Stmt::Store { buf: o, index: at(0), value: i64of(bv) },
            Stmt::Store { buf: o, index: at(1), value: i64of(cv) },
            Stmt::Store { buf: o, index: at(2), value: Expr::Var(best_i) },
            inc(cnt),
            inc(kept),
        ];
        let found = Expr::i(IOp::And, Expr::i(IOp::Le, Expr::Int(0), idx(best_i)), Expr::i(IOp::Lt, idx(kept), Expr::Int(per as i64)));
        let step_body = vec![
            Stmt::Decl { var: best_s, dtype: DType::F32, init: lit(f64::NEG_INFINITY, DType::F32) },
            Stmt::Decl { var: best_i, dtype: DType::I64, init: lit(-1.0, DType::I64) },
            scan,
            Stmt::If {
                cond: found,
                body: vec![
                    Stmt::Assign { var: prev_s, value: Expr::Var(best_s) },
                    Stmt::Assign { var: prev_i, value: Expr::Var(best_i) },
                    Stmt::Decl { var: ok, dtype: DType::I64, init: lit(1.0, DType::I64) },
                    test,
                    Stmt::If { cond: Expr::i(IOp::Lt, Expr::Int(0), idx(ok)), body: keep },
                ],
            },
        ];
        let class = vec![
            Stmt::Decl { var: kept, dtype: DType::I64, init: lit(0.0, DType::I64) },
            Stmt::Decl { var: prev_s, dtype: DType::F32, init: lit(f64::INFINITY, DType::F32) },
            Stmt::Decl { var: prev_i, dtype: DType::I64, init: lit(-1.0, DType::I64) },
            serial(step, n, step_body),
        ];
        vec![serial(bv, nb, vec![serial(cv, nc, class)])]
    }
}

impl Planner<'_> {
    /// `unique` in three passes over the slices, all serial, O(len² · slice): (A) whether each slice is
    /// the first of its value (kept in `inverse` meanwhile); (B) for each first slice its place — the
    /// first slices before it, or (sorted) those that compare below it — where its index, count and
    /// elements are written; (C) each slice's inverse: the place of its value's first slice.
    fn unique_kernel(&mut self, node: &rlx_ir::Node<MirOp>, r: NodeId, axis: Option<usize>, sorted: bool) -> (Kernel, Vec<u32>, Vec<NodeId>) {
        let mut kb = KB { params: Vec::new(), bindings: Vec::new(), vars: 0, subst: HashMap::new() };
        let p: Vec<u32> = node.outputs.iter().map(|&v| self.output_param(&mut kb, v, Access::Write)).collect();
        let (y, ind, inv, cnt) = (p[0], p[1], p[2], p[3]);
        let x = node.inputs[0];
        let (s, dt) = (self.shape(x), self.dt(x));
        let (outer, len, inner) = match axis {
            Some(a) => (s[..a].iter().product::<usize>(), s[a], s[a + 1..].iter().product::<usize>()),
            None => (1, s.iter().product(), 1),
        };
        let per = outer * inner;
        let i64l = |v: f64| lit(v, DType::I64);
        let geo = Slices { x, shape: s.clone(), len, inner, per, dt };
        let flat = |sl: Expr, e: Expr| geo.flat(sl, e);
        let mut body = Vec::new();
        let fill = kb.var();
        body.push(serial(fill, len, vec![
            Stmt::Store { buf: ind, index: Expr::Var(fill), value: i64l(0.0) },
            Stmt::Store { buf: cnt, index: Expr::Var(fill), value: i64l(0.0) },
        ]));
        let fy = kb.var();
        body.push(serial(fy, outer * len * inner, vec![Stmt::Store { buf: y, index: Expr::Var(fy), value: lit(0.0, dt) }]));
        // (A) first[sl] = no earlier slice equal to it, held in inverse.
        let (sa, ta, first) = (kb.var(), kb.var(), kb.var());
        let (cmp, res) = self.compare_slices(&mut kb, &geo, Expr::Var(ta), Expr::Var(sa));
        let mut inner_a = cmp;
        inner_a.push(Stmt::If { cond: Expr::i(IOp::Eq, idx(res), Expr::Int(0)), body: vec![Stmt::Assign { var: first, value: i64l(0.0) }] });
        body.push(serial(sa, len, vec![
            Stmt::Decl { var: first, dtype: DType::I64, init: i64l(1.0) },
            serial(ta, len, vec![Stmt::If { cond: Expr::i(IOp::Lt, Expr::Var(ta), Expr::Var(sa)), body: inner_a }]),
            Stmt::Store { buf: inv, index: Expr::Var(sa), value: Expr::Var(first) },
        ]));
        // (B) each first slice's place, index, count and elements.
        let (sb, tb, place, n) = (kb.var(), kb.var(), kb.var(), kb.var());
        let is_first = |v: Var| Expr::i(IOp::Eq, Expr::ToIndex { from: DType::I64, x: Box::new(Expr::load(inv, Expr::Var(v))) }, Expr::Int(1));
        let (cmp, res) = self.compare_slices(&mut kb, &geo, Expr::Var(tb), Expr::Var(sb));
        let below = if sorted { Expr::i(IOp::Lt, idx(res), Expr::Int(0)) } else { Expr::i(IOp::Lt, Expr::Var(tb), Expr::Var(sb)) };
        let mut inner_b = cmp;
        inner_b.push(Stmt::If { cond: Expr::i(IOp::And, is_first(tb), below), body: vec![inc(place)] });
        inner_b.push(Stmt::If { cond: Expr::i(IOp::Eq, idx(res), Expr::Int(0)), body: vec![inc(n)] });
        let e = kb.var();
        let v = self.slice_elem(&mut kb, &geo, Expr::Var(sb), Expr::Var(e));
        let copy = serial(e, per, vec![Stmt::Store { buf: y, index: flat(idx(place), Expr::Var(e)), value: v }]);
        body.push(serial(sb, len, vec![Stmt::If {
            cond: is_first(sb),
            body: vec![
                Stmt::Decl { var: place, dtype: DType::I64, init: i64l(0.0) },
                Stmt::Decl { var: n, dtype: DType::I64, init: i64l(0.0) },
                serial(tb, len, inner_b),
                Stmt::Store { buf: ind, index: idx(place), value: Expr::ToIndex { from: DType::I64, x: Box::new(Expr::Var(sb)) } },
                Stmt::Store { buf: cnt, index: idx(place), value: Expr::Var(n) },
                copy,
            ],
        }]));
        // (C) inverse: the place whose index is the first slice equal to this one.
        let (sc, tc, k, firstv) = (kb.var(), kb.var(), kb.var(), kb.var());
        let (cmp, res) = self.compare_slices(&mut kb, &geo, Expr::Var(tc), Expr::Var(sc));
        let mut inner_c = cmp;
        inner_c.push(Stmt::If { cond: Expr::i(IOp::Eq, idx(res), Expr::Int(0)), body: vec![Stmt::Assign { var: firstv, value: Expr::ToIndex { from: DType::I64, x: Box::new(Expr::Var(tc)) } }] });
        // Places past the count hold index 0 too: only places with a count are matched.
        let used = Expr::i(IOp::Lt, Expr::Int(0), Expr::ToIndex { from: DType::I64, x: Box::new(Expr::load(cnt, Expr::Var(k))) });
        let found = Expr::i(IOp::And, used, Expr::i(IOp::Eq, Expr::ToIndex { from: DType::I64, x: Box::new(Expr::load(ind, Expr::Var(k))) }, idx(firstv)));
        body.push(serial(sc, len, vec![
            Stmt::Decl { var: firstv, dtype: DType::I64, init: i64l(-1.0) },
            serial(tc, len, vec![Stmt::If { cond: Expr::i(IOp::And, Expr::i(IOp::Lt, idx(firstv), Expr::Int(0)), Expr::i(IOp::Le, Expr::Var(tc), Expr::Var(sc))), body: inner_c }]),
            serial(k, len, vec![Stmt::If { cond: found, body: vec![Stmt::Store { buf: inv, index: Expr::Var(sc), value: Expr::ToIndex { from: DType::I64, x: Box::new(Expr::Var(k)) } }] }]),
        ]));
        (Kernel { name: node.name.clone(), params: kb.params, body, vars: kb.vars }, kb.bindings, vec![r])
    }
}

/// `unique`'s input seen as `len` slices of `per` elements ([outer, len, inner]).
struct Slices {
    x: rlx_ir::ValueId,
    shape: Vec<usize>,
    len: usize,
    inner: usize,
    per: usize,
    dt: DType,
}

impl Slices {
    /// The flat position of element `e` (of `per`) of slice `sl`.
    fn flat(&self, sl: Expr, e: Expr) -> Expr {
        let (o, i) = (Expr::i(IOp::Div, e.clone(), Expr::Int(self.inner as i64)), Expr::i(IOp::Rem, e, Expr::Int(self.inner as i64)));
        Expr::add(Expr::mul(Expr::add(Expr::mul(o, Expr::Int(self.len as i64)), sl), Expr::Int(self.inner as i64)), i)
    }
}

impl Planner<'_> {
    fn slice_elem(&mut self, kb: &mut KB, g: &Slices, sl: Expr, e: Expr) -> Expr {
        let xi = unflatten(&g.flat(sl, e), &g.shape);
        self.elem(kb, g.x, &xi)
    }

    /// Statements setting a scalar to -1 / 0 / 1 as slice `a` compares below / equal to / above slice
    /// `c` (lexicographically), and that scalar.
    fn compare_slices(&mut self, kb: &mut KB, g: &Slices, a: Expr, c: Expr) -> (Vec<Stmt>, Var) {
        let (res, e) = (kb.var(), kb.var());
        let va = self.slice_elem(kb, g, a, Expr::Var(e));
        let vc = self.slice_elem(kb, g, c, Expr::Var(e));
        let set = |v: f64| vec![Stmt::Assign { var: res, value: lit(v, DType::I64) }];
        let body = vec![Stmt::If {
            cond: Expr::i(IOp::Eq, idx(res), Expr::Int(0)),
            body: vec![
                Stmt::If { cond: truth(b(BinaryOp::Lt, g.dt, va.clone(), vc.clone())), body: set(-1.0) },
                Stmt::If { cond: truth(b(BinaryOp::Gt, g.dt, va, vc)), body: set(1.0) },
            ],
        }];
        (vec![Stmt::Decl { var: res, dtype: DType::I64, init: lit(0.0, DType::I64) }, serial(e, g.per, body)], res)
    }
}

/// The multi-index of flat index `e` in `shape`.
fn unflatten(e: &Expr, shape: &[usize]) -> Vec<Expr> {
    let mut out = Vec::with_capacity(shape.len());
    let mut stride: usize = shape.iter().product();
    for &d in shape {
        stride /= d.max(1);
        out.push(Expr::i(IOp::Rem, Expr::i(IOp::Div, e.clone(), Expr::Int(stride as i64)), Expr::Int(d as i64)));
    }
    out
}

/// Whether box `a` suppresses box `c` (IoU above `iou`), as `rlx_interp`'s `nms` in f32.
fn suppresses(a: &[Expr], c: &[Expr], center: bool, iou: Expr) -> Expr {
    let two = || lit(2.0, DType::F32);
    let corners = |p: &[Expr]| -> [Expr; 4] {
        if center {
            let (hw, hh) = (f(BinaryOp::Div, p[2].clone(), two()), f(BinaryOp::Div, p[3].clone(), two()));
            [f(BinaryOp::Sub, p[0].clone(), hw.clone()), f(BinaryOp::Add, p[0].clone(), hw), f(BinaryOp::Sub, p[1].clone(), hh.clone()), f(BinaryOp::Add, p[1].clone(), hh)]
        } else {
            [f(BinaryOp::Min, p[1].clone(), p[3].clone()), f(BinaryOp::Max, p[1].clone(), p[3].clone()), f(BinaryOp::Min, p[0].clone(), p[2].clone()), f(BinaryOp::Max, p[0].clone(), p[2].clone())]
        }
    };
    let [ax0, ax1, ay0, ay1] = corners(a);
    let [cx0, cx1, cy0, cy1] = corners(c);
    let (ix0, ix1) = (f(BinaryOp::Max, ax0.clone(), cx0.clone()), f(BinaryOp::Min, ax1.clone(), cx1.clone()));
    let (iy0, iy1) = (f(BinaryOp::Max, ay0.clone(), cy0.clone()), f(BinaryOp::Min, ay1.clone(), cy1.clone()));
    let inter = f(BinaryOp::Mul, f(BinaryOp::Sub, ix1.clone(), ix0.clone()), f(BinaryOp::Sub, iy1.clone(), iy0.clone()));
    let a1 = f(BinaryOp::Mul, f(BinaryOp::Sub, ax1, ax0), f(BinaryOp::Sub, ay1, ay0));
    let a2 = f(BinaryOp::Mul, f(BinaryOp::Sub, cx1, cx0), f(BinaryOp::Sub, cy1, cy0));
    let union = f(BinaryOp::Sub, f(BinaryOp::Add, a1.clone(), a2.clone()), inter.clone());
    let zero = || lit(0.0, DType::F32);
    all(vec![
        f(BinaryOp::Gt, ix1, ix0),
        f(BinaryOp::Gt, iy1, iy0),
        f(BinaryOp::Gt, inter.clone(), zero()),
        f(BinaryOp::Gt, a1, zero()),
        f(BinaryOp::Gt, a2, zero()),
        f(BinaryOp::Gt, union.clone(), zero()),
        f(BinaryOp::Gt, f(BinaryOp::Div, inter, union), iou),
    ])
}
