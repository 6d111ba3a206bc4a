//! Frames between the node and its helpers (zygotes, handlers, Node.js).
//!
//! A frame is a u32 header length and a u32 body length (big endian), a
//! JSON header, then the body's raw bytes, so payloads never go through
//! JSON escaping. The same framing is implemented in `helper/helper.py`
//! and `helper/helper.mjs`.

use std::io;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest JSON header accepted from a helper.
const MAX_HEADER: usize = 1 << 20;

#[derive(Debug)]
pub struct Frame {
    pub header: Value,
    pub body: Vec<u8>,
}

impl Frame {
    /// The header's `key` as a string, or "".
    pub fn str(&self, key: &str) -> &str {
        self.header.get(key).and_then(Value::as_str).unwrap_or("")
    }

    /// The header's `key` as `[[name, value], ...]` pairs (HTTP headers);
    /// malformed entries are skipped.
    pub fn pairs(&self, key: &str) -> Vec<(String, String)> {
        let Some(list) = self.header.get(key).and_then(Value::as_array) else {
            return Vec::new();
        };
        list.iter()
            .filter_map(|h| match h.as_array()?.as_slice() {
                [k, v] => Some((k.as_str()?.to_string(), v.as_str()?.to_string())),
                _ => None,
            })
            .collect()
    }
}

/// Reads one frame; a body over `max_body` is an error (the sandbox is
/// then treated as misbehaving).
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max_body: usize) -> io::Result<Frame> {
    let mut head = [0u8; 8];
    r.read_exact(&mut head).await?;
    let [h0, h1, h2, h3, b0, b1, b2, b3] = head;
    let hlen = u32::from_be_bytes([h0, h1, h2, h3]) as usize;
    let blen = u32::from_be_bytes([b0, b1, b2, b3]) as usize;
    if hlen > MAX_HEADER {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "frame header too large",
        ));
    }
    if blen > max_body {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame body of {blen} bytes is over the limit of {max_body}"),
        ));
    }
    let mut h = vec![0u8; hlen];
    r.read_exact(&mut h).await?;
    let header = if hlen == 0 {
        Value::Null
    } else {
        serde_json::from_slice(&h).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
    };
    let mut body = vec![0u8; blen];
    r.read_exact(&mut body).await?;
    Ok(Frame { header, body })
}

pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    header: &Value,
    body: &[u8],
) -> io::Result<()> {
    let h = serde_json::to_vec(header)?;
    let mut buf = Vec::with_capacity(8 + h.len() + body.len());
    buf.extend_from_slice(&(h.len() as u32).to_be_bytes());
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(&h);
    buf.extend_from_slice(body);
    w.write_all(&buf).await?;
    w.flush().await
}

/// Sends the descriptor `fd` over `stream`, as the ancillary data of one
/// byte (`F`), after a frame that says one follows (`"fds": 1`): the
/// helper reads that byte with `socket.recv_fds`.
pub async fn send_fd(
    stream: &tokio::net::UnixStream,
    fd: std::os::fd::BorrowedFd<'_>,
) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    use std::mem::MaybeUninit;
    loop {
        stream.writable().await?;
        let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
            let fds = [fd];
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            control.push(SendAncillaryMessage::ScmRights(&fds));
            sendmsg(
                stream,
                &[io::IoSlice::new(b"F")],
                &mut control,
                SendFlags::empty(),
            )
            .map_err(io::Error::from)
        });
        match sent {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_oversized_bodies_are_refused() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_frame(&mut a, &serde_json::json!({"op": "x"}), b"\x00\xffbody")
            .await
            .unwrap();
        let f = read_frame(&mut b, 100).await.unwrap();
        assert_eq!(f.str("op"), "x");
        assert_eq!(f.body, b"\x00\xffbody");
        let h = Frame {
            header: serde_json::json!({"h": [["a", "1"], ["bad"], ["b", "2"]]}),
            body: Vec::new(),
        };
        assert_eq!(
            h.pairs("h"),
            [("a".into(), "1".into()), ("b".into(), "2".into())]
        );
        assert!(h.pairs("missing").is_empty());
        write_frame(&mut a, &serde_json::json!({}), &[0u8; 200])
            .await
            .unwrap();
        let err = read_frame(&mut b, 100).await.unwrap_err();
        assert!(err.to_string().contains("over the limit"), "{err}");
    }
}
