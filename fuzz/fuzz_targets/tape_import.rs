//! A tape file posted to `/v1/replay` (`hearth replay --file`): refused
//! or read, never a panic, within the limits it was given; one that is
//! read exports to a file that imports to the same tape.
#![no_main]

use hearth_record::{ImportLimits, Recording};
use libfuzzer_sys::fuzz_target;

const LIMITS: ImportLimits = ImportLimits {
    max_bytes: 1 << 20,
    max_events: 4096,
};

fuzz_target!(|data: &[u8]| {
    let Ok(tape) = Recording::import(data, LIMITS) else {
        return;
    };
    assert!(tape.tape.events.len() <= LIMITS.max_events);
    let again = Recording::import(&tape.export(), LIMITS).expect("an exported tape imports");
    assert_eq!(again, tape, "export and import changed the tape");
});
