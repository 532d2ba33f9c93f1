//! What the receiver fleet and the load generator share of HTTP/1.1: a
//! message's framing read from its headers, and reading a connection until
//! a whole message (head and body) is in the buffer.

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Room asked for before each read.
const READ_CHUNK: usize = 8 * 1024;

/// How a message's body is framed, by its headers.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Framing {
    /// Its `content-length`, if it has one.
    pub body_len: Option<usize>,
    /// `connection: close`: the sender closes after this message.
    pub close: bool,
}

/// A framing neither side reads.
#[derive(Debug, PartialEq, Eq)]
pub enum Unframed {
    /// `transfer-encoding` (chunked): both sides send sized bodies only.
    Chunked,
    /// A `content-length` that is not a number.
    BadLength,
}

pub fn framing(headers: &[httparse::Header<'_>]) -> Result<Framing, Unframed> {
    let mut framing = Framing::default();
    for header in headers {
        if header.name.eq_ignore_ascii_case("content-length") {
            let length = std::str::from_utf8(header.value).ok().and_then(|v| v.trim().parse().ok());
            framing.body_len = Some(length.ok_or(Unframed::BadLength)?);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Unframed::Chunked);
        } else if header.name.eq_ignore_ascii_case("connection") {
            framing.close = header.value.eq_ignore_ascii_case(b"close");
        }
    }
    Ok(framing)
}

/// A parsed head: how many bytes its whole message takes, head included.
pub trait Head {
    fn message_len(&self) -> usize;
}

/// Why [`read_message`] returned without a message.
#[derive(Debug)]
pub enum Unread<E> {
    /// `parse` refused what arrived.
    Refused(E),
    /// The peer closed the connection first.
    Closed,
    /// Reading failed.
    Failed(std::io::Error),
}

/// Reads from `stream` into `buf` until `parse` finds a head (`None` while
/// it is incomplete) and the whole message it announces is in `buf`. The
/// head is parsed once, however many reads its body takes.
pub async fn read_message<H: Head, E>(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    parse: impl Fn(&[u8]) -> Result<Option<H>, E>,
) -> Result<H, Unread<E>> {
    let mut head = None;
    loop {
        if head.is_none() {
            head = parse(buf).map_err(Unread::Refused)?;
        }
        if let Some(parsed) = head.take_if(|h| buf.len() >= h.message_len()) {
            return Ok(parsed);
        }
        buf.reserve(READ_CHUNK);
        match stream.read_buf(buf).await {
            Ok(0) => return Err(Unread::Closed),
            Ok(_) => {}
            Err(e) => return Err(Unread::Failed(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framing_of(head: &[u8]) -> Result<Framing, Unframed> {
        let mut headers = [httparse::EMPTY_HEADER; 8];
        let mut request = httparse::Request::new(&mut headers);
        assert!(request.parse(head).expect("a request head").is_complete());
        framing(request.headers)
    }

    #[test]
    fn framing_is_read_from_length_encoding_and_connection_headers() {
        assert_eq!(
            framing_of(b"POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n"),
            Ok(Framing { body_len: Some(12), close: false })
        );
        assert_eq!(
            framing_of(b"POST / HTTP/1.1\r\nconnection: Close\r\n\r\n"),
            Ok(Framing { body_len: None, close: true })
        );
        assert_eq!(framing_of(b"POST / HTTP/1.1\r\ncontent-length: -1\r\n\r\n"), Err(Unframed::BadLength));
        assert_eq!(framing_of(b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"), Err(Unframed::Chunked));
    }
}
