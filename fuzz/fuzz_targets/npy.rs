//! NumPy `.npy` files (`rlxc run` inputs, calibration data): `rlx_import::npy::parse`. An array that
//! parses must encode again and parse back to the same array.
//! libfuzzer: -max_len=4096
#![no_main]
use libfuzzer_sys::fuzz_target;
use rlx_import::npy;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = npy::parse(data) {
        let bytes = npy::encode(&c).expect("a parsed array encodes");
        assert_eq!(npy::parse(&bytes).as_ref(), Ok(&c), "encode(parse(x)) does not parse back");
    }
});
