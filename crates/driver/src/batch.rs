//! Many datagrams per syscall: `recvmmsg` and `sendmmsg` on Linux, one `recv_from` or
//! `send_to` per datagram elsewhere. A host receives and sends tens of thousands of datagrams
//! a second; each syscall's entry and exit cost more than copying a game packet.

use std::io;
use std::net::{SocketAddr, UdpSocket};

/// The largest datagram a slot holds; longer ones are dropped (Rally's MTU is far below it).
pub const SLOT_BYTES: usize = 2048;

/// Datagrams with their addresses, in one buffer: what one batched syscall reads or writes.
pub struct Batch {
    bytes: Vec<u8>,
    lens: Vec<usize>,
    addresses: Vec<Option<SocketAddr>>,
    /// When the kernel received each datagram read, Unix nanoseconds, where it said.
    arrivals: Vec<Option<u64>>,
    #[cfg(target_os = "linux")]
    raw: linux::Raw,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch").field("slots", &self.lens.len()).finish()
    }
}

impl Batch {
    /// Room for `slots` datagrams.
    pub fn new(slots: usize) -> Self {
        Self {
            bytes: vec![0; slots * SLOT_BYTES],
            lens: vec![0; slots],
            addresses: vec![None; slots],
            arrivals: vec![None; slots],
            #[cfg(target_os = "linux")]
            raw: linux::Raw::new(slots),
        }
    }

    /// Slots in all.
    pub fn slots(&self) -> usize {
        self.lens.len()
    }

    /// Slot `k`'s whole buffer, to write a datagram into.
    pub fn slot_mut(&mut self, k: usize) -> &mut [u8] {
        &mut self.bytes[k * SLOT_BYTES..(k + 1) * SLOT_BYTES]
    }

    /// Marks slot `k` as holding `len` bytes for `to`.
    pub fn set(&mut self, k: usize, len: usize, to: SocketAddr) {
        self.lens[k] = len.min(SLOT_BYTES);
        self.addresses[k] = Some(to);
    }

    /// Datagram `k` as read: its bytes and sender (`None`: an address family Rally does not
    /// speak, or a datagram too long for a slot; such datagrams are to be dropped).
    pub fn datagram(&self, k: usize) -> (Option<SocketAddr>, &[u8]) {
        (self.addresses[k], &self.bytes[k * SLOT_BYTES..k * SLOT_BYTES + self.lens[k]])
    }

    /// When the kernel received datagram `k` as read, Unix nanoseconds: `Some` only after
    /// [`Batch::stamp_arrivals`] on a system that stamps (Linux).
    pub fn arrival(&self, k: usize) -> Option<u64> {
        self.arrivals[k]
    }

    /// Asks the kernel to stamp each datagram `socket` receives with its arrival time
    /// (`SO_TIMESTAMPNS`), which [`Batch::arrival`] then gives: a loop that reads once a
    /// frame still learns when each datagram came. Elsewhere than on Linux, does nothing.
    #[cfg(target_os = "linux")]
    pub fn stamp_arrivals(&mut self, socket: &UdpSocket) -> io::Result<()> {
        linux::stamp_arrivals(self, socket)
    }

    /// Elsewhere than on Linux, arrivals are not stamped: [`Batch::arrival`] stays `None`.
    #[cfg(not(target_os = "linux"))]
    pub fn stamp_arrivals(&mut self, _socket: &UdpSocket) -> io::Result<()> {
        Ok(())
    }

    /// Reads what datagrams are ready, up to every slot, without waiting; returns how many.
    #[cfg(target_os = "linux")]
    pub fn receive(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        linux::receive(self, socket)
    }

    /// Sends slots `from..count`; returns how many went (the first of the rest failed).
    #[cfg(target_os = "linux")]
    pub fn send(&mut self, socket: &UdpSocket, from: usize, count: usize) -> io::Result<usize> {
        linux::send(self, socket, from, count)
    }

    /// Reads what datagrams are ready, up to every slot, without waiting; returns how many.
    #[cfg(not(target_os = "linux"))]
    pub fn receive(&mut self, socket: &UdpSocket) -> io::Result<usize> {
        for k in 0..self.slots() {
            let slot = &mut self.bytes[k * SLOT_BYTES..(k + 1) * SLOT_BYTES];
            match socket.recv_from(slot) {
                Ok((len, from)) => {
                    self.lens[k] = len;
                    self.addresses[k] = Some(from);
                }
                Err(e) if k > 0 && e.kind() == io::ErrorKind::WouldBlock => return Ok(k),
                Err(e) => return Err(e),
            }
        }
        Ok(self.slots())
    }

    /// Sends slots `from..count`; returns how many went (the first of the rest failed).
    #[cfg(not(target_os = "linux"))]
    pub fn send(&mut self, socket: &UdpSocket, from: usize, count: usize) -> io::Result<usize> {
        for k in from..count {
            let (Some(to), bytes) = self.datagram(k) else { return Ok(k - from) };
            if let Err(e) = socket.send_to(bytes, to) {
                return if k == from { Err(e) } else { Ok(k - from) };
            }
        }
        Ok(count - from)
    }
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod linux {
    use super::{Batch, SLOT_BYTES};
    use std::io;
    use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
    use std::os::fd::AsRawFd;

    /// The kernel's view of a batch: headers, vectors and addresses, pointing into it. The
    /// pointers are set right before each call, from the batch as it is then.
    pub(super) struct Raw {
        headers: Vec<libc::mmsghdr>,
        iovecs: Vec<libc::iovec>,
        names: Vec<libc::sockaddr_storage>,
        /// Room for each datagram's control messages (its arrival stamp), when stamping;
        /// `u64`s so that the kernel's `cmsghdr`s are aligned.
        controls: Vec<[u64; CONTROL_WORDS]>,
        stamped: bool,
    }

    /// A control buffer's size in words: a `cmsghdr` and a `timespec`, with room to spare.
    const CONTROL_WORDS: usize = 8;

    impl Raw {
        pub(super) fn new(slots: usize) -> Self {
            Self {
                headers: (0..slots).map(|_| zeroed()).collect(),
                iovecs: (0..slots)
                    .map(|_| libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 })
                    .collect(),
                names: (0..slots).map(|_| zeroed()).collect(),
                controls: Vec::new(),
                stamped: false,
            }
        }
    }

    // SAFETY: the raw pointers in a `Raw` are written right before each syscall, from the
    // batch that owns it, and read only by that syscall; between calls they are never
    // dereferenced, so moving the batch to another thread cannot make one dangle in use.
    unsafe impl Send for Raw {}

    /// A plain C struct with all bytes zero.
    fn zeroed<T: Copy>() -> T {
        // SAFETY: only called for libc's mmsghdr and sockaddr_storage, plain C structs for
        // which all-zero bytes are a valid value.
        unsafe { std::mem::zeroed() }
    }

    /// Points headers `from..count` at the batch's buffers, each `len(k)` long.
    fn point(batch: &mut Batch, from: usize, count: usize, len: impl Fn(&Batch, usize) -> usize) {
        for k in from..count {
            let length = len(batch, k);
            let base = batch.bytes[k * SLOT_BYTES..].as_mut_ptr();
            batch.raw.iovecs[k] = libc::iovec { iov_base: base.cast(), iov_len: length };
            let header = &mut batch.raw.headers[k];
            header.msg_hdr.msg_name =
                (&mut batch.raw.names[k] as *mut libc::sockaddr_storage).cast();
            header.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            header.msg_hdr.msg_iov = &mut batch.raw.iovecs[k];
            header.msg_hdr.msg_iovlen = 1;
            header.msg_hdr.msg_control = std::ptr::null_mut();
            header.msg_hdr.msg_controllen = 0;
            header.msg_hdr.msg_flags = 0;
            header.msg_len = 0;
        }
    }

    pub(super) fn receive(batch: &mut Batch, socket: &UdpSocket) -> io::Result<usize> {
        let slots = batch.slots();
        point(batch, 0, slots, |_, _| SLOT_BYTES);
        // Stamping: each header gets room for its datagram's arrival stamp (sends never do).
        for (header, control) in batch.raw.headers.iter_mut().zip(&mut batch.raw.controls) {
            header.msg_hdr.msg_control = control.as_mut_ptr().cast();
            header.msg_hdr.msg_controllen = std::mem::size_of_val(control) as _;
        }
        // SAFETY: every header points at a live iovec, a live address buffer, SLOT_BYTES of
        // `batch.bytes` and (when stamping) a live control buffer of the length it says, all
        // owned by `batch`, borrowed mutably for the call; the kernel writes at most that much
        // into each and at most `slots` headers.
        let read = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                batch.raw.headers.as_mut_ptr(),
                slots as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if read < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::WouldBlock => Ok(0),
                _ => Err(error),
            };
        }
        let read = read as usize;
        for k in 0..read {
            let header = &batch.raw.headers[k];
            let truncated = header.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            batch.lens[k] = header.msg_len as usize;
            batch.addresses[k] = if truncated { None } else { from_storage(&batch.raw.names[k]) };
            batch.arrivals[k] = if batch.raw.stamped { stamp(&header.msg_hdr) } else { None };
        }
        Ok(read)
    }

    pub(super) fn stamp_arrivals(batch: &mut Batch, socket: &UdpSocket) -> io::Result<()> {
        let on: libc::c_int = 1;
        // SAFETY: SO_TIMESTAMPNS takes an int; `on` lives across the call, its size given.
        let set = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if set < 0 {
            return Err(io::Error::last_os_error());
        }
        batch.raw.controls = vec![[0; CONTROL_WORDS]; batch.slots()];
        batch.raw.stamped = true;
        Ok(())
    }

    /// The arrival stamp among a received datagram's control messages, Unix nanoseconds.
    fn stamp(header: &libc::msghdr) -> Option<u64> {
        // SAFETY: `header` is as recvmmsg left it: its control pointer and length describe
        // the control messages the kernel wrote into the batch's buffer, which the CMSG
        // macros walk without leaving it.
        let mut message = unsafe { libc::CMSG_FIRSTHDR(header) };
        while !message.is_null() {
            // SAFETY: non-null: a complete cmsghdr inside the buffer (CMSG_NXTHDR checks).
            let m = unsafe { &*message };
            let size = std::mem::size_of::<libc::timespec>();
            // SAFETY: CMSG_LEN is arithmetic.
            let len = unsafe { libc::CMSG_LEN(size as u32) } as usize;
            if m.cmsg_level == libc::SOL_SOCKET
                && m.cmsg_type == libc::SCM_TIMESTAMPNS
                && m.cmsg_len as usize >= len
            {
                // SAFETY: the message says it holds a timespec; it may be unaligned.
                let at: libc::timespec =
                    unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(message).cast()) };
                let nanos = i128::from(at.tv_sec) * 1_000_000_000 + i128::from(at.tv_nsec);
                return u64::try_from(nanos).ok();
            }
            // SAFETY: `message` is a control message of `header`'s buffer.
            message = unsafe { libc::CMSG_NXTHDR(header, message) };
        }
        None
    }

    pub(super) fn send(
        batch: &mut Batch,
        socket: &UdpSocket,
        from: usize,
        count: usize,
    ) -> io::Result<usize> {
        if from >= count {
            return Ok(0);
        }
        point(batch, from, count, |b, k| b.lens[k]);
        for k in from..count {
            let name_len = match batch.addresses[k] {
                Some(to) => to_storage(to, &mut batch.raw.names[k]),
                None => 0,
            };
            batch.raw.headers[k].msg_hdr.msg_namelen = name_len;
        }
        // SAFETY: headers `from..count` point at live buffers of `batch` holding `lens[k]`
        // bytes and at addresses of `msg_namelen` bytes; the kernel only reads them.
        let sent = unsafe {
            libc::sendmmsg(
                socket.as_raw_fd(),
                batch.raw.headers[from..].as_mut_ptr(),
                (count - from) as u32,
                0,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(sent as usize)
    }

    /// Writes `address` as the kernel's sockaddr; returns its length.
    fn to_storage(address: SocketAddr, storage: &mut libc::sockaddr_storage) -> u32 {
        match address {
            SocketAddr::V4(a) => {
                let raw = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for every sockaddr.
                unsafe { std::ptr::write((storage as *mut libc::sockaddr_storage).cast(), raw) };
                std::mem::size_of::<libc::sockaddr_in>() as u32
            }
            SocketAddr::V6(a) => {
                let raw = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above.
                unsafe { std::ptr::write((storage as *mut libc::sockaddr_storage).cast(), raw) };
                std::mem::size_of::<libc::sockaddr_in6>() as u32
            }
        }
    }

    /// Reads the kernel's sockaddr; `None` for families other than IPv4 and IPv6.
    fn from_storage(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
        match i32::from(storage.ss_family) {
            libc::AF_INET => {
                // SAFETY: the family says the storage holds a sockaddr_in.
                let raw: libc::sockaddr_in =
                    unsafe { std::ptr::read((storage as *const libc::sockaddr_storage).cast()) };
                let ip = std::net::Ipv4Addr::from(raw.sin_addr.s_addr.to_ne_bytes());
                Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(raw.sin_port))))
            }
            libc::AF_INET6 => {
                // SAFETY: the family says the storage holds a sockaddr_in6.
                let raw: libc::sockaddr_in6 =
                    unsafe { std::ptr::read((storage as *const libc::sockaddr_storage).cast()) };
                let ip = std::net::Ipv6Addr::from(raw.sin6_addr.s6_addr);
                let port = u16::from_be(raw.sin6_port);
                Some(SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    port,
                    raw.sin6_flowinfo,
                    raw.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn addresses_round_trip_through_the_kernels_form() {
            let addresses: [SocketAddr; 3] = [
                "127.0.0.1:7777".parse().unwrap(),
                "[::1]:9".parse().unwrap(),
                "10.1.2.3:65535".parse().unwrap(),
            ];
            for address in addresses {
                // SAFETY: all-zero bytes are a valid sockaddr_storage.
                let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
                to_storage(address, &mut storage);
                assert_eq!(from_storage(&storage), Some(address));
            }
        }
    }
}
