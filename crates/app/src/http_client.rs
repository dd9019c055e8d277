//! A small blocking HTTP/1.1 client over `std::net`, for the Agones SDK sidecar and a game
//! backend's calls to a fleet's allocator: one request per connection, plain HTTP, bodies in
//! full (`Content-Length`, chunked, or until the server closes) or as a stream of lines
//! (`/watch/gameserver`'s newline-separated JSON).
//!
//! Every read and write has a timeout and every size a limit ([`HEAD_MAX`], [`BODY_MAX`],
//! [`LINE_MAX`]): a server that stalls, answers garbage or never stops is an [`HttpError`],
//! never a hang, a panic or unbounded memory. No TLS: the sidecar listens on localhost, and a
//! cluster's allocator is reached through `kubectl proxy` or a TLS-terminating sidecar.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The longest response head taken (status line and headers).
pub const HEAD_MAX: usize = 16 * 1024;
/// The longest response body taken whole.
pub const BODY_MAX: usize = 4 * 1024 * 1024;
/// The longest line of a streamed body.
pub const LINE_MAX: usize = 1024 * 1024;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// Nothing listens there, or the connection could not be made in time.
    #[error("connecting to {address}: {source}")]
    Connect {
        /// Where.
        address: String,
        /// The OS's reason.
        source: std::io::Error,
    },
    /// The connection broke or timed out mid-exchange.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The answer is not HTTP/1.x as this client reads it.
    #[error("not an HTTP answer: {0}")]
    Malformed(&'static str),
    /// A head, body or line longer than its limit.
    #[error("{0} longer than its limit")]
    TooLarge(&'static str),
    /// A URL this client cannot use (not `http://host:port/path`).
    #[error("URL {0:?}: use http://host:port/path")]
    BadUrl(String),
}

/// A response read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// Whether the status is 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Where a request goes: `host:port` and the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `host:port`.
    pub authority: String,
    /// The path and query, starting with `/`.
    pub path: String,
}

impl Url {
    /// `http://host[:port]/path` (port 80 when absent).
    pub fn parse(url: &str) -> Result<Self, HttpError> {
        let bad = || HttpError::BadUrl(url.to_string());
        let rest = url.strip_prefix("http://").ok_or_else(bad)?;
        let (authority, path) = match rest.find('/') {
            Some(k) => (&rest[..k], &rest[k..]),
            None => (rest, "/"),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(bad());
        }
        let authority = if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        Ok(Self { authority, path: path.to_string() })
    }
}

/// One request: `method path` to `authority` (`host:port`) with a JSON `body` (empty: none),
/// every read and write within `timeout`; the response read whole.
pub fn request(
    authority: &str,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<Response, HttpError> {
    let (status, mut reader) = send(authority, method, path, body, timeout)?;
    let body = reader.read_all()?;
    Ok(Response { status, body })
}

/// A `GET` whose body arrives as lines over a long time (a watch): the status, then
/// [`Lines::next_line`] until it returns `None`. A read that waits longer than `timeout` is an
/// [`HttpError::Io`] of kind `WouldBlock` or `TimedOut`, after which reading may go on.
pub fn stream(authority: &str, path: &str, timeout: Duration) -> Result<(u16, Lines), HttpError> {
    let (status, reader) = send(authority, "GET", path, b"", timeout)?;
    Ok((status, Lines { body: reader, line: Vec::new() }))
}

/// The lines of a streamed body.
pub struct Lines {
    body: Body,
    line: Vec<u8>,
}

impl Lines {
    /// The next non-empty line, without its end; `None` when the body ends. A line longer
    /// than [`LINE_MAX`] is an error; a partial line at the end of the body is dropped (the
    /// stream broke mid-object).
    pub fn next_line(&mut self) -> Result<Option<Vec<u8>>, HttpError> {
        loop {
            let Some(byte) = self.body.next_byte()? else { return Ok(None) };
            if byte == b'\n' {
                let line = std::mem::take(&mut self.line);
                let line = line.strip_suffix(b"\r").map(<[u8]>::to_vec).unwrap_or(line);
                if !line.iter().all(u8::is_ascii_whitespace) {
                    return Ok(Some(line));
                }
                continue;
            }
            if self.line.len() >= LINE_MAX {
                return Err(HttpError::TooLarge("a streamed line"));
            }
            self.line.push(byte);
        }
    }
}

/// Connects, writes the request, reads the head: the status and the body's reader.
fn send(
    authority: &str,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<(u16, Body), HttpError> {
    let connect = |source| HttpError::Connect { address: authority.to_string(), source };
    let address = resolve(authority).map_err(connect)?;
    let mut stream = TcpStream::connect_timeout(&address, timeout).map_err(connect)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\
         Accept: application/json\r\nUser-Agent: rally/{}\r\n",
        env!("CARGO_PKG_VERSION")
    );
    if !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH") {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    let mut reader = BufReader::new(stream);
    let (status, framing) = read_head(&mut reader)?;
    Ok((status, Body { reader, framing, chunk_left: 0, size_line: Vec::new(), done: false }))
}

fn resolve(authority: &str) -> std::io::Result<SocketAddr> {
    authority.to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, "the name resolves to no address")
    })
}

/// How a body's end is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

/// The status line and headers: the status and how the body ends.
fn read_head(reader: &mut impl BufRead) -> Result<(u16, Framing), HttpError> {
    let mut taken = 0;
    let status_line = read_head_line(reader, &mut taken)?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(HttpError::Malformed("the status line is not HTTP/1.x"));
    }
    let status = parts
        .next()
        .and_then(|code| code.parse::<u16>().ok())
        .filter(|code| (100..600).contains(code))
        .ok_or(HttpError::Malformed("no status code"))?;
    let mut framing = Framing::UntilClose;
    loop {
        let line = read_head_line(reader, &mut taken)?;
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').ok_or(HttpError::Malformed("a header"))?;
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
            framing = Framing::Chunked;
        } else if name == "content-length" && framing != Framing::Chunked {
            let length = value.parse().map_err(|_| HttpError::Malformed("content-length"))?;
            framing = Framing::Length(length);
        }
    }
    Ok((status, framing))
}

/// One line of the head, counting what the head took against [`HEAD_MAX`].
fn read_head_line(reader: &mut impl BufRead, taken: &mut usize) -> Result<String, HttpError> {
    let mut line = Vec::new();
    let limit = (HEAD_MAX - *taken) as u64 + 1;
    let n = reader.by_ref().take(limit).read_until(b'\n', &mut line)?;
    *taken += n;
    if n == 0 {
        return Err(HttpError::Malformed("the connection closed before the head ended"));
    }
    if *taken > HEAD_MAX {
        return Err(HttpError::TooLarge("the response head"));
    }
    if line.last() != Some(&b'\n') {
        return Err(HttpError::Malformed("the connection closed mid-line"));
    }
    let text = String::from_utf8(line).map_err(|_| HttpError::Malformed("a head not UTF-8"))?;
    Ok(text.trim_end_matches(['\r', '\n']).to_string())
}

/// A response body being read, whatever its framing.
struct Body {
    reader: BufReader<TcpStream>,
    framing: Framing,
    /// Bytes left of the current chunk (chunked), or of the body (length).
    chunk_left: usize,
    /// A chunk's size line as read so far: a read that times out mid-line (a watch waiting)
    /// keeps what it read for the next.
    size_line: Vec<u8>,
    done: bool,
}

impl Body {
    /// The whole body, at most [`BODY_MAX`] bytes.
    fn read_all(&mut self) -> Result<Vec<u8>, HttpError> {
        if let Framing::Length(length) = self.framing {
            if length > BODY_MAX {
                return Err(HttpError::TooLarge("the response body"));
            }
        }
        let mut body = Vec::new();
        while let Some(byte) = self.next_byte()? {
            if body.len() >= BODY_MAX {
                return Err(HttpError::TooLarge("the response body"));
            }
            body.push(byte);
        }
        Ok(body)
    }

    /// The body's next byte; `None` at its end. Buffered, so a byte at a time is cheap.
    fn next_byte(&mut self) -> Result<Option<u8>, HttpError> {
        if self.done {
            return Ok(None);
        }
        match self.framing {
            Framing::Length(length) => {
                if self.chunk_left == 0 && length > 0 {
                    // The first call: the whole body is one chunk.
                    self.chunk_left = length;
                    self.framing = Framing::Length(0);
                }
                if self.chunk_left == 0 {
                    self.done = true;
                    return Ok(None);
                }
                self.chunk_left -= 1;
                self.byte(true)
            }
            Framing::UntilClose => {
                let byte = self.byte(false)?;
                self.done = byte.is_none();
                Ok(byte)
            }
            Framing::Chunked => {
                if self.chunk_left == 0 {
                    self.chunk_left = self.chunk_size()?;
                    if self.chunk_left == 0 {
                        self.done = true;
                        return Ok(None);
                    }
                }
                self.chunk_left -= 1;
                self.byte(true)
            }
        }
    }

    /// One byte from the connection; at its end, `None`, or an error if more was `expected`.
    fn byte(&mut self, expected: bool) -> Result<Option<u8>, HttpError> {
        let buffer = self.reader.fill_buf()?;
        let Some(&byte) = buffer.first() else {
            return if expected {
                Err(HttpError::Malformed("the connection closed mid-body"))
            } else {
                Ok(None)
            };
        };
        self.reader.consume(1);
        Ok(Some(byte))
    }

    /// The next chunk's size (hex, extensions ignored), past the line end that closed the
    /// chunk before it.
    fn chunk_size(&mut self) -> Result<usize, HttpError> {
        loop {
            let room = 64u64.saturating_sub(self.size_line.len() as u64);
            let n = self.reader.by_ref().take(room).read_until(b'\n', &mut self.size_line)?;
            if self.size_line.last() != Some(&b'\n') {
                return Err(if n == 0 {
                    HttpError::Malformed("the connection closed mid-body")
                } else {
                    HttpError::Malformed("a chunk size line too long")
                });
            }
            let line = std::mem::take(&mut self.size_line);
            if !line.iter().all(u8::is_ascii_whitespace) {
                return Self::parse_chunk_size(&line);
            }
        }
    }

    fn parse_chunk_size(line: &[u8]) -> Result<usize, HttpError> {
        let text = std::str::from_utf8(line).map_err(|_| HttpError::Malformed("a chunk size"))?;
        let size = text.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| HttpError::Malformed("a chunk size that is not hex"))?;
        if size > BODY_MAX {
            return Err(HttpError::TooLarge("a chunk"));
        }
        Ok(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Answers one connection with `answer`, after reading the request head.
    fn serve_once(answer: impl AsRef<[u8]>) -> String {
        serve_in_parts(vec![answer.as_ref().to_vec()], Duration::ZERO)
    }

    /// Answers one connection with `parts`, pausing `pause` between them.
    fn serve_in_parts(parts: Vec<Vec<u8>>, pause: Duration) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            for (k, part) in parts.iter().enumerate() {
                if k > 0 {
                    std::thread::sleep(pause);
                }
                let _ = stream.write_all(part);
            }
        });
        address
    }

    #[test]
    fn bodies_arrive_whole_whatever_their_framing() {
        // Goal: a sidecar's answers are read the same whether sized, chunked or closed.
        let second = Duration::from_secs(5);
        let sized = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
        assert_eq!(request(&sized, "POST", "/ready", b"{}", second).unwrap().body, b"{}");
        let chunked = serve_once(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
              3\r\n{\"a\r\n4;x=1\r\n\":1}\r\n0\r\n\r\n",
        );
        let response = request(&chunked, "GET", "/gameserver", b"", second).unwrap();
        assert_eq!((response.status, response.body.as_slice()), (200, &b"{\"a\":1}"[..]));
        let closed = serve_once(b"HTTP/1.0 404 Not Found\r\n\r\nnope");
        let response = request(&closed, "GET", "/x", b"", second).unwrap();
        assert_eq!((response.ok(), response.body.as_slice()), (false, &b"nope"[..]));
    }

    #[test]
    fn garbage_and_broken_answers_are_errors() {
        // Goal: what is not HTTP, or breaks off, is a typed error, never a hang or a panic.
        let second = Duration::from_secs(5);
        for answer in [
            &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
            b"HTTP/1.1 abc OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Len",
        ] {
            let address = serve_once(answer);
            let result = request(&address, "GET", "/", b"", second);
            assert!(result.is_err(), "{:?} gave {result:?}", String::from_utf8_lossy(answer));
        }
        let nobody = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
        let refused = request(&nobody, "GET", "/", b"", second);
        assert!(matches!(refused, Err(HttpError::Connect { .. })), "{refused:?}");
    }

    #[test]
    fn heads_bodies_and_lines_past_their_limits_are_refused() {
        // Goal: a server that never stops talking costs a bounded buffer. Method: a head, a
        // sized body, a chunked body and a streamed line each one byte past its limit.
        let second = Duration::from_secs(5);
        let mut head = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        head.resize(HEAD_MAX + 1, b'a');
        let result = request(&serve_once(head), "GET", "/", b"", second);
        assert!(matches!(result, Err(HttpError::TooLarge(_))), "{result:?}");
        let sized = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", BODY_MAX + 1);
        let result = request(&serve_once(sized.into_bytes()), "GET", "/", b"", second);
        assert!(matches!(result, Err(HttpError::TooLarge(_))), "{result:?}");
        let mut chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..=BODY_MAX / (64 * 1024) {
            chunked.extend_from_slice(b"10000\r\n");
            chunked.resize(chunked.len() + 64 * 1024, b'b');
            chunked.extend_from_slice(b"\r\n");
        }
        let result = request(&serve_once(chunked), "GET", "/", b"", second);
        assert!(matches!(result, Err(HttpError::TooLarge(_))), "{result:?}");
        let mut long = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        long.resize(long.len() + LINE_MAX + 1, b'c');
        let (_, mut lines) = stream(&serve_once(long), "/watch", second).unwrap();
        let result = lines.next_line();
        assert!(matches!(result, Err(HttpError::TooLarge(_))), "{result:?}");
    }

    #[test]
    fn a_stream_yields_lines_and_drops_a_partial_last_object() {
        // Goal: a watch reads each JSON line as it comes; a stream broken mid-object gives
        // the whole lines before it and no half object.
        let address = serve_once(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
              6\r\n{\"a\":1\r\n3\r\n}\n\n\r\n5\r\n{\"b\":\r\n",
        );
        let (status, mut lines) = stream(&address, "/watch/gameserver", Duration::from_secs(5))
            .expect("the head arrives");
        assert_eq!(status, 200);
        assert_eq!(lines.next_line().unwrap(), Some(b"{\"a\":1}".to_vec()));
        assert!(lines.next_line().is_err(), "the chunked body broke off");
    }

    #[test]
    fn a_watch_read_that_times_out_mid_chunk_size_goes_on_where_it_stopped() {
        // Goal: a watch waits with short read timeouts; one that expires in the middle of a
        // chunk's size line loses nothing. Method: the size line arrives in two parts, with a
        // pause longer than the read timeout between them.
        let parts = vec![
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1".to_vec(),
            // 0x11: the 17 bytes of the line and its end.
            b"1\r\n{\"object\":12345}\n\r\n0\r\n\r\n".to_vec(),
        ];
        let address = serve_in_parts(parts, Duration::from_millis(300));
        let (_, mut lines) = stream(&address, "/watch", Duration::from_millis(50)).unwrap();
        let timed_out = lines.next_line().expect_err("nothing whole within the timeout");
        assert!(matches!(timed_out, HttpError::Io(_)), "{timed_out:?}");
        let mut line = lines.next_line();
        while matches!(line, Err(HttpError::Io(_))) {
            line = lines.next_line();
        }
        assert_eq!(line.unwrap(), Some(b"{\"object\":12345}".to_vec()));
        assert_eq!(lines.next_line().unwrap(), None);
    }

    #[test]
    fn urls_name_an_authority_and_a_path() {
        let url = Url::parse("http://127.0.0.1:8001/apis/x?y=1").unwrap();
        assert_eq!((url.authority.as_str(), url.path.as_str()), ("127.0.0.1:8001", "/apis/x?y=1"));
        assert_eq!(Url::parse("http://allocator").unwrap().authority, "allocator:80");
        assert!(Url::parse("https://a:1/").is_err());
        assert!(Url::parse("http://user@a:1/").is_err());
    }
}
