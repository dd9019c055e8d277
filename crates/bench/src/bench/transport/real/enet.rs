//! ENet on real sockets: the original C library (Debian's libenet7, ENet 1.3), loaded at run
//! time so that the rally binary starts on machines without it. Reliable packets on channel
//! 0, flushed at once after every send; each host serviced with ENet's own 1 ms wait, as games
//! call it.

#![allow(unsafe_code)] // a C library's ABI: every call is commented with what makes it sound

use super::{index_of, Client, Server, CONNECT_TIMEOUT};
use libloading::Library;
use rally_driver::Clock;
use rally_proto::Instant;
use std::error::Error;
use std::ffi::c_void;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Where Debian's package puts the library, by soname.
const LIBRARY: &str = "libenet.so.7";

/// `ENetAddress`: host in network byte order, port in host byte order.
#[repr(C)]
#[derive(Clone, Copy)]
struct Address {
    host: u32,
    port: u16,
}

/// `ENetEvent`.
#[repr(C)]
struct Event {
    kind: i32,
    peer: *mut c_void,
    channel: u8,
    data: u32,
    packet: *mut Packet,
}

/// `ENetPacket`, the fields read here.
#[repr(C)]
struct Packet {
    reference_count: usize,
    flags: u32,
    data: *mut u8,
    length: usize,
}

/// What [`Host::service`] hands out: the event's type, its peer, a received packet's bytes.
type Serviced = (i32, *mut c_void, Vec<u8>);

const EVENT_CONNECT: i32 = 1;
const EVENT_RECEIVE: i32 = 3;
const PACKET_FLAG_RELIABLE: u32 = 1;

/// The functions used, resolved once.
struct Enet {
    host_create: unsafe extern "C" fn(*const Address, usize, usize, u32, u32) -> *mut c_void,
    host_destroy: unsafe extern "C" fn(*mut c_void),
    host_connect: unsafe extern "C" fn(*mut c_void, *const Address, usize, u32) -> *mut c_void,
    host_service: unsafe extern "C" fn(*mut c_void, *mut Event, u32) -> i32,
    host_flush: unsafe extern "C" fn(*mut c_void),
    packet_create: unsafe extern "C" fn(*const c_void, usize, u32) -> *mut Packet,
    packet_destroy: unsafe extern "C" fn(*mut Packet),
    peer_send: unsafe extern "C" fn(*mut c_void, u8, *mut Packet) -> i32,
    /// Kept loaded for the process's life: the function pointers above point into it.
    _library: Library,
}

/// The library, loaded and initialized once; the error says how to get it.
fn enet() -> Result<&'static Enet, String> {
    static ENET: OnceLock<Result<Enet, String>> = OnceLock::new();
    ENET.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Enet, String> {
    let missing = |e: libloading::Error| {
        format!("{LIBRARY} not loadable ({e}): install it with apt-get install libenet7")
    };
    // SAFETY: loading ENet runs no initializers with preconditions; the symbols are ENet 1.3's
    // public functions, whose C signatures the field types above transcribe.
    unsafe {
        let library = Library::new(LIBRARY).map_err(missing)?;
        let initialize =
            *library.get::<unsafe extern "C" fn() -> i32>(b"enet_initialize\0").map_err(missing)?;
        if initialize() != 0 {
            return Err("enet_initialize failed".into());
        }
        Ok(Enet {
            host_create: *library.get(b"enet_host_create\0").map_err(missing)?,
            host_destroy: *library.get(b"enet_host_destroy\0").map_err(missing)?,
            host_connect: *library.get(b"enet_host_connect\0").map_err(missing)?,
            host_service: *library.get(b"enet_host_service\0").map_err(missing)?,
            host_flush: *library.get(b"enet_host_flush\0").map_err(missing)?,
            packet_create: *library.get(b"enet_packet_create\0").map_err(missing)?,
            packet_destroy: *library.get(b"enet_packet_destroy\0").map_err(missing)?,
            peer_send: *library.get(b"enet_peer_send\0").map_err(missing)?,
            _library: library,
        })
    }
}

/// Whether ENet can run here; what to install when it cannot.
pub fn available() -> Result<(), String> {
    enet().map(|_| ())
}

/// An ENet host, destroyed on drop. Used from one thread at a time (ENet hosts are not
/// thread-safe; they may move between threads).
struct Host {
    enet: &'static Enet,
    host: *mut c_void,
}

// SAFETY: a host is used by one thread at a time (it moves into the server's thread and stays).
unsafe impl Send for Host {}

impl Host {
    /// A server host bound to `bind`, or a client host on a port of the OS's (`None`).
    fn new(bind: Option<Address>, peers: usize) -> Result<Self, String> {
        let enet = enet()?;
        let address = bind.as_ref().map_or(std::ptr::null(), |a| a as *const Address);
        // SAFETY: `address` is null or points at a live Address for the call.
        let host = unsafe { (enet.host_create)(address, peers, 1, 0, 0) };
        if host.is_null() {
            return Err("enet_host_create failed".into());
        }
        Ok(Self { enet, host })
    }

    /// The next event within `timeout_ms`, if any; a received packet's bytes are copied out
    /// and the packet freed.
    fn service(&mut self, timeout_ms: u32) -> Result<Option<Serviced>, String> {
        let mut event = Event {
            kind: 0,
            peer: std::ptr::null_mut(),
            channel: 0,
            data: 0,
            packet: std::ptr::null_mut(),
        };
        // SAFETY: `self.host` is a live host and `event` a valid ENetEvent to write.
        let got = unsafe { (self.enet.host_service)(self.host, &mut event, timeout_ms) };
        if got < 0 {
            return Err("enet_host_service failed".into());
        }
        if got == 0 {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        if event.kind == EVENT_RECEIVE && !event.packet.is_null() {
            // SAFETY: ENet hands over a live packet whose `data` holds `length` bytes; it is
            // ours to destroy once read.
            unsafe {
                let packet = &*event.packet;
                bytes.extend_from_slice(std::slice::from_raw_parts(packet.data, packet.length));
                (self.enet.packet_destroy)(event.packet);
            }
        }
        Ok(Some((event.kind, event.peer, bytes)))
    }

    /// Sends `bytes` reliably on channel 0 to `peer` and flushes at once.
    fn send(&mut self, peer: *mut c_void, bytes: &[u8]) -> bool {
        // SAFETY: `bytes` is valid for the copy ENet makes; `peer` came from this host; a
        // packet ENet refused is still ours to destroy.
        unsafe {
            let packet =
                (self.enet.packet_create)(bytes.as_ptr().cast(), bytes.len(), PACKET_FLAG_RELIABLE);
            if packet.is_null() {
                return false;
            }
            if (self.enet.peer_send)(peer, 0, packet) != 0 {
                (self.enet.packet_destroy)(packet);
                return false;
            }
            (self.enet.host_flush)(self.host);
        }
        true
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // SAFETY: the host is live and dropped once.
        unsafe { (self.enet.host_destroy)(self.host) }
    }
}

fn address(at: SocketAddr) -> Result<Address, String> {
    match at {
        SocketAddr::V4(v4) => {
            Ok(Address { host: u32::from_ne_bytes(v4.ip().octets()), port: v4.port() })
        }
        SocketAddr::V6(_) => Err("ENet 1.3 speaks IPv4 only".into()),
    }
}

/// A port for the server: ENet binds the address it is given, so ask the OS for a free one.
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub fn server() -> Result<Server, Box<dyn Error>> {
    let at = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let mut host = Host::new(Some(address(at)?), 4)?;
    Ok(Server::spawn(at, move |stop: &AtomicBool| {
        while !stop.load(Ordering::Relaxed) {
            while let Some((kind, peer, bytes)) = host.service(1)? {
                if kind == EVENT_RECEIVE {
                    host.send(peer, &bytes);
                }
            }
        }
        Ok(())
    })?)
}

pub struct EnetClient {
    host: Host,
    peer: *mut c_void,
    clock: Clock,
}

pub fn client(to: SocketAddr, clock: &Clock) -> Result<EnetClient, Box<dyn Error>> {
    let mut host = Host::new(None, 1)?;
    let to = address(to)?;
    // SAFETY: the host is live and `to` a valid address for the call.
    let peer = unsafe { (host.enet.host_connect)(host.host, &to, 1, 0) };
    if peer.is_null() {
        return Err("enet_host_connect failed".into());
    }
    let deadline = clock.now() + CONNECT_TIMEOUT;
    loop {
        if let Some((EVENT_CONNECT, _, _)) = host.service(5)? {
            break;
        }
        if clock.now() >= deadline {
            return Err("enet: no connection within 10 s".into());
        }
    }
    Ok(EnetClient { host, peer, clock: *clock })
}

impl Client for EnetClient {
    fn send(&mut self, payload: &[u8]) -> Result<bool, Box<dyn Error>> {
        Ok(self.host.send(self.peer, payload))
    }

    fn poll(
        &mut self,
        until: Instant,
        echoes: &mut Vec<(u32, Instant)>,
    ) -> Result<(), Box<dyn Error>> {
        while self.clock.now() < until {
            if let Some((EVENT_RECEIVE, _, bytes)) = self.host.service(1)? {
                if let Some(index) = index_of(&bytes) {
                    echoes.push((index, self.clock.now()));
                }
            }
        }
        Ok(())
    }
}
