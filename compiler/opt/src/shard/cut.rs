//! How a tensor-parallel value is cut over the ranks, and where a cut lands through a reshape.
//!
//! A `Cut` views `axis` as [outer, M]: the n ranks form n/rep consecutive groups of `rep`; group p
//! holds part p of M (M·rep/n values for every outer index). With `sub` the ranks of a group also
//! split the next axis `rep` ways between them (grouped-query attention's query heads [kv_heads, group,
//! …] when the key/value heads do not divide: each rank holds some query heads of one key/value head);
//! without it they hold the same part (the key/value heads those query heads read, replicated).

/// See the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Cut {
    pub axis: usize,
    pub outer: usize,
    pub rep: usize,
    pub sub: bool,
}

impl Cut {
    pub fn plain(axis: usize) -> Cut {
        Cut { axis, outer: 1, rep: 1, sub: false }
    }
    /// How many parts `axis` is cut into over `n` ranks.
    pub fn parts(&self, n: usize) -> usize {
        n / self.rep
    }
    /// Rank r's local extents of a value of global shape `full`.
    pub fn local(&self, full: &[usize], n: usize) -> Vec<usize> {
        let mut s = full.to_vec();
        s[self.axis] /= self.parts(n);
        if self.sub {
            s[self.axis + 1] /= self.rep;
        }
        s
    }
}

/// Where `c` (on a value of shape `from`) lands through a reshape to `to` over `n` ranks, when each
/// rank's part is a relabeling of its own elements. A `sub` cut is first read as a plain cut of its
/// two axes merged; a plain cut whose axis becomes [kv_heads, group] with kv_heads not dividing into n
/// ranks becomes a `sub` cut (each rank one key/value head's share of its group).
pub(super) fn through_reshape(from: &[usize], to: &[usize], c: Cut, n: usize) -> Option<Cut> {
    let (from, c) = if c.sub {
        let mut f = from.to_vec();
        f[c.axis] *= f.remove(c.axis + 1);
        (f, Cut { rep: 1, sub: false, ..c })
    } else {
        (from.to_vec(), c)
    };
    if let Some((t, o)) = reshape_split(&from, to, c.axis, c.outer, c.parts(n)) {
        return Some(Cut { axis: t, outer: o, ..c });
    }
    if c.rep != 1 || c.outer != 1 {
        return None;
    }
    for t in 0..to.len().saturating_sub(1) {
        let (kv, group) = (to[t], to[t + 1]);
        if kv == 0 || kv % n == 0 || n % kv != 0 || group % (n / kv) != 0 {
            continue;
        }
        let mut merged = to.to_vec();
        merged[t] *= merged.remove(t + 1);
        if reshape_split(&from, &merged, c.axis, 1, n) == Some((t, 1)) {
            return Some(Cut { axis: t, outer: 1, rep: n / kv, sub: true });
        }
    }
    None
}

/// Where a split of `from` along `axis` (outer `outer`, `n` parts) lands in `to`: (axis, outer), when
/// each part is a relabeling of its own elements.
pub(super) fn reshape_split(from: &[usize], to: &[usize], axis: usize, outer: usize, n: usize) -> Option<(usize, usize)> {
    let (mut i, mut j) = (0, 0);
    while i < from.len() || j < to.len() {
        let (si, sj) = (i, j);
        let (mut pa, mut pb) = (1usize, 1usize);
        if i < from.len() {
            pa *= from[i];
            i += 1;
        }
        if j < to.len() {
            pb *= to[j];
            j += 1;
        }
        while pa != pb {
            if pa < pb && i < from.len() {
                pa *= from[i];
                i += 1;
            } else if pb < pa && j < to.len() {
                pb *= to[j];
                j += 1;
            } else {
                return None;
            }
        }
        if !(si..i).contains(&axis) {
            continue;
        }
        let p_in: usize = from[si..axis].iter().product();
        let t_in: usize = from[axis + 1..i].iter().product();
        let a = p_in * outer;
        let m = from[axis] / outer;
        for t in sj..j {
            let p_out: usize = to[sj..t].iter().product();
            let t_out: usize = to[t + 1..j].iter().product();
            if p_out == 0 || a % p_out != 0 {
                continue;
            }
            let o = a / p_out;
            if o == 0 || to[t] % o != 0 {
                continue;
            }
            let mt = to[t] / o;
            if mt * t_out == m * t_in && ((m / n) * t_in) % t_out.max(1) == 0 && mt % n == 0 {
                return Some((t, o));
            }
        }
        return None;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{reshape_split, through_reshape, Cut};

    #[test]
    fn head_split_and_merge() {
        assert_eq!(reshape_split(&[2, 16, 384], &[2, 16, 12, 32], 2, 1, 2), Some((2, 1)));
        assert_eq!(reshape_split(&[2, 12, 16, 32], &[24, 16, 32], 1, 1, 2), Some((0, 2)));
        assert_eq!(reshape_split(&[24, 32, 16], &[2, 12, 32, 16], 0, 2, 2), Some((1, 1)));
        assert_eq!(reshape_split(&[2, 16, 12, 32], &[2, 16, 384], 2, 1, 2), Some((2, 1)));
        // 12 heads over 5 ranks: no whole heads per rank.
        assert_eq!(reshape_split(&[2, 16, 380], &[2, 16, 10, 38], 2, 1, 4), None);
    }

    #[test]
    fn query_heads_grouped_by_a_replicated_kv_head() {
        // 4 query heads, 2 key/value heads, 4 ranks: [rows, 4, 16] -> [rows, 2, 2, 16]: rank r holds
        // query head r, of key/value head r / 2.
        let c = through_reshape(&[8, 4, 16], &[8, 2, 2, 16], Cut::plain(1), 4).unwrap();
        assert_eq!(c, Cut { axis: 1, outer: 1, rep: 2, sub: true });
        assert_eq!(c.local(&[8, 2, 2, 16], 4), vec![8, 1, 1, 16]);
        // ... and merged back: a plain quarter of the 64 columns.
        let m = through_reshape(&[8, 2, 2, 16], &[8, 64], c, 4).unwrap();
        assert_eq!(m, Cut::plain(1));
        // With 2 ranks the key/value heads divide: a plain cut of the key/value axis.
        assert_eq!(through_reshape(&[8, 4, 16], &[8, 2, 2, 16], Cut::plain(1), 2), Some(Cut::plain(1)));
        // A replicated cut (2 parts over 4 ranks) keeps its replication through a reshape.
        let kv = Cut { axis: 1, outer: 1, rep: 2, sub: false };
        assert_eq!(through_reshape(&[8, 32], &[8, 2, 16], kv, 4), Some(Cut { axis: 1, ..kv }));
    }
}
