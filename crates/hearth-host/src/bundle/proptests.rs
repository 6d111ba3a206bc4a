//! Property tests for the bundle reader, the first thing an upload meets:
//! any archive of safe paths reads back as its files (tar, gzipped tar or
//! zip alike), the canonical tar is a fixed point, a path that would
//! leave the bundle is refused wherever it sits, and no bytes at all make
//! it panic.

use std::collections::BTreeMap;
use std::io::Write;

use proptest::prelude::*;

use super::*;

/// Files under relative paths of one to three short components.
fn files() -> impl Strategy<Value = BTreeMap<String, Vec<u8>>> {
    let path = prop::collection::vec("[a-z0-9_.-]{1,4}", 1..4)
        .prop_filter("`.` and `..` are not names", |parts| {
            parts.iter().all(|p| p != "." && p != "..")
        })
        .prop_map(|parts| parts.join("/"));
    prop::collection::btree_map(path, prop::collection::vec(any::<u8>(), 0..200), 1..8)
        // A path that is also another's directory cannot be unpacked.
        .prop_filter("no file is another's directory", |files| {
            files
                .keys()
                .all(|a| !files.keys().any(|b| b.starts_with(&format!("{a}/"))))
        })
}

/// What the reader promises for `files`: the same files, with one top
/// directory stripped when every file is inside it.
fn expected(files: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    let first = files.keys().next().expect("at least one file");
    if let Some((top, _)) = first.split_once('/') {
        let prefix = format!("{top}/");
        if files.keys().all(|k| k.starts_with(&prefix)) {
            return files
                .iter()
                .map(|(k, v)| (k[prefix.len()..].to_string(), v.clone()))
                .collect();
        }
    }
    files.clone()
}

fn tar_of(files: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o600);
        h.set_cksum();
        b.append_data(&mut h, path, data.as_slice()).unwrap();
    }
    b.into_inner().unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

fn zip_of(files: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (path, data) in files {
        w.start_file(path.as_str(), zip::write::SimpleFileOptions::default())
            .unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

fn read(bytes: &[u8]) -> Result<BTreeMap<String, Vec<u8>>, String> {
    Bundle::from_upload(Runtime::Python, Some("upload"), bytes)
        .map(|b| b.files)
        .map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_archive_of_safe_paths_reads_back_as_its_files(files in files()) {
        let want = expected(&files);
        prop_assert_eq!(read(&tar_of(&files)).unwrap(), want.clone());
        prop_assert_eq!(read(&gzip(&tar_of(&files))).unwrap(), want.clone());
        prop_assert_eq!(read(&zip_of(&files)).unwrap(), want);
    }

    #[test]
    fn the_canonical_tar_is_a_fixed_point(files in files()) {
        let bundle = Bundle::from_tar(&tar_of(&files)).unwrap();
        let canonical = bundle.to_tar();
        let again = Bundle::from_tar(&canonical).unwrap();
        prop_assert_eq!(&again, &bundle);
        prop_assert_eq!(again.to_tar(), canonical);
    }

    #[test]
    fn a_path_that_leaves_the_bundle_is_refused_wherever_it_sits(
        files in files(),
        at in any::<prop::sample::Index>(),
        absolute in any::<bool>(),
    ) {
        let victim = at.get(&files.keys().collect::<Vec<_>>()).to_string();
        let evil = if absolute { format!("/{victim}") } else { format!("../{victim}") };
        // Into the header by hand: the tar crate's builder refuses these.
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in &files {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            let name = if *path == victim { &evil } else { path };
            prop_assume!(name.len() <= 100);
            h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_cksum();
            b.append(&h, data.as_slice()).unwrap();
        }
        let err = read(&b.into_inner().unwrap()).unwrap_err();
        prop_assert!(err.contains("relative"), "{}", err);

        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for (path, data) in &files {
            let name = if *path == victim { &evil } else { path };
            w.start_file(name.as_str(), zip::write::SimpleFileOptions::default()).unwrap();
            w.write_all(data).unwrap();
        }
        let err = read(&w.finish().unwrap().into_inner()).unwrap_err();
        prop_assert!(err.contains("relative"), "{}", err);
    }

    #[test]
    fn no_bytes_make_the_reader_panic(
        magic in prop_oneof![
            Just(Vec::new()),
            Just(vec![0x1f, 0x8b]),
            Just(b"PK\x03\x04".to_vec()),
            Just(b"PK\x05\x06".to_vec()),
        ],
        body in prop::collection::vec(any::<u8>(), 0..1200),
        ustar in any::<bool>(),
    ) {
        let mut bytes = magic;
        bytes.extend_from_slice(&body);
        if ustar && bytes.len() >= 262 {
            bytes[257..262].copy_from_slice(b"ustar");
        }
        let _ = read(&bytes);
    }

    #[test]
    fn a_damaged_archive_is_an_error_or_its_files_never_a_panic(
        files in files(),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        kind in 0..3,
    ) {
        let mut bytes = match kind {
            0 => tar_of(&files),
            1 => gzip(&tar_of(&files)),
            _ => zip_of(&files),
        };
        let i = at.index(bytes.len());
        bytes[i] ^= flip;
        if let Ok(read_back) = read(&bytes) {
            // Whatever it read, every path in it is a safe relative one.
            for path in read_back.keys() {
                prop_assert!(check_path(path).is_ok_and(|p| p == *path), "{}", path);
            }
        }
    }
}
