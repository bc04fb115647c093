//! Which of a kernel's parameters may share bytes, told to LLVM as alias scopes. Every parameter is
//! a buffer at a byte offset of one base (the arena, the weights, a port), so LLVM sees one pointer
//! and indices it cannot compare: a store to one buffer may, for all it knows, change any value of
//! another, and it reloads them after every store. A LayerNorm row's output pass (MiniLM: an f32
//! value and its bf16 copy stored per element) then reloaded 8 of its row's 12 values per lane, one
//! memory latency each, that the passes before it already held in registers.
//!
//! The LIR's buffers say which parameters can overlap: those of one base whose byte ranges meet (one
//! buffer bound twice, a value updated in place) form one group. Each group of a kernel with more than
//! one gets a scope (`!alias.scope`) and every access through a parameter of that group is marked as
//! touching none of the other groups' scopes (`!noalias`) — only the loads and stores the loop form's
//! writer (`ir.rs`) emits; the cooperative kernels' own staging loads carry no marks, so LLVM assumes
//! nothing of them.

use std::fmt::Write;

/// The metadata suffix of each parameter's accesses (`, !alias.scope !A, !noalias !N`, or empty where
/// the kernel has one group) for parameters at `(base, start, end)` byte ranges; the metadata nodes are
/// appended to `md`, numbered from `*next` on.
pub fn scopes(li: usize, ranges: &[(usize, u64, u64)], next: &mut usize, md: &mut String) -> Vec<String> {
    let n = ranges.len();
    // Groups: parameters joined where their ranges of one base meet (transitively).
    let mut group: Vec<usize> = (0..n).collect();
    for i in 0..n {
        for j in 0..i {
            let ((bi, si, ei), (bj, sj, ej)) = (ranges[i], ranges[j]);
            if bi == bj && si < ej && sj < ei {
                let (gi, gj) = (group[i], group[j]);
                for g in group.iter_mut() {
                    if *g == gi {
                        *g = gj;
                    }
                }
            }
        }
    }
    let mut ids: Vec<usize> = group.clone();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() < 2 {
        return vec![String::new(); n];
    }
    let domain = *next;
    let _ = writeln!(md, "!{domain} = distinct !{{!{domain}, !\"k{li}\"}}");
    let scope: Vec<usize> = (0..ids.len()).map(|i| domain + 1 + i).collect();
    for (i, s) in scope.iter().enumerate() {
        let _ = writeln!(md, "!{s} = distinct !{{!{s}, !{domain}, !\"k{li}.g{i}\"}}");
    }
    // Per group: the list of its own scope, then the list of every other group's.
    let lists = domain + 1 + ids.len();
    for (i, s) in scope.iter().enumerate() {
        let others: Vec<String> = scope.iter().filter(|o| *o != s).map(|o| format!("!{o}")).collect();
        let _ = writeln!(md, "!{} = !{{!{s}}}\n!{} = !{{{}}}", lists + 2 * i, lists + 2 * i + 1, others.join(", "));
    }
    *next = lists + 2 * ids.len();
    group
        .iter()
        .map(|g| {
            let i = ids.binary_search(g).expect("a group's id");
            format!(", !alias.scope !{}, !noalias !{}", lists + 2 * i, lists + 2 * i + 1)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::scopes;

    #[test]
    fn overlapping_ranges_of_one_base_share_a_scope_and_others_exclude_it() {
        let (mut next, mut md) = (10, String::new());
        // p0 and p2 overlap in base 0; p1 is apart in base 0; p3 has the same bytes but another base.
        let s = scopes(3, &[(0, 0, 64), (0, 64, 128), (0, 32, 48), (1, 0, 64)], &mut next, &mut md);
        assert_eq!(s[0], s[2]);
        assert_ne!(s[0], s[1]);
        assert_ne!(s[0], s[3]);
        assert_ne!(s[1], s[3]);
        // Three groups: a domain, three scopes, two lists each.
        assert_eq!(next, 10 + 1 + 3 + 6);
        assert_eq!(md.lines().count(), 1 + 3 + 6);
        assert!(s[1].starts_with(", !alias.scope !"));
    }

    #[test]
    fn one_group_needs_no_marks() {
        let (mut next, mut md) = (5, String::new());
        let s = scopes(0, &[(0, 0, 64), (0, 60, 100)], &mut next, &mut md);
        assert!(s.iter().all(|x| x.is_empty()));
        assert_eq!((next, md.len()), (5, 0));
    }
}
