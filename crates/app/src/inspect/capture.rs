//! UDP datagrams out of a capture file: classic pcap (as `tcpdump -w` writes it, microsecond
//! or nanosecond timestamps, either byte order) and pcapng (as tshark and Wireshark write it),
//! over Ethernet, Linux cooked (SLL and SLL2), BSD loopback or raw IP links, IPv4 or IPv6.
//! Anything else in the file (TCP, ARP, IP fragments, unknown links) is skipped and counted.
//!
//! The file formats are pcap-parser's to read and the link, IP and UDP headers etherparse's;
//! this module only walks the records, keeps each interface's link type and time unit, and
//! counts what it skips.

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use pcap_parser::nom;
use pcap_parser::traits::PcapNGPacketBlock;
use pcap_parser::{Block, Linktype, PcapBlockOwned, PcapNGSlice};
use std::net::{IpAddr, SocketAddr};

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
    /// A record's own fields do not hold together (a block shorter than its header, say).
    #[error("record {0} of the capture is malformed")]
    Malformed(usize),
}

/// Reads every UDP datagram of a pcap or pcapng file's bytes.
pub fn read(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let magic: [u8; 4] = bytes.get(..4).and_then(|m| m.try_into().ok()).unwrap_or_default();
    match magic {
        [0x0a, 0x0d, 0x0d, 0x0a] => read_pcapng(bytes),
        _ => read_pcap(bytes).ok_or(CaptureError::NotACapture(magic))?,
    }
}

/// Why pcap-parser stopped in record `record`: the data ran out, or did not parse.
fn stopped<E>(record: usize, error: &nom::Err<E>) -> CaptureError {
    match error {
        nom::Err::Incomplete(_) => CaptureError::Truncated(record),
        nom::Err::Error(_) | nom::Err::Failure(_) => CaptureError::Malformed(record),
    }
}

/// A classic pcap file, or `None` if `bytes` do not start with its header.
fn read_pcap(bytes: &[u8]) -> Option<Result<Capture, CaptureError>> {
    let (mut rest, header) = pcap_parser::parse_pcap_header(bytes).ok()?;
    // The record layout follows the header's magic: byte order, and the old "modified" form.
    let parse = if header.is_modified_format() {
        pcap_parser::parse_pcap_frame_modified
    } else if header.is_bigendian() {
        pcap_parser::parse_pcap_frame_be
    } else {
        pcap_parser::parse_pcap_frame
    };
    let unit = if header.is_nanosecond_precision() { 1e-9 } else { 1e-6 };
    let mut capture = Capture::default();
    let mut record = 0;
    while !rest.is_empty() {
        record += 1;
        let (after, frame) = match parse(rest) {
            Ok(parsed) => parsed,
            Err(error) => return Some(Err(stopped(record, &error))),
        };
        let time = f64::from(frame.ts_sec) + f64::from(frame.ts_usec) * unit;
        capture.push(header.network, time, frame.data);
        rest = after;
    }
    Some(Ok(capture))
}

/// A pcapng file: sections of interfaces (each with its link type and time unit) and packets.
fn read_pcapng(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let blocks = PcapNGSlice::from_slice(bytes).map_err(|error| stopped(1, &error))?;
    let mut capture = Capture::default();
    // Per interface: its link type, ticks per second and offset in seconds.
    let mut interfaces: Vec<(Linktype, f64, f64)> = Vec::new();
    for (k, block) in blocks.enumerate() {
        match block.map_err(|error| stopped(k + 1, &error))? {
            PcapBlockOwned::NG(Block::SectionHeader(_)) => interfaces.clear(),
            PcapBlockOwned::NG(Block::InterfaceDescription(interface)) => {
                let rate = ticks_per_second(interface.if_tsresol);
                interfaces.push((interface.linktype, rate, interface.if_tsoffset as f64));
            }
            PcapBlockOwned::NG(Block::EnhancedPacket(packet)) => {
                match interfaces.get(packet.if_id as usize) {
                    Some(&(link, rate, offset)) => {
                        let ticks = (u64::from(packet.ts_high) << 32) | u64::from(packet.ts_low);
                        capture.push(link, offset + ticks as f64 / rate, packet.packet_data());
                    }
                    None => capture.skipped += 1,
                }
            }
            PcapBlockOwned::NG(Block::SimplePacket(_)) => capture.skipped += 1,
            _ => {}
        }
    }
    Ok(capture)
}

/// Ticks per second of an interface's `if_tsresol` option: 10^n, or 2^n with the top bit set.
/// (In floating point, where pcap-parser's `ts_resolution` refuses every power of two, and its
/// `decode_ts` adds the file's offset in integers that a hostile file can overflow.)
fn ticks_per_second(tsresol: u8) -> f64 {
    let n = i32::from(tsresol & 0x7f);
    if tsresol & 0x80 == 0 {
        10f64.powi(n)
    } else {
        2f64.powi(n)
    }
}

impl Capture {
    /// Keeps `frame`'s UDP datagram, or counts it skipped.
    fn push(&mut self, link: Linktype, time: f64, frame: &[u8]) {
        match udp(link, frame) {
            Some((from, to, payload)) => {
                self.datagrams.push(Datagram { time, from, to, payload: payload.to_vec() })
            }
            None => self.skipped += 1,
        }
    }
}

/// The UDP datagram inside a link-layer frame, if it holds a whole one.
fn udp(link: Linktype, frame: &[u8]) -> Option<(SocketAddr, SocketAddr, &[u8])> {
    let packet = match link {
        Linktype::ETHERNET => SlicedPacket::from_ethernet(frame),
        Linktype::LINUX_SLL => SlicedPacket::from_linux_sll(frame),
        // BSD loopback: a 4-byte address family; Linux cooked v2: a 20-byte header.
        Linktype::NULL | Linktype::LOOP => SlicedPacket::from_ip(frame.get(4..)?),
        Linktype::LINUX_SLL2 => SlicedPacket::from_ip(frame.get(20..)?),
        // Raw IP, under each number it has had (12 and 14 on some BSDs).
        Linktype::RAW | Linktype::IPV4 | Linktype::IPV6 | Linktype(12) | Linktype(14) => {
            SlicedPacket::from_ip(frame)
        }
        _ => return None,
    }
    .ok()?;
    let (from, to): (IpAddr, IpAddr) = match &packet.net {
        Some(NetSlice::Ipv4(ip)) => {
            (ip.header().source_addr().into(), ip.header().destination_addr().into())
        }
        Some(NetSlice::Ipv6(ip)) => {
            (ip.header().source_addr().into(), ip.header().destination_addr().into())
        }
        _ => return None,
    };
    // etherparse leaves a fragment's transport unparsed, so an IP fragment ends here too.
    let Some(TransportSlice::Udp(udp)) = &packet.transport else { return None };
    let from = SocketAddr::new(from, udp.source_port());
    Some((from, SocketAddr::new(to, udp.destination_port()), udp.payload()))
}

/// Writes datagrams as a classic pcap of raw IPv4 packets (link type 228), as a test's
/// capture of traffic it made itself.
#[cfg(test)]
pub fn write_pcap(datagrams: &[Datagram]) -> Vec<u8> {
    // The file header: magic (microseconds, little-endian), version 2.4, zone and accuracy 0,
    // snap length, link type.
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&Linktype::IPV4.0.to_le_bytes());
    for d in datagrams {
        let (SocketAddr::V4(from), SocketAddr::V4(to)) = (d.from, d.to) else { continue };
        let builder = etherparse::PacketBuilder::ipv4(from.ip().octets(), to.ip().octets(), 64)
            .udp(from.port(), to.port());
        let mut ip = Vec::with_capacity(builder.size(d.payload.len()));
        builder.write(&mut ip, &d.payload).expect("a test's datagram fits a packet");
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
        // Cut anywhere, or with any byte changed: an error or fewer datagrams, never a panic.
        for at in 0..file.len() {
            let _ = read(&file[..at]);
            let mut changed = file.clone();
            changed[at] ^= 0xff;
            let _ = read(&changed);
        }
        assert!(matches!(read(&file[..file.len() - 1]), Err(CaptureError::Truncated(3))));
        // The same packet on an interface that counts 2^-20 s (if_tsresol's top bit set).
        let tsresol = 28 + 8 + 12; // after the section header, the block header, link and snap
        assert_eq!(file[tsresol], 9, "the if_tsresol value");
        let mut binary = file.clone();
        binary[tsresol] = 0x80 | 20;
        let time = read(&binary).unwrap().datagrams[0].time;
        assert_eq!(time, ticks as f64 / f64::from(1 << 20));
    }

    /// A classic pcap of `frames` on `link`, in either byte order, with nanosecond times.
    fn pcap_nanos(link: Linktype, big: bool, frames: &[(f64, Vec<u8>)]) -> Vec<u8> {
        let u32s = |v: u32| if big { v.to_be_bytes() } else { v.to_le_bytes() };
        let u16s = |v: u16| if big { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut out = [&u32s(0xa1b2_3c4d)[..], &u16s(2), &u16s(4), &[0; 8]].concat();
        out.extend_from_slice(&u32s(65535));
        out.extend_from_slice(&u32s(link.0 as u32));
        for (time, frame) in frames {
            out.extend_from_slice(&u32s(*time as u32));
            out.extend_from_slice(&u32s((time.fract() * 1e9).round() as u32));
            out.extend_from_slice(&u32s(frame.len() as u32));
            out.extend_from_slice(&u32s(frame.len() as u32));
            out.extend_from_slice(frame);
        }
        out
    }

    fn frame(
        builder: etherparse::PacketBuilderStep<etherparse::UdpHeader>,
        body: &[u8],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        builder.write(&mut out, body).expect("fits");
        out
    }

    #[test]
    fn big_endian_ethernet_with_vlans_and_ipv6_and_a_loopback_link_read() {
        // Goal: what tcpdump writes on other machines reads too: a big-endian nanosecond pcap
        // of Ethernet frames (a VLAN-tagged IPv6 datagram kept, a TCP segment and an IPv4
        // fragment skipped), and a BSD loopback capture.
        use etherparse::PacketBuilder;
        let (a, b) = ([1u8; 6], [2u8; 6]);
        let (v6a, v6b) = ([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], [0xfe; 16]);
        let vlan = etherparse::VlanId::try_new(7).expect("a VLAN id");
        let kept = PacketBuilder::ethernet2(a, b).single_vlan(vlan).ipv6(v6a, v6b, 9).udp(7777, 9);
        let mut tcp = Vec::new();
        PacketBuilder::ethernet2(a, b)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(1, 2, 3, 4)
            .write(&mut tcp, b"not udp")
            .expect("fits");
        let mut fragment = frame(
            PacketBuilder::ethernet2(a, b).ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64).udp(5, 6),
            b"part",
        );
        fragment[14 + 6] |= 0x20; // more fragments follow
        let frames = [(1.5, frame(kept, b"hello")), (2.0, tcp), (2.5, fragment)];
        let capture = read(&pcap_nanos(Linktype::ETHERNET, true, &frames)).unwrap();
        assert_eq!(capture.skipped, 2, "the TCP segment and the fragment");
        let want = Datagram {
            time: 1.5,
            from: SocketAddr::new(std::net::Ipv6Addr::from(v6a).into(), 7777),
            to: SocketAddr::new(std::net::Ipv6Addr::from(v6b).into(), 9),
            payload: b"hello".to_vec(),
        };
        assert_eq!(capture.datagrams, [want]);

        let ip = frame(PacketBuilder::ipv4([127, 0, 0, 1], [127, 0, 0, 1], 64).udp(1, 2), b"x");
        let looped = [&2u32.to_le_bytes()[..], &ip].concat(); // AF_INET, host order
        let capture = read(&pcap_nanos(Linktype::NULL, false, &[(0.25, looped)])).unwrap();
        assert_eq!(capture.datagrams.len(), 1);
        assert_eq!(
            (capture.datagrams[0].time, &capture.datagrams[0].payload[..]),
            (0.25, &b"x"[..])
        );
        // A link the reader does not know is counted, not guessed at.
        let capture = read(&pcap_nanos(Linktype(147), false, &[(0.0, vec![0; 40])])).unwrap();
        assert_eq!((capture.datagrams.len(), capture.skipped), (0, 1));
    }
}
