//! What a wasm guest writes to stdout, read as a CGI response: no output
//! panics, the status is a valid one, the body is what follows the head,
//! and `Content-Length` never passes through (the daemon frames bodies).
#![no_main]

use bytes::Bytes;
use hearth_wasm::parse_cgi_output;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|out: &[u8]| {
    let r = parse_cgi_output(Bytes::copy_from_slice(out));
    assert!((100..=999).contains(&r.status), "status {}", r.status);
    assert!(out.ends_with(&r.body), "the body is what follows the head");
    assert!(
        r.headers
            .iter()
            .all(|(k, _)| !k.eq_ignore_ascii_case("content-length")),
        "Content-Length passed through"
    );
});
