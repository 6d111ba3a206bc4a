//! A deploy's upload (tar, tar.gz, zip or one source file) as the bundle
//! reader takes it: no input panics, every path it keeps is a plain
//! relative one, and a bundle read back from its canonical tar is itself.
#![no_main]

use hearth_core::Runtime;
use hearth_host::bundle::Bundle;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, upload)) = data.split_first() else {
        return;
    };
    let runtime = if which & 1 == 0 {
        Runtime::Python
    } else {
        Runtime::Node
    };
    let Ok(bundle) = Bundle::from_upload(runtime, None, upload) else {
        return;
    };
    for path in bundle.paths() {
        assert!(
            !path.starts_with('/') && !path.split('/').any(|p| p == ".." || p.is_empty()),
            "kept an unsafe path: {path:?}"
        );
    }
    let _ = bundle.requirements(runtime);
    let _ = bundle.lock(runtime);
    let again = Bundle::from_tar(&bundle.to_tar()).expect("a canonical tar reads back");
    assert!(
        again.paths().eq(bundle.paths()) && bundle.paths().all(|p| again.file(p) == bundle.file(p)),
        "the canonical tar changed the bundle"
    );
});
