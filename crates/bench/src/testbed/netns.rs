//! Two network namespaces joined through a link emulator: for peers a UDP relay cannot carry,
//! the kernel's TCP above all, which must see real loss and reordering of its own segments.
//!
//! [`TunLink::start`] creates namespaces `<tag>-a` and `<tag>-b`, a TUN device in each
//! (`10.77.1.1/24` in a, `10.77.2.1/24` in b, each routing the other's subnet through its
//! device), and a relay thread that reads each IP packet from one device, passes it through
//! the direction's [`rally_netem::Link`] and writes it into the other. A thread enters a
//! namespace with [`TunLink::spawn_in`]; sockets it opens live there. Dropping the link stops
//! the relay and deletes both namespaces, devices included: nothing is left behind.
//!
//! Linux only, as root (creating namespaces needs CAP_SYS_ADMIN), with iproute2's `ip`.

#![allow(unsafe_code)] // setns and the TUN ioctl: each call says what makes it sound

use super::relay::{Links, Port, RelayStats, Running};
use rally_netem::LinkConfig;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::thread::JoinHandle;

/// The client's end: namespace a's address.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 1);
/// The server's end: namespace b's address.
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 2, 1);

/// Which namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client's, [`CLIENT_IP`].
    A,
    /// The server's, [`SERVER_IP`].
    B,
}

/// Two namespaces and the relay between them.
#[derive(Debug)]
pub struct TunLink {
    names: [String; 2],
    running: Option<Running>,
}

impl TunLink {
    /// Creates the namespaces `<tag>-a` and `<tag>-b` (removing stale ones of those names
    /// first), their TUN devices and addresses, and starts relaying: `up` from a to b, `down`
    /// back, seeded from `seed`.
    pub fn start(tag: &str, up: LinkConfig, down: LinkConfig, seed: u64) -> io::Result<Self> {
        let names = [format!("{tag}-a"), format!("{tag}-b")];
        let mut link = Self { names: names.clone(), running: None };
        for name in &names {
            // A namespace left by a run that was killed: remove it, ignoring "not found".
            let _ = Command::new("ip").args(["netns", "del", name]).output();
            ip(&["netns", "add", name])?;
        }
        let a = open_tun_in(&names[0], "rtun0")?;
        let b = open_tun_in(&names[1], "rtun0")?;
        configure(&names[0], CLIENT_IP, SERVER_IP)?;
        configure(&names[1], SERVER_IP, CLIENT_IP)?;
        link.running = Some(Running::spawn(Tun(a), Tun(b), Links::new(up, down, seed))?);
        Ok(link)
    }

    /// Runs `task` on a new thread inside namespace `side`.
    pub fn spawn_in<T: Send + 'static>(
        &self,
        side: Side,
        task: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<JoinHandle<io::Result<T>>> {
        let name = self.names[side as usize].clone();
        std::thread::Builder::new().name(format!("rally-in-{name}")).spawn(move || {
            enter(&name)?;
            Ok(task())
        })
    }

    /// What the relay has applied so far.
    pub fn stats(&self) -> RelayStats {
        self.running.as_ref().map(Running::stats).unwrap_or_default()
    }

    /// Stops the relay and deletes the namespaces; what the relay applied.
    pub fn stop(mut self) -> io::Result<RelayStats> {
        let stats = self.stats();
        self.shut()?;
        Ok(stats)
    }

    fn shut(&mut self) -> io::Result<()> {
        let relayed = self.running.take().map_or(Ok(()), |mut running| running.shut());
        for name in &self.names {
            let _ = Command::new("ip").args(["netns", "del", name]).output();
        }
        relayed
    }
}

impl Drop for TunLink {
    fn drop(&mut self) {
        let _ = self.shut();
    }
}

/// A TUN device's file: one IP packet per read and per write.
struct Tun(File);

impl Port for Tun {
    fn fd(&self) -> i32 {
        self.0.as_raw_fd()
    }

    fn receive(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self.0.read(buf) {
            Ok(len) => Ok(Some(len)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        // A refused write is a lost packet, as on a network.
        let _ = self.0.write(bytes);
    }
}

/// Runs `ip args`, turning a failure into an error that quotes it.
fn ip(args: &[&str]) -> io::Result<()> {
    let output = Command::new("ip").args(args).output().map_err(|e| {
        io::Error::new(e.kind(), format!("running ip (iproute2) failed: {e}; install iproute2"))
    })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(io::Error::other(format!("ip {}: {}", args.join(" "), stderr.trim())));
    }
    Ok(())
}

/// Addresses namespace `name`'s device and routes `peer`'s subnet through it.
fn configure(name: &str, own: Ipv4Addr, peer: Ipv4Addr) -> io::Result<()> {
    let own = format!("{own}/24");
    let [a, b, c, _] = peer.octets();
    let subnet = format!("{a}.{b}.{c}.0/24");
    ip(&["-n", name, "link", "set", "lo", "up"])?;
    ip(&["-n", name, "addr", "add", &own, "dev", "rtun0"])?;
    ip(&["-n", name, "link", "set", "rtun0", "up"])?;
    ip(&["-n", name, "route", "add", &subnet, "dev", "rtun0"])
}

/// Moves the calling thread into namespace `name`.
fn enter(name: &str) -> io::Result<()> {
    let file = File::open(format!("/var/run/netns/{name}"))?;
    // SAFETY: setns takes a namespace file descriptor, valid for the call, and affects only
    // the calling thread's network namespace.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Creates TUN device `device` inside namespace `name` (from a thread that enters it, so that
/// the device belongs there) and returns its non-blocking file.
fn open_tun_in(name: &str, device: &'static str) -> io::Result<File> {
    let name = name.to_string();
    std::thread::spawn(move || {
        enter(&name)?;
        open_tun(device)
    })
    .join()
    .map_err(|_| io::Error::other("the thread opening a TUN device panicked"))?
}

fn open_tun(device: &str) -> io::Result<File> {
    let file = File::options().read(true).write(true).open("/dev/net/tun").map_err(|e| {
        io::Error::new(e.kind(), format!("/dev/net/tun: {e} (TUN devices need root)"))
    })?;
    // SAFETY: an all-zero ifreq is a valid value; the name fits IFNAMSIZ with its NUL.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(device.bytes()) {
        *slot = byte as libc::c_char;
    }
    request.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes the ifreq passed, which lives through the call.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut request) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fcntl on an open descriptor we own; O_NONBLOCK only changes how reads wait.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    Ok(file)
}
