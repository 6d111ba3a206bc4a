//! Byte strings in serde, for `#[serde(with = …)]`: raw bytes in binary
//! formats and base64 in human-readable ones.
//!
//! In postcard (tape blocks, the retry journal) a byte string is a length
//! then the bytes, exactly what a `Vec<u8>` as a sequence of `u8` is, so
//! blocks written before these modules existed read the same. In JSON (an
//! exported tape) a byte string is a base64 string, a third larger than the
//! bytes, where serde's default is an array of numbers (up to four
//! characters a byte). Reading JSON also takes the array, as tapes exported
//! before were written.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// One byte string: `Vec<u8>` or `bytes::Bytes`.
pub fn serialize<S: Serializer>(bytes: impl AsRef<[u8]>, s: S) -> Result<S::Ok, S::Error> {
    let bytes = bytes.as_ref();
    if s.is_human_readable() {
        s.serialize_str(&STANDARD.encode(bytes))
    } else {
        s.serialize_bytes(bytes)
    }
}

pub fn deserialize<'de, D: Deserializer<'de>, T: From<Vec<u8>>>(d: D) -> Result<T, D::Error> {
    Ok(Owned::deserialize(d)?.0.into())
}

/// A byte string as a value of its own, for the modules below.
struct Owned(Vec<u8>);

impl Serialize for Borrowed<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize(self.0, s)
    }
}

struct Borrowed<'a>(&'a [u8]);

impl<'de> Deserialize<'de> for Owned {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Owned, D::Error> {
        if d.is_human_readable() {
            d.deserialize_any(ByteVisitor).map(Owned)
        } else {
            d.deserialize_byte_buf(ByteVisitor).map(Owned)
        }
    }
}

struct ByteVisitor;

impl<'de> Visitor<'de> for ByteVisitor {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("bytes: a base64 string or an array of numbers 0..=255")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Vec<u8>, E> {
        STANDARD
            .decode(text)
            .map_err(|e| E::custom(format!("not base64: {e}")))
    }

    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Vec<u8>, E> {
        Ok(bytes.to_vec())
    }

    fn visit_byte_buf<E: de::Error>(self, bytes: Vec<u8>) -> Result<Vec<u8>, E> {
        Ok(bytes)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        // The hint comes from the input: trust it only so far.
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(b) = seq.next_element::<u8>()? {
            out.push(b);
        }
        Ok(out)
    }
}

/// `Option<Vec<u8>>`.
pub mod option {
    use super::*;

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        bytes.as_deref().map(Borrowed).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Ok(Option::<Owned>::deserialize(d)?.map(|b| b.0))
    }
}

/// `Vec<Vec<u8>>`.
pub mod list {
    use super::*;

    pub fn serialize<S: Serializer>(list: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(list.iter().map(|b| Borrowed(b)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        Ok(Vec::<Owned>::deserialize(d)?
            .into_iter()
            .map(|b| b.0)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Plain {
        a: Vec<u8>,
        b: Option<Vec<u8>>,
        c: Vec<Vec<u8>>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Marked {
        #[serde(with = "super")]
        a: Vec<u8>,
        #[serde(with = "super::option")]
        b: Option<Vec<u8>>,
        #[serde(with = "super::list")]
        c: Vec<Vec<u8>>,
    }

    fn both(a: &[u8], b: Option<&[u8]>, c: &[&[u8]]) -> (Plain, Marked) {
        let plain = Plain {
            a: a.to_vec(),
            b: b.map(<[u8]>::to_vec),
            c: c.iter().map(|x| x.to_vec()).collect(),
        };
        let marked = Marked {
            a: plain.a.clone(),
            b: plain.b.clone(),
            c: plain.c.clone(),
        };
        (plain, marked)
    }

    #[test]
    fn json_is_base64_and_still_reads_arrays() {
        let (plain, marked) = both(b"\x00\xffhi", Some(b"x"), &[b"", b"ab"]);
        let json = serde_json::to_string(&marked).unwrap();
        assert_eq!(json, r#"{"a":"AP9oaQ==","b":"eA==","c":["","YWI="]}"#);
        assert_eq!(serde_json::from_str::<Marked>(&json).unwrap(), marked);
        let old = serde_json::to_string(&plain).unwrap();
        assert_eq!(serde_json::from_str::<Marked>(&old).unwrap(), marked);
        let none = r#"{"a":[],"b":null,"c":[]}"#;
        assert_eq!(serde_json::from_str::<Marked>(none).unwrap().b, None);
        let err = serde_json::from_str::<Marked>(r#"{"a":"!!","b":null,"c":[]}"#);
        assert!(err.unwrap_err().to_string().contains("not base64"));
        let err = serde_json::from_str::<Marked>(r#"{"a":[256],"b":null,"c":[]}"#);
        assert!(err.is_err(), "a number past a byte is refused");
    }

    #[test]
    fn postcard_bytes_are_a_vecs_bytes() {
        let (plain, marked) = both(&[1, 2, 200], None, &[b"k1", b""]);
        let old = postcard::to_allocvec(&plain).unwrap();
        assert_eq!(postcard::to_allocvec(&marked).unwrap(), old);
        assert_eq!(postcard::from_bytes::<Marked>(&old).unwrap(), marked);
        let (plain, marked) = both(&[], Some(&[9; 300]), &[]);
        let old = postcard::to_allocvec(&plain).unwrap();
        assert_eq!(postcard::to_allocvec(&marked).unwrap(), old);
        assert_eq!(postcard::from_bytes::<Marked>(&old).unwrap(), marked);
    }
}
