//! What a bundle asks for and locks: `requirements.txt`, `package.json`
//! and the lock file, as a deploy parses them. No input panics, and a lock
//! that parses writes back to one that parses to the same packages.
#![no_main]

use hearth_core::Runtime;
use hearth_host::deps::{Lock, parse_package_json, parse_requirements};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, input)) = data.split_first() else {
        return;
    };
    match which % 3 {
        0 => {
            let _ = parse_requirements(&String::from_utf8_lossy(input));
        }
        1 => {
            if let Ok(pkg) = serde_json::from_slice::<serde_json::Value>(input) {
                let _ = parse_package_json(&pkg);
            }
        }
        _ => {
            let runtime = if which & 4 == 0 {
                Runtime::Python
            } else {
                Runtime::Node
            };
            if let Ok(lock) = Lock::parse(runtime, input) {
                let again = Lock::parse(runtime, &lock.to_json()).expect("a lock it wrote parses");
                assert_eq!(again, lock, "a lock changed when written and read");
            }
        }
    }
});
