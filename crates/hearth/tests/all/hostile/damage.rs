//! Files the daemon wrote and later trusts, damaged on disk (a bad block,
//! a full disk mid-write elsewhere, someone with access to the data
//! directory): a compiled module is native code mapped executable, so a
//! flipped byte there used to crash the daemon at every later call.

use crate::harness::Daemon;

/// Every compiled-module cache file under `dir`.
fn cache_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "cwasm") {
                found.push(path);
            }
        }
    }
    found
}

/// Where the machine code is in a cache file: the ELF object after the
/// seal (8 bytes of format, 32 of hash), its `.text` section.
fn text_section(file: &[u8]) -> (usize, usize) {
    let base = file
        .windows(4)
        .position(|w| w == b"\x7fELF")
        .expect("an ELF object in the file");
    let elf = &file[base..];
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let names = u64_at(header(shstrndx) + 0x18);
    (0..shnum)
        .find_map(|i| {
            let h = header(i);
            let name = &elf[names + u32_at(h)..];
            name.starts_with(b".text\0")
                .then(|| (base + u64_at(h + 0x18), u64_at(h + 0x20)))
        })
        .expect("a .text section")
}

#[tokio::test]
async fn a_damaged_compiled_module_is_compiled_again_never_run() {
    // Without the bundled examples, hello's is the only compiled module.
    let mut d = Daemon::start_with(&["--examples", "false"]);
    d.deploy("hello", crate::harness::example("hello.wat"), &[])
        .await;
    let (status, first) = d.call("hello", "", "").await;
    assert_eq!(status, 200, "{first}");
    let files = cache_files(&d.dir);
    assert_eq!(files.len(), 1, "{files:?}");
    let mut whole = Vec::new();
    for path in &files {
        let mut bytes = std::fs::read(path).unwrap();
        whole.push(bytes.clone());
        // Its machine code becomes breakpoints (int3): run, it kills the
        // process with SIGTRAP.
        let (at, len) = text_section(&bytes);
        bytes[at..at + len].fill(0xcc);
        std::fs::write(path, bytes).unwrap();
    }
    // Restarted, the node prepares hello from its cache file again.
    d.kill9();
    let again = Daemon::start_in(&d.dir, &["--examples", "false"]);
    for _ in 0..3 {
        assert_eq!(again.call("hello", "", "").await, (200, first.clone()));
    }
    // The damaged file was replaced by a whole one.
    for (path, whole) in files.iter().zip(whole) {
        let bytes = std::fs::read(path).unwrap();
        assert!(bytes.starts_with(b"HRTHCW01"), "{}", path.display());
        assert_eq!(bytes.len(), whole.len(), "{}", path.display());
    }
}

/// The newest tape segment file under `dir`.
fn newest_segment(dir: &std::path::Path) -> std::path::PathBuf {
    let segments = dir.join("recordings").join("segments");
    std::fs::read_dir(&segments)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .unwrap_or_else(|| panic!("no segment in {}", segments.display()))
}

/// A damaged block of tapes costs only its own tapes: the listings that
/// pass over it, the other tapes and the status still answer (before, every
/// listing that touched it was a 500, also after a restart), and reading
/// one of its tapes says it was lost.
#[tokio::test]
async fn a_damaged_tape_block_costs_only_its_own_tapes() {
    let mut d = Daemon::start();
    assert_eq!(d.invoke_body("echo", "first".into()).await, "first");
    let first = d.newest_tape("echo", 1).await;
    let segment = newest_segment(&d.dir);
    let written = std::fs::metadata(&segment).unwrap().len();
    assert_eq!(d.invoke_body("echo", "second".into()).await, "second");
    let second = d.newest_tape("echo", 2).await;
    assert_ne!(first, second);

    // A byte of the first block (it ends where the file ended then) flips.
    let mut bytes = std::fs::read(&segment).unwrap();
    assert!(bytes.len() as u64 > written || newest_segment(&d.dir) != segment);
    bytes[written as usize - 10] ^= 0x40;
    std::fs::write(&segment, bytes).unwrap();
    d.kill9();
    let d = Daemon::start_in(&d.dir, &[]);

    let listing = d.get("/v1/functions/echo/recordings").send().await.unwrap();
    assert_eq!(listing.status(), 200, "{}", listing.text().await.unwrap());
    let listing: serde_json::Value = listing.json().await.unwrap();
    let ids: Vec<&str> = listing["recordings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [second.as_str()], "{listing}");
    let resp = d
        .get(&format!("/v1/recordings/{second}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (status, _, msg) = crate::harness::error_of(
        d.get(&format!("/v1/recordings/{first}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404, "{msg}");
    assert!(msg.contains("damaged"), "{msg}");
    let status = d.get_json("/v1/status").await;
    assert_eq!(status["recording"]["damaged_blocks"], 1, "{status}");
    // New tapes are written and listed beside the lost one.
    assert_eq!(d.invoke_body("echo", "third".into()).await, "third");
    d.newest_tape("echo", 2).await;
}
