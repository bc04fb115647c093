//! runtime-min's checks of caller inputs, with arbitrary specs, lengths, pointers and alignments:
//! `check_input`, `check_output`, `check_weights`, `check_arena`, `arena_ptr`, `check_aligned`.
//! None may panic or overflow; each must agree with the rule written out here in u128 arithmetic.
//! libfuzzer: -max_len=512
#![no_main]
use libfuzzer_sys::{arbitrary, fuzz_target};
use rlx_rt::{arena_ptr, check_aligned, check_arena, check_input, check_output, check_weights, DType, Error, TensorSpec, ARENA_ALIGN};

#[derive(Debug, arbitrary::Arbitrary)]
struct Call {
    dtype: u8,
    shape: Vec<usize>,
    index: usize,
    len: usize,
    expected: usize,
    ptr: usize,
    need: usize,
    align: usize,
    arena: Vec<u8>,
    skip: u8,
}

/// The spec's byte size: values × bytes per block, partial blocks whole, saturating at usize::MAX.
fn spec_bytes(dtype: DType, shape: &[usize]) -> usize {
    let (per, bytes) = dtype.block();
    let mut elems: u128 = 1;
    for &d in shape {
        elems = (elems * d as u128).min(usize::MAX as u128);
    }
    let b = elems.div_ceil(per as u128) * bytes as u128;
    b.min(usize::MAX as u128) as usize
}

fuzz_target!(|c: Call| {
    let Some(dtype) = DType::from_code(c.dtype) else { return };
    // SAFETY: `TensorSpec` holds `&'static` slices (its specs live in generated code); this one
    // never outlives `c`, which the closure owns until it returns.
    let shape: &'static [usize] = unsafe { std::mem::transmute::<&[usize], &'static [usize]>(c.shape.as_slice()) };
    let spec = TensorSpec { name: "x", dtype, shape };
    let want = spec_bytes(dtype, shape);
    assert_eq!(spec.bytes(), want, "{spec:?}");

    let r = check_input(c.index, &spec, c.len);
    assert_eq!(r, if c.len == want { Ok(()) } else { Err(Error::InputLength { index: c.index, expected: want, got: c.len }) });
    let r = check_output(c.index, &spec, c.len);
    assert_eq!(r, if c.len == want { Ok(()) } else { Err(Error::OutputLength { index: c.index, expected: want, got: c.len }) });
    let r = check_weights(c.expected, c.len);
    assert_eq!(r, if c.len == c.expected { Ok(()) } else { Err(Error::WeightsLength { expected: c.expected, got: c.len }) });

    // Pointers are only compared and never read, so any address is a fair input.
    let ptr = c.ptr as *const u8;
    let r = check_arena(ptr, c.len, c.need);
    let rule = if c.ptr == 0 {
        Err(Error::NullArena)
    } else if c.len < c.need {
        Err(Error::ArenaTooSmall { need: c.need, got: c.len })
    } else if c.ptr % ARENA_ALIGN != 0 {
        Err(Error::MisalignedArena)
    } else {
        Ok(())
    };
    assert_eq!(r, rule);
    let r = check_aligned(ptr, c.align);
    assert_eq!(r.is_ok(), c.align <= 1 || c.ptr % c.align == 0);

    let mut arena = c.arena;
    let skip = (c.skip as usize).min(arena.len());
    let slice = &mut arena[skip..];
    let (base, len) = (slice.as_ptr() as usize, slice.len());
    let need = c.need % (len + 2);
    match arena_ptr(slice, need) {
        Ok(p) => {
            let p = p as usize;
            assert!(p != 0 && p % ARENA_ALIGN == 0);
            assert!(need == 0 || (p == base && len >= need));
        }
        Err(e) => {
            assert!(need > 0);
            assert!(matches!(e, Error::ArenaTooSmall { .. } | Error::MisalignedArena | Error::NullArena), "{e:?}");
        }
    }
});
