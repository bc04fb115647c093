//! The text form shared by HIR and MIR graphs. `print` renumbers values canonically (inputs, constants,
//! node outputs, in that order), so `print(parse(t)) == t` for any printed `t`.
//!
//! ```text
//! graph {
//!   in %0 "x": f32[batch,4]
//!   const %1 "w": f32[4,2] = [1.0,2.0,3.0,4.0,5.0,6.0,7.0,8.0]
//!   %2 = matmul(%0, %1) : f32[batch,2] @"MatMul_0"
//!   %3, %4 = topk(%2) {axis=1, k=1, largest=true} : f32[batch,1], i64[batch,1] @"TopK_1"
//!   out %3, %4
//! }
//! ```

use crate::attr::Attr;
use crate::graph::{Def, Graph, OpSet, ValueId};
use crate::tensor::{decode_f64, decode_i64, encode_f64, encode_i64, Blob};
use crate::{ConstData, DType, Dim, Shape, TensorType};
use std::collections::HashMap;
use std::fmt::Write;

fn quote(s: &str) -> String {
    format!("{s:?}")
}

fn print_data(c: &ConstData, out: &mut String) {
    let b = c.data.bytes();
    if c.dtype.is_quantized_block() {
        out.push_str("x\"");
        for x in b {
            let _ = write!(out, "{x:02x}");
        }
        out.push('"');
        return;
    }
    out.push('[');
    for i in 0..c.numel() {
        if i > 0 {
            out.push(',');
        }
        match c.dtype {
            DType::F32 | DType::F16 | DType::BF16 => {
                let _ = write!(out, "{:?}", decode_f64(c.dtype, b, i) as f32);
            }
            DType::F64 => {
                let _ = write!(out, "{:?}", decode_f64(c.dtype, b, i));
            }
            DType::U64 => {
                let _ = write!(out, "{}", decode_i64(c.dtype, b, i) as u64);
            }
            _ => {
                let _ = write!(out, "{}", decode_i64(c.dtype, b, i));
            }
        }
    }
    out.push(']');
}

/// Prints a graph in the canonical text form.
pub fn print<O: OpSet>(g: &Graph<O>) -> String {
    let mut num: HashMap<ValueId, usize> = HashMap::new();
    let mut next = 0usize;
    let mut out = String::from("graph {\n");
    let mut name_of = |v: ValueId, num: &mut HashMap<ValueId, usize>| -> String {
        let n = *num.entry(v).or_insert_with(|| {
            next += 1;
            next - 1
        });
        match &g.value(v).name {
            Some(s) => format!("%{n} {}", quote(s)),
            None => format!("%{n}"),
        }
    };
    for &i in &g.inputs {
        let s = name_of(i, &mut num);
        let _ = writeln!(out, "  in {s}: {}", g.ty(i));
    }
    for (k, v) in g.values.iter().enumerate() {
        if let Def::Const(c) = &v.def {
            let s = name_of(ValueId(k as u32), &mut num);
            let _ = write!(out, "  const {s}: {} = ", v.ty);
            print_data(c, &mut out);
            out.push('\n');
        }
    }
    for n in &g.nodes {
        out.push_str("  ");
        let outs: Vec<String> = n.outputs.iter().map(|&o| name_of(o, &mut num)).collect();
        out.push_str(&outs.join(", "));
        let ins: Vec<String> = n.inputs.iter().map(|i| num.get(i).map(|k| format!("%{k}")).unwrap_or_else(|| format!("%?{}", i.0))).collect();
        let _ = write!(out, " = {}({})", n.op.kind(), ins.join(", "));
        let attrs = n.op.attrs();
        if !attrs.is_empty() {
            let a: Vec<String> = attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = write!(out, " {{{}}}", a.join(", "));
        }
        // A region op's sub-graphs, each in this form (its own value numbers), indented.
        let regions = n.op.regions();
        if !regions.is_empty() {
            let rs: Vec<String> = regions.iter().map(|r| print(r).trim_end().replace('\n', "\n    ")).collect();
            let _ = write!(out, " [{}]", rs.join(", "));
        }
        let tys: Vec<String> = n.outputs.iter().map(|&o| g.ty(o).to_string()).collect();
        let _ = writeln!(out, " : {} @{}", tys.join(", "), quote(&n.name));
    }
    let outs: Vec<String> = g.outputs.iter().map(|o| num.get(o).map(|k| format!("%{k}")).unwrap_or_else(|| format!("%?{}", o.0))).collect();
    // A graph without outputs has no `out` line (an empty one would not parse).
    if !outs.is_empty() {
        let _ = writeln!(out, "  out {}", outs.join(", "));
    }
    // State pairs are the trailing inputs and outputs (the verifier checks it): their count says all.
    if !g.state.is_empty() {
        let _ = writeln!(out, "  state {}", g.state.len());
    }
    // Outputs of data-dependent length: `bounded OUTPUT AXIS COUNT_OUTPUT` (indices into `out`).
    for b in &g.bounded {
        let _ = writeln!(out, "  bounded {} {} {}", b.output, b.axis, b.count);
    }
    out.push_str("}\n");
    out
}

/// A parse error with a 1-based line and column.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub msg: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.msg)
    }
}

struct P<'a> {
    s: &'a [u8],
    i: usize,
}

type R<T> = Result<T, ParseError>;

impl<'a> P<'a> {
    fn err<T>(&self, msg: impl Into<String>) -> R<T> {
        let before = &self.s[..self.i.min(self.s.len())];
        let line = before.iter().filter(|&&c| c == b'\n').count() + 1;
        let col = self.i - before.iter().rposition(|&c| c == b'\n').map(|p| p + 1).unwrap_or(0) + 1;
        Err(ParseError { line, col, msg: msg.into() })
    }
    fn ws(&mut self) {
        while self.i < self.s.len() {
            match self.s[self.i] {
                b' ' | b'\t' | b'\r' | b'\n' => self.i += 1,
                b'#' => {
                    while self.i < self.s.len() && self.s[self.i] != b'\n' {
                        self.i += 1;
                    }
                }
                _ => break,
            }
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: u8) -> R<()> {
        if self.eat(c) {
            Ok(())
        } else {
            self.err(format!("expected '{}'", c as char))
        }
    }
    fn word(&mut self) -> R<String> {
        self.ws();
        let st = self.i;
        while self.i < self.s.len() && (self.s[self.i].is_ascii_alphanumeric() || matches!(self.s[self.i], b'_' | b'.' | b'-' | b'+')) {
            self.i += 1;
        }
        if st == self.i {
            return self.err("expected a word or number");
        }
        Ok(String::from_utf8_lossy(&self.s[st..self.i]).into_owned())
    }
    fn keyword(&mut self, k: &str) -> R<()> {
        let w = self.word()?;
        if w != k {
            return self.err(format!("expected '{k}', found '{w}'"));
        }
        Ok(())
    }
    fn string(&mut self) -> R<String> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            let Some(&c) = self.s.get(self.i) else { return self.err("unterminated string") };
            self.i += 1;
            match c {
                b'"' => return Ok(out),
                b'\\' => {
                    let Some(&e) = self.s.get(self.i) else { return self.err("unterminated escape") };
                    self.i += 1;
                    match e {
                        b'n' => out.push('\n'),
                        b't' => out.push('\t'),
                        b'r' => out.push('\r'),
                        b'0' => out.push('\0'),
                        b'\\' => out.push('\\'),
                        b'"' => out.push('"'),
                        b'\'' => out.push('\''),
                        b'u' => {
                            self.expect(b'{')?;
                            let h = self.word()?;
                            self.expect(b'}')?;
                            match u32::from_str_radix(&h, 16).ok().and_then(char::from_u32) {
                                Some(ch) => out.push(ch),
                                None => return self.err("bad unicode escape"),
                            }
                        }
                        _ => return self.err("unknown escape"),
                    }
                }
                _ => {
                    // Re-decode UTF-8 sequences byte by byte.
                    let st = self.i - 1;
                    let len = match c {
                        0..=0x7f => 1,
                        0xc0..=0xdf => 2,
                        0xe0..=0xef => 3,
                        _ => 4,
                    };
                    let end = (st + len).min(self.s.len());
                    match std::str::from_utf8(&self.s[st..end]) {
                        Ok(t) => out.push_str(t),
                        Err(_) => return self.err("invalid UTF-8 in string"),
                    }
                    self.i = end;
                }
            }
        }
    }
    fn value_ref(&mut self) -> R<usize> {
        self.expect(b'%')?;
        let w = self.word()?;
        match w.parse() {
            Ok(n) => Ok(n),
            Err(_) => self.err(format!("bad value number '%{w}'")),
        }
    }
    fn ty(&mut self) -> R<TensorType> {
        let w = self.word()?;
        let Some(dt) = DType::parse(&w) else { return self.err(format!("unknown dtype '{w}'")) };
        self.expect(b'[')?;
        let mut dims = Vec::new();
        if !self.eat(b']') {
            loop {
                let w = self.word()?;
                dims.push(match w.parse::<u64>() {
                    Ok(n) => Dim::Fixed(n),
                    Err(_) => Dim::Sym(w),
                });
                if self.eat(b']') {
                    break;
                }
                self.expect(b',')?;
            }
        }
        Ok(TensorType::new(dt, Shape(dims)))
    }
    fn attr(&mut self) -> R<Attr> {
        match self.peek() {
            Some(b'"') => Ok(Attr::Str(self.string()?)),
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                if !self.eat(b']') {
                    loop {
                        items.push(self.word()?);
                        if self.eat(b']') {
                            break;
                        }
                        self.expect(b',')?;
                    }
                }
                if let Ok(v) = items.iter().map(|w| w.parse::<i64>()).collect::<Result<Vec<_>, _>>() {
                    return Ok(Attr::Ints(v));
                }
                Ok(Attr::Dims(items.into_iter().map(|w| w.parse::<u64>().map(Dim::Fixed).unwrap_or(Dim::Sym(w))).collect()))
            }
            _ => {
                let w = self.word()?;
                if w == "f" && self.eat(b'[') {
                    let mut v = Vec::new();
                    if !self.eat(b']') {
                        loop {
                            let x = self.word()?;
                            match x.parse::<f64>() {
                                Ok(f) => v.push(f),
                                Err(_) => return self.err(format!("bad float '{x}'")),
                            }
                            if self.eat(b']') {
                                break;
                            }
                            self.expect(b',')?;
                        }
                    }
                    return Ok(Attr::Floats(v));
                }
                if w == "true" || w == "false" {
                    return Ok(Attr::Bool(w == "true"));
                }
                if let Ok(i) = w.parse::<i64>() {
                    return Ok(Attr::Int(i));
                }
                if let Ok(f) = w.parse::<f64>() {
                    return Ok(Attr::Float(f));
                }
                if let Some(d) = DType::parse(&w) {
                    return Ok(Attr::DType(d));
                }
                self.err(format!("bad attribute value '{w}'"))
            }
        }
    }
    fn data(&mut self, ty: &TensorType) -> R<ConstData> {
        let Some(shape) = ty.shape.as_fixed() else { return self.err("constant with a symbolic shape") };
        let Some(numel) = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) else {
            return self.err(format!("constant of type {ty} has more elements than fit in memory"));
        };
        if self.peek() == Some(b'x') {
            self.i += 1;
            let h = self.string()?;
            if !h.is_ascii() {
                return self.err("bad hex");
            }
            if h.len() % 2 != 0 {
                return self.err("odd hex length");
            }
            let mut b = Vec::with_capacity(h.len() / 2);
            for k in (0..h.len()).step_by(2) {
                match u8::from_str_radix(&h[k..k + 2], 16) {
                    Ok(x) => b.push(x),
                    Err(_) => return self.err("bad hex"),
                }
            }
            return match ConstData::new(ty.dtype, shape, Blob::from_vec(b)) {
                Ok(c) => Ok(c),
                Err(e) => self.err(e),
            };
        }
        if ty.dtype.is_quantized_block() {
            return self.err(format!("a {} constant is written as hex bytes (x\"…\"), not as a list of values", ty.dtype));
        }
        self.expect(b'[')?;
        // Grown as values are read, never sized from the declared shape.
        let mut b = Vec::new();
        let mut n = 0usize;
        if !self.eat(b']') {
            loop {
                let w = self.word()?;
                if ty.dtype.is_float() {
                    match w.parse::<f64>() {
                        Ok(x) => encode_f64(ty.dtype, x, &mut b),
                        Err(_) => return self.err(format!("bad number '{w}'")),
                    }
                } else if ty.dtype == DType::U64 {
                    match w.parse::<u64>() {
                        Ok(x) => b.extend_from_slice(&x.to_le_bytes()),
                        Err(_) => return self.err(format!("bad integer '{w}'")),
                    }
                } else {
                    match w.parse::<i64>() {
                        Ok(x) => encode_i64(ty.dtype, x, &mut b),
                        Err(_) => return self.err(format!("bad integer '{w}'")),
                    }
                }
                n += 1;
                if self.eat(b']') {
                    break;
                }
                self.expect(b',')?;
            }
        }
        if n != numel {
            return self.err(format!("constant of type {ty} has {n} values, expected {numel}"));
        }
        Ok(ConstData { dtype: ty.dtype, shape, data: Blob::from_vec(b) })
    }
}

/// Parses the text form. Types written on node outputs are kept as written; run the verifier to check
/// them against inference.
pub fn parse<O: OpSet>(text: &str) -> Result<Graph<O>, ParseError> {
    let mut p = P { s: text.as_bytes(), i: 0 };
    let g = graph(&mut p, 0)?;
    if p.peek().is_some() {
        return p.err("trailing text after graph");
    }
    Ok(g)
}

/// Most region ops nested in one another that the parser reads (a bound on its recursion).
const MAX_NESTING: usize = 64;

/// One `graph { … }`, nested `depth` regions deep.
fn graph<O: OpSet>(p: &mut P, depth: usize) -> Result<Graph<O>, ParseError> {
    let mut g: Graph<O> = Graph::new();
    let mut ids: HashMap<usize, ValueId> = HashMap::new();
    let mut state: Option<u32> = None;
    p.keyword("graph")?;
    p.expect(b'{')?;
    loop {
        if p.eat(b'}') {
            break;
        }
        let save = p.i;
        let w = if p.peek() == Some(b'%') { String::new() } else { p.word()? };
        match w.as_str() {
            "in" | "const" => {
                let n = p.value_ref()?;
                let name = if p.peek() == Some(b'"') { Some(p.string()?) } else { None };
                p.expect(b':')?;
                let ty = p.ty()?;
                let id = if w == "in" {
                    let id = g.add_input(name.as_deref().unwrap_or(""), ty);
                    g.values[id.index()].name = name;
                    id
                } else {
                    p.expect(b'=')?;
                    let c = p.data(&ty)?;
                    g.add_const(name.as_deref(), c)
                };
                if ids.insert(n, id).is_some() {
                    return p.err(format!("value %{n} defined twice"));
                }
            }
            "out" => {
                loop {
                    let n = p.value_ref()?;
                    match ids.get(&n) {
                        Some(&v) => g.outputs.push(v),
                        None => return p.err(format!("output %{n} is not defined")),
                    }
                    if !p.eat(b',') {
                        break;
                    }
                }
            }
            "" => {
                p.i = save;
                let mut outs = Vec::new();
                loop {
                    let n = p.value_ref()?;
                    let name = if p.peek() == Some(b'"') { Some(p.string()?) } else { None };
                    outs.push((n, name));
                    if !p.eat(b',') {
                        break;
                    }
                }
                p.expect(b'=')?;
                let kind = p.word()?;
                p.expect(b'(')?;
                let mut ins = Vec::new();
                if !p.eat(b')') {
                    loop {
                        let n = p.value_ref()?;
                        match ids.get(&n) {
                            Some(&v) => ins.push(v),
                            None => return p.err(format!("%{n} is used before it is defined")),
                        }
                        if p.eat(b')') {
                            break;
                        }
                        p.expect(b',')?;
                    }
                }
                let mut attrs = Vec::new();
                if p.eat(b'{') && !p.eat(b'}') {
                    loop {
                        let k = p.word()?;
                        p.expect(b'=')?;
                        attrs.push((k, p.attr()?));
                        if p.eat(b'}') {
                            break;
                        }
                        p.expect(b',')?;
                    }
                }
                let mut op = match O::from_parts(&kind, &attrs) {
                    Ok(op) => op,
                    Err(e) => return p.err(e),
                };
                if p.eat(b'[') {
                    if depth == MAX_NESTING {
                        return p.err(format!("regions nested more than {MAX_NESTING} deep"));
                    }
                    let mut regions = Vec::new();
                    loop {
                        regions.push(graph(p, depth + 1)?);
                        if p.eat(b']') {
                            break;
                        }
                        p.expect(b',')?;
                    }
                    if let Err(e) = op.set_regions(regions) {
                        return p.err(e);
                    }
                } else if !op.regions().is_empty() {
                    return p.err(format!("{kind} needs its regions ('[graph {{ … }}, …]')"));
                }
                p.expect(b':')?;
                let mut tys = Vec::new();
                loop {
                    tys.push(p.ty()?);
                    if !p.eat(b',') {
                        break;
                    }
                }
                if tys.len() != outs.len() {
                    return p.err(format!("{} outputs but {} types", outs.len(), tys.len()));
                }
                p.expect(b'@')?;
                let nname = p.string()?;
                let vs = g.push_node(&nname, op, &ins, tys);
                for ((n, name), v) in outs.into_iter().zip(vs) {
                    g.values[v.index()].name = name;
                    if ids.insert(n, v).is_some() {
                        return p.err(format!("value %{n} defined twice"));
                    }
                }
            }
            "state" => {
                let w = p.word()?;
                let Ok(n) = w.parse::<u32>() else { return p.err(format!("expected a state count, found '{w}'")) };
                state = Some(n);
            }
            "bounded" => {
                let mut n = [0u32; 3];
                for (k, what) in ["an output index", "an axis", "a count output index"].iter().enumerate() {
                    let w = p.word()?;
                    let Ok(v) = w.parse::<u32>() else { return p.err(format!("bounded: expected {what}, found '{w}'")) };
                    n[k] = v;
                }
                g.bounded.push(crate::Bounded { output: n[0], axis: n[1], count: n[2] });
            }
            _ => return p.err(format!("expected 'in', 'const', 'out', 'state', 'bounded' or a node, found '{w}'")),
        }
    }
    if let Some(n) = state {
        let (ni, no) = (g.inputs.len() as u32, g.outputs.len() as u32);
        if n > ni || n > no {
            return p.err(format!("state {n}: the graph has {ni} inputs and {no} outputs"));
        }
        g.state = (0..n).map(|k| crate::State { input: ni - n + k, output: no - n + k }).collect();
    }
    Ok(g)
}
