//! A UDP socket driving one [`Endpoint`].

use crate::batch::Batch;
use crate::clock::Clock;
use crate::host::telemetry::{Scope, ScopeClock};
use rally_proto::{ConnectToken, ConnectionHandle, Endpoint, EndpointConfig, Event, Instant};
use rally_proto::{EndpointRandomness, Security, TokenError, TokenKey};
use std::io;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

/// The longest a receive may block, so that the loop notices new sends and deadlines.
const WAIT_MAX: Duration = Duration::from_millis(50);
/// Datagrams read per wake-up at most before timers and transmissions get a turn.
const RECEIVE_BATCH: usize = 32;
/// Datagrams written per syscall at most.
const SEND_BATCH: usize = 32;
/// Batches [`UdpDriver::pump_arrivals`] reads in one turn at most: everything waiting after a
/// frame's pause, but never an unbounded loop under a flood (the rest waits for the next turn).
const PUMP_BATCHES_MAX: usize = 16;

/// Datagrams and bytes through a socket. Outgoing ones are counted as handed to the socket
/// (those it refused are `send_errors` as well); incoming oversized ones count as datagrams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Datagrams read.
    pub datagrams_in: u64,
    /// Bytes read (UDP payloads).
    pub bytes_in: u64,
    /// Datagrams handed to the socket.
    pub datagrams_out: u64,
    /// Bytes handed to the socket (UDP payloads).
    pub bytes_out: u64,
    /// Receive syscalls (`recvmmsg` or `recv_from`).
    pub reads: u64,
    /// Receive syscalls that found nothing: a loop that looks more often than datagrams come.
    pub empty_reads: u64,
    /// Send syscalls (`sendmmsg` or `send_to`): `datagrams_out / sends` is the batch size.
    pub sends: u64,
    /// Sleeps [`UdpDriver::run_batched`] took: each ends in a wake-up (a context switch and a
    /// timer).
    pub sleeps: u64,
}

/// One UDP socket and its endpoint, with the OS clock.
#[derive(Debug)]
pub struct UdpDriver {
    socket: UdpSocket,
    endpoint: Endpoint,
    clock: Clock,
    received: Batch,
    to_send: Batch,
    /// Datagrams built into `to_send` and not sent yet (see [`UdpDriver::stage`]).
    staged: usize,
    /// Datagrams the socket refused to send (counted, then dropped like a lost packet).
    pub send_errors: u64,
    /// Datagrams received too long for any Rally packet or from an unknown address family
    /// (counted, then dropped).
    pub oversized: u64,
    /// Datagrams and bytes read from and written to the socket (plain adds on the worker's
    /// thread; a host publishes them with its report).
    pub traffic: Traffic,
    /// When a read last left the socket empty: whatever a later read finds arrived after it,
    /// so an arrival stamp is never taken for earlier than this (nor later than the read),
    /// whatever the wall clock did meanwhile.
    emptied_at: Instant,
    /// Whether reads stamp arrivals ([`UdpDriver::stamp_arrivals`]).
    stamped: bool,
    /// The clock's reading as the last read returned: the time its datagrams were handled
    /// at, unless stamped.
    read_at: Instant,
    /// How long before a deadline `run_for` stops sleeping and polls instead (0: never).
    spin: Duration,
    /// Where the socket's receive and send syscalls are timed, if anywhere.
    scopes: Option<Arc<ScopeClock>>,
    /// The longest single sleep of `run_batched`.
    sleep_step: Duration,
    /// The last wait the loop took while it had nothing to do: when it began and when the
    /// thread was running again (see [`UdpDriver::last_sleep`]).
    last_sleep: Option<Sleep>,
}

/// One wait of a driver's loop with nothing to do: from the moment it went to sleep to the
/// moment it ran again (after every step of a stepped sleep).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sleep {
    /// When the thread went to sleep.
    pub from: Instant,
    /// When it was running again.
    pub woke: Instant,
}

impl UdpDriver {
    /// Binds a socket at `address` (port 0 picks one) with an endpoint whose secrets come from
    /// the OS's randomness, so that no two servers share a cookie secret. Fails if the OS gives
    /// no randomness (a server never starts with a guessable secret) or `config` is invalid.
    pub fn bind(address: impl ToSocketAddrs, config: EndpointConfig) -> io::Result<Self> {
        Self::bind_with(address, |_, _| config)
    }

    /// Binds a server that lets in only holders of connect tokens sealed with `key` for
    /// `protocol_id` that name the bound address, and seals every packet.
    pub fn bind_secure(
        address: impl ToSocketAddrs,
        config: EndpointConfig,
        key: TokenKey,
        protocol_id: u64,
    ) -> io::Result<Self> {
        Self::bind_secure_as(address, None, config, key, protocol_id)
    }

    /// [`UdpDriver::bind_secure`] behind an address mapping (a container's host port, a
    /// node's address): tokens must name `public`, where clients reach this socket, instead
    /// of the bound address; `None` is the bound address.
    pub fn bind_secure_as(
        address: impl ToSocketAddrs,
        public: Option<SocketAddr>,
        config: EndpointConfig,
        key: TokenKey,
        protocol_id: u64,
    ) -> io::Result<Self> {
        Self::bind_with(address, |local, clock| {
            let security = Security::Tokens {
                key,
                protocol_id,
                address: public.unwrap_or(local),
                unix_at_zero: unix_at_zero(clock),
            };
            EndpointConfig { security, ..config }
        })
    }

    fn bind_with(
        address: impl ToSocketAddrs,
        config: impl FnOnce(SocketAddr, &Clock) -> EndpointConfig,
    ) -> io::Result<Self> {
        let socket = UdpSocket::bind(address)?;
        // Reads never block: the loop waits on `wait::readable`, which keeps time precisely.
        socket.set_nonblocking(true)?;
        let clock = Clock::start();
        let local = socket.local_addr()?;
        let config = config(local, &clock);
        Ok(Self {
            socket,
            endpoint: Endpoint::new(config, randomness()?)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
            clock,
            received: Batch::new(RECEIVE_BATCH),
            to_send: Batch::new(SEND_BATCH),
            staged: 0,
            send_errors: 0,
            oversized: 0,
            traffic: Traffic::default(),
            emptied_at: Instant::ZERO,
            stamped: false,
            read_at: Instant::ZERO,
            spin: Duration::ZERO,
            scopes: None,
            sleep_step: Duration::MAX,
            last_sleep: None,
        })
    }

    /// The socket, to wait on it from another thread (`readable_fds`) while this driver is
    /// locked elsewhere.
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// The endpoint, to send on connections or read their stats.
    pub fn endpoint(&mut self) -> &mut Endpoint {
        &mut self.endpoint
    }

    /// The driver's clock.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// A copy of the driver's clock, for timestamps taken inside an event callback.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Makes `run_for` sleep until `spin` before its deadline and poll the socket for the
    /// rest, so that it returns on time rather than when the OS wakes it (a sleeping thread
    /// can wake a millisecond late; a frame or a tick that starts late shows in latency). The
    /// cost is the CPU of the spin; a tick loop at 120 Hz spinning 1 ms uses 12% of a core.
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    /// Times the socket's syscalls into `scopes` ([`Scope::Receive`] for reads, polls that
    /// find nothing included; [`Scope::Send`] for writes).
    pub fn set_scopes(&mut self, scopes: Arc<ScopeClock>) {
        self.scopes = Some(scopes);
    }

    /// Starts connecting to `server`, in plaintext (a server bound with [`UdpDriver::bind`]
    /// and `Security::DangerPlaintext`).
    pub fn connect(&mut self, server: SocketAddr) -> ConnectionHandle {
        let now = self.clock.now();
        self.endpoint.connect(now, server)
    }

    /// Starts connecting with a connect token to the first server it names.
    pub fn connect_with_token(
        &mut self,
        token: ConnectToken,
    ) -> Result<ConnectionHandle, TokenError> {
        let now = self.clock.now();
        self.endpoint.connect_with_token(now, token)
    }

    /// Runs the loop for `duration`: datagrams in, timers, datagrams out, and every event to
    /// `on_event`, which may call the endpoint (to send, say) before the loop goes on.
    pub fn run_for(
        &mut self,
        duration: Duration,
        mut on_event: impl FnMut(&mut Endpoint, ConnectionHandle, Event),
    ) -> io::Result<()> {
        crate::precise_timers();
        let deadline = self.clock.now() + duration;
        loop {
            self.flush(&mut on_event)?;
            let now = self.clock.now();
            if now >= deadline {
                return Ok(());
            }
            let wake = self.endpoint.poll_timeout().unwrap_or(deadline).min(deadline);
            if deadline - now <= self.spin {
                // The last stretch: poll without sleeping, so as to return on time.
                self.poll_receive()?;
            } else {
                let spin_from = deadline.as_nanos().saturating_sub(self.spin.as_nanos() as u64);
                let sleep_until = wake.min(Instant::from_nanos(spin_from));
                let wait = (sleep_until - now).min(WAIT_MAX);
                let readable = crate::wait::readable(&self.socket, wait)?;
                self.last_sleep = Some(Sleep { from: now, woke: self.clock.now() });
                if readable {
                    self.poll_receive()?;
                }
            }
            let now = self.clock.now();
            self.endpoint.handle_timeout(now);
        }
    }

    /// One turn without waiting: reads what datagrams are ready (a batch at most), runs due
    /// timers, sends what is due and hands out the events. For loops that serve many drivers
    /// from one thread (bots) and keep their own time.
    pub fn pump(
        &mut self,
        mut on_event: impl FnMut(&mut Endpoint, ConnectionHandle, Event),
    ) -> io::Result<()> {
        self.poll_receive()?;
        let now = self.clock.now();
        self.endpoint.handle_timeout(now);
        self.flush(&mut on_event)
    }

    /// Makes each read hand every datagram to the endpoint at the time the kernel received it
    /// (`SO_TIMESTAMPNS` on Linux) rather than at the time of the read. A loop that waits on
    /// the socket reads datagrams as they come and needs none of it; one that reads once a
    /// frame ([`UdpDriver::pump_arrivals`], a game's) would otherwise add up to a frame to
    /// every round trip it measures. Elsewhere than on Linux the read's time stands in.
    pub fn stamp_arrivals(&mut self) -> io::Result<()> {
        self.received.stamp_arrivals(&self.socket)?;
        self.stamped = true;
        Ok(())
    }

    /// One turn without waiting, for a loop that runs once a frame (a game's): reads every
    /// datagram waiting (up to `PUMP_BATCHES_MAX` batches), each handed to the endpoint at its
    /// arrival time (with [`UdpDriver::stamp_arrivals`]) and its events to `on_event` with that
    /// time; then runs due timers, sends what is due and hands out the rest of the events with
    /// the time of the turn.
    pub fn pump_arrivals(
        &mut self,
        mut on_event: impl FnMut(Instant, &mut Endpoint, ConnectionHandle, Event),
    ) -> io::Result<()> {
        for _ in 0..PUMP_BATCHES_MAX {
            let read = self.poll_receive_each(|at, endpoint| {
                while let Some((handle, event)) = endpoint.poll_event() {
                    on_event(at, endpoint, handle, event);
                }
            })?;
            if read < RECEIVE_BATCH {
                break;
            }
        }
        let now = self.clock.now();
        self.endpoint.handle_timeout(now);
        self.flush(&mut |endpoint, handle, event| on_event(now, endpoint, handle, event))
    }

    /// Like [`UdpDriver::run_for`], but wakes only for the endpoint's timers and the deadline,
    /// not for each datagram: whatever arrived meanwhile is read in one go at the next wake.
    /// A datagram then waits up to the next timer or deadline; in exchange a busy server
    /// wakes once per tick instead of once per datagram, which costs a context switch and a
    /// timer each. For servers whose rooms answer inputs only at their ticks (the greedy
    /// pipeline), the wait changes nothing a client sees. Each event goes to `on_event` with
    /// its time: a read's events right after it, with the time its datagrams were handled at
    /// (the read's; with [`UdpDriver::stamp_arrivals`], the read's too, not each arrival's);
    /// the timers' with the time they ran at.
    pub fn run_batched(
        &mut self,
        duration: Duration,
        on_event: impl FnMut(Instant, &mut Endpoint, ConnectionHandle, Event),
    ) -> io::Result<()> {
        let deadline = self.clock.now() + duration;
        self.run_batched_until(deadline, on_event).map(|_| ())
    }

    /// [`UdpDriver::run_batched`] until `deadline` (on the driver's clock), for a caller that
    /// has just read the clock; returns the clock's reading at which it stopped (at or past
    /// the deadline), for the caller's next step to start from rather than read it again.
    pub fn run_batched_until(
        &mut self,
        deadline: Instant,
        mut on_event: impl FnMut(Instant, &mut Endpoint, ConnectionHandle, Event),
    ) -> io::Result<Instant> {
        crate::precise_timers();
        loop {
            // Everything that arrived, a batch at a time, but not past the deadline: a burst of
            // datagrams must not hold a tick back (the rest is read right after it). A batch's
            // events go out right after it, at its datagrams' time: no clock read per event.
            loop {
                let read = self.poll_receive_each(|_, _| {})?;
                let at = self.read_at;
                while let Some((handle, event)) = self.endpoint.poll_event() {
                    on_event(at, &mut self.endpoint, handle, event);
                }
                if read < RECEIVE_BATCH || self.clock.now() >= deadline {
                    break;
                }
            }
            let now = self.clock.now();
            self.endpoint.handle_timeout(now);
            self.flush(&mut |endpoint, handle, event| on_event(now, endpoint, handle, event))?;
            let now = self.clock.now();
            if now >= deadline {
                return Ok(now);
            }
            if deadline - now <= self.spin {
                // The last stretch: look again without sleeping, so as to return on time.
                continue;
            }
            let spin_from = Instant::from_nanos(deadline.as_nanos() - self.spin.as_nanos() as u64);
            // Not `poll_timeout`: a keepalive timer left early when its deadline moved later
            // would wake the worker for nothing (one per connection per keepalive interval).
            let wake = self.endpoint.next_wake(deadline).min(spin_from);
            self.sleep_until(now, wake.min(now + WAIT_MAX));
        }
    }

    /// Sleeps from `from` (the clock's reading now) until `wake`, in steps over its last
    /// stretch (see [`UdpDriver::set_sleep_step`]) but without looking at the socket in
    /// between: [`UdpDriver::run_batched`] reads only at its wake-ups, so a read after each
    /// step would be a syscall that finds nothing or something that can wait until `wake`.
    ///
    /// One clock read a sleep: the reading after each step is both the next step's start and,
    /// after the last, the wake-up's time.
    fn sleep_until(&mut self, from: Instant, wake: Instant) {
        let mut now = from;
        loop {
            let wait = stepped(wake.saturating_duration_since(now), self.sleep_step);
            if wait.is_zero() {
                break;
            }
            std::thread::sleep(wait);
            self.traffic.sleeps += 1;
            now = self.clock.now();
        }
        if now != from {
            self.last_sleep = Some(Sleep { from, woke: now });
        }
    }

    /// The last time the loop slept with nothing to do ([`UdpDriver::run_batched`]'s sleep,
    /// all its steps as one; [`UdpDriver::run_for`]'s wait on the socket): a tick that
    /// starts late after it was late by this much for the thread's wake-up, and by the rest
    /// for work (see `host::telemetry::split_lateness`).
    pub fn last_sleep(&self) -> Option<Sleep> {
        self.last_sleep
    }

    /// Makes [`UdpDriver::run_batched`] sleep at most `step` at a time over the last
    /// [`STEPPED_STRETCH`] (2 ms) before a wake-up (before that, in one go). On virtual
    /// machines a core that stays idle longer than the hypervisor's halt-polling window (a few
    /// hundred microseconds) can be handed to another guest, and its timer then fires late;
    /// waking every `step` near a deadline is meant to keep it, at the CPU of each wake-up.
    /// A step of [`STEPPED_STRETCH`] or more (the default, `Duration::MAX`): no steps, one
    /// sleep straight to the wake-up.
    pub fn set_sleep_step(&mut self, step: Duration) {
        self.sleep_step = step;
    }

    /// Sends what the endpoint has to send now, without reading the socket or handing out
    /// events (they wait for the next turn): for a thread that queued an input on a session
    /// another thread pumps, and wants it out at once rather than at that thread's next wake.
    /// Returns how many datagrams it handed to the socket.
    pub fn transmit(&mut self) -> io::Result<usize> {
        let total = self.stage()?;
        let staged = std::mem::take(&mut self.staged);
        self.send_queued(staged)?;
        Ok(total)
    }

    /// Builds what the endpoint has to send now into the send batch, and sends the batch only
    /// when it is full; [`UdpDriver::transmit`] sends the rest. For a worker ticking rooms in a
    /// row: each room's datagrams are built (and sealed) while what its tick wrote is still in
    /// the core's caches, and still go out in full batches. Returns how many it built.
    pub fn stage(&mut self) -> io::Result<usize> {
        let now = self.clock.now();
        let mut total = 0;
        while let Some(t) = self.endpoint.poll_transmit(now, self.to_send.slot_mut(self.staged)) {
            self.to_send.set(self.staged, t.len, t.destination);
            self.traffic.datagrams_out += 1;
            self.traffic.bytes_out += t.len as u64;
            self.staged += 1;
            total += 1;
            if self.staged == SEND_BATCH {
                let staged = std::mem::take(&mut self.staged);
                self.send_queued(staged)?;
            }
        }
        Ok(total)
    }

    /// Sends what the endpoint has to send and hands out its events, until both are empty.
    fn flush(
        &mut self,
        on_event: &mut impl FnMut(&mut Endpoint, ConnectionHandle, Event),
    ) -> io::Result<()> {
        loop {
            let mut busy = self.transmit()? > 0;
            while let Some((handle, event)) = self.endpoint.poll_event() {
                busy = true;
                on_event(&mut self.endpoint, handle, event);
            }
            if !busy {
                return Ok(());
            }
        }
    }

    /// Reads whatever datagrams are ready, up to a batch, without waiting; returns how many.
    fn poll_receive(&mut self) -> io::Result<usize> {
        self.poll_receive_each(|_, _| {})
    }

    /// [`UdpDriver::poll_receive`], calling `after_each` with the endpoint after each datagram
    /// it handled, and the time it was handled at.
    fn poll_receive_each(
        &mut self,
        mut after_each: impl FnMut(Instant, &mut Endpoint),
    ) -> io::Result<usize> {
        let started = self.scopes.as_ref().map(|_| self.clock.now());
        let mut received = self.received.receive(&self.socket);
        if received.as_ref().is_err_and(is_transient) {
            // An error about an earlier send (an ICMP unreachable) is reported once; read on.
            received = self.received.receive(&self.socket);
        }
        // The read's end is the batch's time too: one clock read for both.
        let now = self.clock.now();
        self.read_at = now;
        self.time_until(Scope::Receive, started, now);
        let read = match received {
            Ok(read) => read,
            Err(e) if is_transient(&e) => 0,
            Err(e) => return Err(e),
        };
        self.traffic.reads += 1;
        self.traffic.empty_reads += u64::from(read == 0);
        let unix_now = if self.stamped { unix_nanos() } else { 0 };
        let emptied_at = self.emptied_at;
        if read < self.received.slots() {
            self.emptied_at = now;
        }
        self.traffic.datagrams_in += read as u64;
        // Every datagram's connection asked for before the first is handled: their misses
        // overlap (`Endpoint::prefetch`).
        for k in 0..read {
            if let (Some(from), _) = self.received.datagram(k) {
                self.endpoint.prefetch(from);
            }
        }
        for k in 0..read {
            let at = match self.received.arrival(k) {
                // The stamp is on the wall clock; how long ago it was is the same on ours.
                Some(stamp) => {
                    let ago = unix_now.saturating_sub(stamp);
                    Instant::from_nanos(now.as_nanos().saturating_sub(ago)).clamp(emptied_at, now)
                }
                None => now,
            };
            match self.received.datagram(k) {
                (Some(from), bytes) => {
                    self.traffic.bytes_in += bytes.len() as u64;
                    self.endpoint.handle_datagram(at, from, bytes);
                    after_each(at, &mut self.endpoint);
                }
                // Longer than any Rally packet, or from an address family Rally does not
                // speak: dropped and counted.
                (None, _) => self.oversized += 1,
            }
        }
        Ok(read)
    }

    /// Sends the first `count` datagrams of the batch, as few syscalls as the kernel allows.
    fn send_queued(&mut self, count: usize) -> io::Result<()> {
        let mut from = 0;
        while from < count {
            let started = self.scopes.as_ref().map(|_| self.clock.now());
            let sent = self.to_send.send(&self.socket, from, count);
            self.time(Scope::Send, started);
            self.traffic.sends += 1;
            match sent {
                Ok(sent) if sent > 0 => from += sent,
                // A full socket buffer or an unreachable peer is a lost packet, not a reason
                // to stop; the protocol recovers from losses. That datagram is dropped; the
                // rest go on.
                Err(e) if is_transient(&e) => {
                    self.send_errors += 1;
                    from += 1;
                }
                Err(e) => return Err(e),
                Ok(_) => {
                    self.send_errors += 1;
                    from += 1;
                }
            }
        }
        Ok(())
    }

    /// Adds the time since `started` to `scope`, when timing.
    fn time(&self, scope: Scope, started: Option<Instant>) {
        if started.is_some() {
            self.time_until(scope, started, self.clock.now());
        }
    }

    /// Adds the time from `started` to `now` (a reading the caller took) to `scope`, when
    /// timing.
    fn time_until(&self, scope: Scope, started: Option<Instant>, now: Instant) {
        if let (Some(scopes), Some(started)) = (&self.scopes, started) {
            scopes.add(scope, now.as_nanos().saturating_sub(started.as_nanos()));
        }
    }
}

/// How long before a wake-up [`UdpDriver::run_batched`] sleeps in steps: more than a late
/// wake-up from a long sleep takes (about a millisecond measured here), so that it still
/// lands before the deadline. A sleep step this long or longer means no steps.
pub const STEPPED_STRETCH: Duration = Duration::from_millis(2);

/// One sleep toward a wake-up `wait` away: all but the last stretch in one go, then `step`s;
/// a step as long as the stretch or longer: all of it in one go.
fn stepped(wait: Duration, step: Duration) -> Duration {
    if step >= STEPPED_STRETCH {
        wait
    } else if wait > STEPPED_STRETCH {
        wait - STEPPED_STRETCH
    } else {
        wait.min(step)
    }
}

/// Errors a UDP socket reports about one datagram (an ICMP unreachable from an earlier send,
/// a full buffer) rather than about itself.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::Interrupted
    )
}

/// The endpoint's secrets, from the OS's randomness: the cookie secret takes 16 bytes of its
/// own. An OS that gives none is an error, never a guessable fallback (a cookie key an attacker
/// can guess lets it forge handshakes from any address).
fn randomness() -> io::Result<EndpointRandomness> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).map_err(|e| {
        io::Error::other(format!("the OS gave no randomness for the endpoint's secrets: {e}"))
    })?;
    let (seed, cookie_secret) = bytes.split_at(8);
    Ok(EndpointRandomness {
        seed: u64::from_le_bytes(seed.try_into().expect("eight bytes")),
        cookie_secret: cookie_secret.try_into().expect("sixteen bytes"),
    })
}

#[allow(clippy::disallowed_methods)] // Reading the wall clock is the driver's job.
pub(crate) fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Unix seconds at `clock`'s zero, for checking token expiry on its time.
fn unix_at_zero(clock: &Clock) -> u64 {
    unix_nanos().saturating_sub(clock.now().as_nanos()) / 1_000_000_000
}

#[cfg(test)]
mod tests {
    use super::{stepped, STEPPED_STRETCH};
    use std::time::Duration;

    #[test]
    fn a_sleep_steps_only_over_the_last_stretch_and_a_step_as_long_as_it_means_none() {
        // Goal: the sleep policy a host's `sleep_step` sets. Method: the next sleep for waits
        // before and inside the stretch, with steps of 200 us, of the stretch itself and of
        // `Duration::MAX`.
        let us = Duration::from_micros;
        let step = us(200);
        assert_eq!(stepped(us(5_000), step), us(3_000), "all but the stretch in one go");
        assert_eq!(stepped(us(1_500), step), step, "then steps");
        assert_eq!(stepped(us(150), step), us(150), "the last step ends at the wake-up");
        assert_eq!(stepped(Duration::ZERO, step), Duration::ZERO);
        for none in [STEPPED_STRETCH, us(5_000), Duration::MAX] {
            assert_eq!(stepped(us(5_000), none), us(5_000), "{none:?}: one sleep");
            assert_eq!(stepped(us(1_500), none), us(1_500), "{none:?}: no step in the stretch");
        }
        assert_eq!(stepped(us(1_500), us(1_999)), us(1_500).min(us(1_999)));
        assert_eq!(stepped(us(1_999), us(1_999)), us(1_999));
        assert_eq!(stepped(us(2_500), us(1_999)), us(500), "just under the stretch steps");
    }
}
