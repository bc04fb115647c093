//! Inputs of the `vulkan_schedule` fuzz target (`fuzz/fuzz_targets/vulkan_schedule.rs`), checked in
//! under `tests/fuzz-regressions/vulkan_schedule/`: the schedule parser returns a schedule or a
//! "malformed schedule" error for each, never a panic or an arithmetic overflow. Needs the `std`
//! feature (on in the workspace through rlxc's `vulkan`; alone: `cargo test -p rlx-rt --features std`).
#![cfg(feature = "std")]

use rlx_rt::schedule::{Barriers, BaseKind, Schedule};
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fuzz-regressions/vulkan_schedule")
}

#[test]
fn every_checked_in_schedule_parses_or_errs_without_panic() {
    for e in std::fs::read_dir(dir()).unwrap() {
        let b = std::fs::read(e.unwrap().path()).unwrap();
        match Schedule::parse(&b) {
            Ok(s) => {
                for how in [Barriers::Levels, Barriers::InOrder, Barriers::All] {
                    assert_eq!(s.levels(how).iter().map(Vec::len).sum::<usize>(), s.dispatches.len());
                }
            }
            Err(e) => assert!(e.0.contains("schedule"), "{e}"),
        }
    }
}

#[test]
fn a_buffer_of_nearly_2_64_bytes_does_not_overflow_the_range_check() {
    // Arena size u64::MAX: widening it to whole words (div_ceil(4) * 4) overflowed.
    let s = Schedule::parse(&std::fs::read(dir().join("buffer-size-near-2-64.bin")).unwrap()).expect("a well-formed schedule");
    assert_eq!(s.bases[0], (BaseKind::Arena, u64::MAX));
    assert_eq!(s.dispatches.len(), 4);
    assert_eq!(s.dispatches[3].ranges[2].end, 214_748_365_116);
    assert_eq!(s.levels(Barriers::All).len(), 4);
}

#[test]
fn a_block_size_whose_product_overflows_is_a_malformed_schedule() {
    // Version 3: the product of three u32 block sizes overflowed u64 before the 1024-thread check.
    let e = Schedule::parse(&std::fs::read(dir().join("block-size-product-overflow.bin")).unwrap()).unwrap_err();
    assert!(e.0.starts_with("malformed schedule: dispatch ") && e.0.contains("threads (1 to 1024 in all)"), "{e}");
}

#[test]
fn a_version_4_collective_parses_and_a_count_near_2_64_is_malformed() {
    let s = Schedule::parse(&std::fs::read(dir().join("collective-all-reduce.bin")).unwrap()).expect("a well-formed schedule");
    let c = s.dispatches[0].comm.expect("a collective");
    assert_eq!((c.op, c.dtype, c.count, c.ranks, c.peer), (rlx_rt::comm::ALL_REDUCE, rlx_rt::DType::F32, 4, 1, -1));
    assert_eq!(c.bytes(), Some((16, 16)));
    assert_eq!(s.collectives(), 1);
    // count × 4 bytes × ranks overflows u64: an error naming the dispatch, not an overflow.
    let e = Schedule::parse(&std::fs::read(dir().join("collective-count-overflow.bin")).unwrap()).unwrap_err();
    assert!(e.0.starts_with("malformed schedule: dispatch 0: collective"), "{e}");
}
