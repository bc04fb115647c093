//! The shader artifacts' schedule (`NAME.schedule.bin`): `rlx_rt::schedule::Schedule::parse` (the
//! parser the Vulkan executor uses, built here without ash), then `levels` in all three barrier
//! modes, which must place every dispatch exactly once.
//! libfuzzer: -max_len=4096
#![no_main]
use libfuzzer_sys::fuzz_target;
use rlx_rt::schedule::{Barriers, Schedule};

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = Schedule::parse(data) {
        for how in [Barriers::Levels, Barriers::InOrder, Barriers::All] {
            let mut seen = vec![false; s.dispatches.len()];
            for level in s.levels(how) {
                for d in level {
                    assert!(!std::mem::replace(&mut seen[d], true), "dispatch {d} placed twice");
                }
            }
            assert!(seen.iter().all(|&x| x), "a dispatch was not placed");
        }
    }
});
