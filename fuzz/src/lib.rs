//! Checks shared by more than one fuzz target (the targets themselves are `fuzz_targets/*.rs`).

pub mod ir_text {
    use rlx_ir::{text, OpSet};

    /// Parses `text`; when it parses, runs the verifier (it must not panic on any parsed graph) and
    /// checks the text form's promise: the printed graph parses, and prints the same text again.
    pub fn check<O: OpSet>(text: &str) {
        let Ok(g) = text::parse::<O>(text) else { return };
        let _ = rlx_ir::verify::verify(&g);
        let printed = text::print(&g);
        let again = match text::parse::<O>(&printed) {
            Ok(g2) => g2,
            Err(e) => panic!("printed text does not parse ({e}):\n{printed}"),
        };
        assert_eq!(text::print(&again), printed, "print(parse(print(g))) != print(g)");
    }
}
