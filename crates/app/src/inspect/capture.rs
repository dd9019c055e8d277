//! UDP datagrams out of a capture file: classic pcap (as `tcpdump -w` writes it, microsecond
//! or nanosecond timestamps, either byte order) and pcapng (as tshark and Wireshark write it),
//! over Ethernet, Linux cooked (SLL and SLL2), BSD loopback or raw IP links, IPv4 or IPv6.
//! Anything else in the file (TCP, ARP, IP fragments, unknown links) is skipped and counted.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// One UDP datagram from a capture.
#[derive(Debug, Clone, PartialEq)]
pub struct Datagram {
    /// When it was captured, Unix seconds.
    pub time: f64,
    /// Its source.
    pub from: SocketAddr,
    /// Its destination.
    pub to: SocketAddr,
    /// The UDP payload.
    pub payload: Vec<u8>,
}

/// What a capture held.
#[derive(Debug, Default)]
pub struct Capture {
    /// Its UDP datagrams, in file order.
    pub datagrams: Vec<Datagram>,
    /// Records that were not whole UDP datagrams on a link this reader knows.
    pub skipped: usize,
}

/// Why a capture could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// Not a pcap or pcapng file.
    #[error("not a pcap or pcapng capture (it starts with {0:02x?}): write one with tcpdump -w")]
    NotACapture([u8; 4]),
    /// A record runs past the end of the file.
    #[error("the capture is cut short in record {0}")]
    Truncated(usize),
}

/// Link types this reader unwraps (LINKTYPE_* numbers of the pcap spec).
const LINK_NULL: u32 = 0;
const LINK_ETHERNET: u32 = 1;
const LINK_RAW: [u32; 3] = [101, 12, 14];
const LINK_IPV4: u32 = 228;
const LINK_IPV6: u32 = 229;
const LINK_SLL: u32 = 113;
const LINK_SLL2: u32 = 276;

/// Reads every UDP datagram of a pcap or pcapng file's bytes.
pub fn read(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let magic: [u8; 4] = bytes.get(..4).and_then(|m| m.try_into().ok()).unwrap_or_default();
    match magic {
        [0x0a, 0x0d, 0x0d, 0x0a] => read_pcapng(bytes),
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => read_pcap(bytes, false),
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => read_pcap(bytes, true),
        other => Err(CaptureError::NotACapture(other)),
    }
}

/// Reads a field of a file in either byte order.
#[derive(Clone, Copy)]
struct Order {
    big: bool,
}

impl Order {
    fn u16(self, b: &[u8], at: usize) -> Option<u16> {
        let b: [u8; 2] = b.get(at..at + 2)?.try_into().ok()?;
        Some(if self.big { u16::from_be_bytes(b) } else { u16::from_le_bytes(b) })
    }

    fn u32(self, b: &[u8], at: usize) -> Option<u32> {
        let b: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        Some(if self.big { u32::from_be_bytes(b) } else { u32::from_le_bytes(b) })
    }
}

fn read_pcap(bytes: &[u8], big: bool) -> Result<Capture, CaptureError> {
    let order = Order { big };
    let nanos = matches!(bytes[..4], [0x4d, 0x3c, 0xb2, 0xa1] | [0xa1, 0xb2, 0x3c, 0x4d]);
    let link = order.u32(bytes, 20).ok_or(CaptureError::Truncated(0))?;
    let mut capture = Capture::default();
    let mut at = 24;
    let mut record = 0;
    while at < bytes.len() {
        record += 1;
        let field = |k: usize| order.u32(bytes, at + 4 * k).ok_or(CaptureError::Truncated(record));
        let (seconds, fraction, len) = (field(0)?, field(1)?, field(2)? as usize);
        let frame = bytes.get(at + 16..at + 16 + len).ok_or(CaptureError::Truncated(record))?;
        let time = f64::from(seconds) + f64::from(fraction) / if nanos { 1e9 } else { 1e6 };
        capture.push(link, time, frame);
        at += 16 + len;
    }
    Ok(capture)
}

fn read_pcapng(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let mut capture = Capture::default();
    // Each section says its byte order; each interface its link type and time unit.
    let mut order = Order { big: false };
    let mut interfaces: Vec<(u32, f64)> = Vec::new();
    let (mut at, mut record) = (0, 0);
    while at + 12 <= bytes.len() {
        record += 1;
        if bytes[at..at + 4] == [0x0a, 0x0d, 0x0d, 0x0a] {
            order.big = bytes.get(at + 8..at + 12) == Some(&[0x1a, 0x2b, 0x3c, 0x4d]);
            interfaces.clear();
        }
        let kind = order.u32(bytes, at).ok_or(CaptureError::Truncated(record))?;
        let len = order.u32(bytes, at + 4).ok_or(CaptureError::Truncated(record))? as usize;
        let block = bytes.get(at..at + len).filter(|_| len >= 12);
        let block = block.ok_or(CaptureError::Truncated(record))?;
        match kind {
            // Interface description: link type, and a time unit of microseconds unless an
            // if_tsresol option says otherwise.
            1 => {
                let link = u32::from(order.u16(block, 8).unwrap_or(u16::MAX));
                interfaces.push((link, tsresol(block, order).unwrap_or(1e-6)));
            }
            // Enhanced packet: interface, timestamp, captured length, data.
            6 => {
                let field = |k: usize| order.u32(block, 8 + 4 * k);
                let (Some(interface), Some(high), Some(low), Some(captured)) =
                    (field(0), field(1), field(2), field(3))
                else {
                    return Err(CaptureError::Truncated(record));
                };
                let frame = block.get(28..28 + captured as usize);
                let frame = frame.ok_or(CaptureError::Truncated(record))?;
                match interfaces.get(interface as usize) {
                    Some(&(link, unit)) => {
                        let ticks = (u64::from(high) << 32) | u64::from(low);
                        capture.push(link, ticks as f64 * unit, frame);
                    }
                    None => capture.skipped += 1,
                }
            }
            _ => {}
        }
        at += len;
    }
    Ok(capture)
}

/// An interface's `if_tsresol` option (code 9): 10^-n seconds, or 2^-n with the top bit set.
fn tsresol(block: &[u8], order: Order) -> Option<f64> {
    let mut at = 16;
    while at + 4 <= block.len().saturating_sub(4) {
        let (code, len) = (order.u16(block, at)?, order.u16(block, at + 2)? as usize);
        if code == 0 {
            return None;
        }
        if code == 9 && len >= 1 {
            let v = *block.get(at + 4)?;
            let exponent = i32::from(v & 0x7f);
            return Some(if v & 0x80 == 0 { 10f64.powi(-exponent) } else { 2f64.powi(-exponent) });
        }
        at += 4 + len.div_ceil(4) * 4;
    }
    None
}

impl Capture {
    /// Keeps `frame`'s UDP datagram, or counts it skipped.
    fn push(&mut self, link: u32, time: f64, frame: &[u8]) {
        match udp(link, frame) {
            Some((from, to, payload)) => {
                self.datagrams.push(Datagram { time, from, to, payload: payload.to_vec() })
            }
            None => self.skipped += 1,
        }
    }
}

/// The IP packet inside a link-layer frame, then its UDP datagram.
fn udp(link: u32, frame: &[u8]) -> Option<(SocketAddr, SocketAddr, &[u8])> {
    let ip = match link {
        LINK_ETHERNET => {
            let mut at = 12;
            let mut ethertype = u16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?);
            // 802.1Q tags, one or two.
            while ethertype == 0x8100 || ethertype == 0x88a8 {
                at += 4;
                ethertype = u16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?);
            }
            frame.get(at + 2..)?
        }
        LINK_NULL => frame.get(4..)?,
        LINK_SLL => frame.get(16..)?,
        LINK_SLL2 => frame.get(20..)?,
        l if LINK_RAW.contains(&l) || l == LINK_IPV4 || l == LINK_IPV6 => frame,
        _ => return None,
    };
    match ip.first()? >> 4 {
        4 => ipv4_udp(ip),
        6 => ipv6_udp(ip),
        _ => None,
    }
}

fn ipv4_udp(ip: &[u8]) -> Option<(SocketAddr, SocketAddr, &[u8])> {
    let header = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes(ip.get(2..4)?.try_into().ok()?));
    let fragmented = u16::from_be_bytes(ip.get(6..8)?.try_into().ok()?) & 0x3fff != 0;
    if *ip.get(9)? != 17 || fragmented || header < 20 {
        return None;
    }
    let source = Ipv4Addr::from(<[u8; 4]>::try_from(ip.get(12..16)?).ok()?);
    let destination = Ipv4Addr::from(<[u8; 4]>::try_from(ip.get(16..20)?).ok()?);
    datagram(source.into(), destination.into(), ip.get(header..total.max(header))?)
}

fn ipv6_udp(ip: &[u8]) -> Option<(SocketAddr, SocketAddr, &[u8])> {
    // Only UDP right after the fixed header: Rally sends no extension headers.
    if *ip.get(6)? != 17 {
        return None;
    }
    let source = Ipv6Addr::from(<[u8; 16]>::try_from(ip.get(8..24)?).ok()?);
    let destination = Ipv6Addr::from(<[u8; 16]>::try_from(ip.get(24..40)?).ok()?);
    datagram(source.into(), destination.into(), ip.get(40..)?)
}

fn datagram(from: IpAddr, to: IpAddr, udp: &[u8]) -> Option<(SocketAddr, SocketAddr, &[u8])> {
    let port = |at: usize| Some(u16::from_be_bytes(udp.get(at..at + 2)?.try_into().ok()?));
    let len = usize::from(port(4)?);
    let payload = udp.get(8..len.max(8))?;
    Some((SocketAddr::new(from, port(0)?), SocketAddr::new(to, port(2)?), payload))
}

/// Writes datagrams as a classic pcap of raw IPv4 packets (link type 228), as a test's
/// capture of traffic it made itself.
#[cfg(test)]
pub fn write_pcap(datagrams: &[Datagram]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&LINK_IPV4.to_le_bytes());
    for d in datagrams {
        let (SocketAddr::V4(from), SocketAddr::V4(to)) = (d.from, d.to) else { continue };
        let udp_len = 8 + d.payload.len();
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
        ip[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        ip.extend_from_slice(&from.ip().octets());
        ip.extend_from_slice(&to.ip().octets());
        ip.extend_from_slice(&from.port().to_be_bytes());
        ip.extend_from_slice(&to.port().to_be_bytes());
        ip.extend_from_slice(&(udp_len as u16).to_be_bytes());
        ip.extend_from_slice(&[0, 0]);
        ip.extend_from_slice(&d.payload);
        out.extend_from_slice(&(d.time as u32).to_le_bytes());
        out.extend_from_slice(&((d.time.fract() * 1e6) as u32).to_le_bytes());
        out.extend_from_slice(&(ip.len() as u32).to_le_bytes());
        out.extend_from_slice(&(ip.len() as u32).to_le_bytes());
        out.extend_from_slice(&ip);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Datagram> {
        let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
        vec![
            Datagram { time: 1.5, from: at(5000), to: at(6000), payload: vec![1, 2, 3] },
            Datagram { time: 2.25, from: at(6000), to: at(5000), payload: vec![] },
        ]
    }

    #[test]
    fn a_written_capture_reads_back_and_garbage_is_refused() {
        let bytes = write_pcap(&sample());
        let capture = read(&bytes).unwrap();
        assert_eq!(capture.datagrams, sample());
        assert_eq!(capture.skipped, 0);
        assert!(matches!(read(b"hello world"), Err(CaptureError::NotACapture(_))));
        // Cut anywhere inside the records: an error naming the record, never a panic.
        for cut in 25..bytes.len() {
            let _ = read(&bytes[..cut]);
        }
        assert!(matches!(read(&bytes[..bytes.len() - 1]), Err(CaptureError::Truncated(2))));
    }

    #[test]
    fn an_ethernet_pcapng_with_a_nanosecond_interface_reads() {
        // One section, one Ethernet interface with if_tsresol = 9, one enhanced packet holding
        // the first sample datagram behind an Ethernet header.
        let ip = &write_pcap(&sample()[..1])[40..];
        let mut frame = vec![0; 12];
        frame.extend_from_slice(&[0x08, 0x00]);
        frame.extend_from_slice(ip);
        let block = |kind: u32, body: &[u8]| {
            let len = (12 + body.len().div_ceil(4) * 4) as u32;
            let mut b = kind.to_le_bytes().to_vec();
            b.extend_from_slice(&len.to_le_bytes());
            b.extend_from_slice(body);
            b.resize(len as usize - 4, 0);
            b.extend_from_slice(&len.to_le_bytes());
            b
        };
        let shb = [0x1a2b_3c4du32.to_le_bytes().to_vec(), vec![1, 0, 0, 0], vec![0xff; 8]].concat();
        let idb = [vec![1, 0, 0, 0], 65535u32.to_le_bytes().to_vec(), vec![9, 0, 1, 0, 9, 0, 0, 0]];
        let ticks = 1_500_000_000u64;
        let mut epb = vec![0, 0, 0, 0];
        epb.extend_from_slice(&((ticks >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(ticks as u32).to_le_bytes());
        epb.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        epb.extend_from_slice(&frame);
        let mut file = block(0x0a0d_0d0a, &shb);
        file.extend(block(1, &idb.concat()));
        file.extend(block(6, &epb));
        let capture = read(&file).unwrap();
        assert_eq!(capture.datagrams, sample()[..1]);
    }
}
