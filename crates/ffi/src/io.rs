//! Who drives a client: the caller's thread (the default), or a thread of the library's own
//! (`RallyConfig::io_thread`) that owns the socket and the session.
//!
//! With the I/O thread, the [`Client`] sits behind a mutex. The thread waits on the socket
//! (`ppoll`, woken at once by a datagram, the endpoint's next timer or an `eventfd` the game
//! thread writes; around the time the game's next input is due, by looking for it instead:
//! [`crate::bell`]), takes the client, runs the inputs and presents the game handed over, reads
//! every datagram waiting, decodes, updates the session, and before letting go publishes a
//! copy of what a frame reads ([`crate::publish`]) and hands the events over a channel. A
//! frame's calls use only those: none takes the lock, so a preempted I/O thread never stalls
//! the game. The calls outside the frame (connect, stats, latency, writes, close) take the
//! client for as long as they need it. An input leaves at once either way: written to the
//! socket by the thread that sends it (`On`, under the lock), or handed over (`Wake`, no
//! lock; a wake only when the I/O thread is not looking for it). A panic or a socket error on
//! the I/O thread stops it and becomes a `Disconnected` event carrying what happened; it never
//! unwinds out of the thread or aborts the game.

use crate::bell::{Bell, InputWindow};
use crate::client::{check_input, instant, Client, Command, Happening, Input};
use crate::error::FfiError;
use crate::publish::{triple, EntitiesOut, Publisher, Reader, View};
use crate::types::{RallyConfig, RallyConnectionStats, RallyIoThread};
use rally_driver::Clock;
use std::net::UdpSocket;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The longest the I/O thread sleeps with nothing to do, so that it notices a stop even if a
/// wake were lost.
const WAIT_MAX: Duration = Duration::from_millis(50);

/// Inputs and presents handed to the I/O thread and not yet taken, at most: two a frame, so
/// more than two seconds of a stalled I/O thread at 90 Hz. The channel's slots are allocated
/// once, at the start: a hand-off writes a slot and allocates nothing.
const COMMANDS_MAX: usize = 512;

/// A client as the C functions drive it.
// Each lives in the `RallyClient` box already: a second box for the plain client would only
// add a pointer to follow on every call.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Driven {
    /// On the caller's thread: `update` does the socket work.
    Plain(Client),
    /// On the library's I/O thread.
    Threaded(IoThread),
}

impl Driven {
    /// A client as `config` asks, its I/O thread started if it asks for one.
    pub(crate) fn new(config: &RallyConfig, bind: Option<&str>) -> Result<Self, FfiError> {
        let path = match config.io_thread {
            t if t == RallyIoThread::Off as u32 => {
                return Ok(Self::Plain(Client::new(config, bind)?))
            }
            t if t == RallyIoThread::On as u32 => InputPath::Now,
            t if t == RallyIoThread::Wake as u32 => InputPath::Wake,
            other => {
                return Err(FfiError::Invalid(format!(
                    "config.io_thread = {other}: not a RallyIoThread"
                )))
            }
        };
        IoThread::start(Client::new(config, bind)?, path).map(Self::Threaded)
    }

    /// Runs `body` on the client (waiting for the I/O thread to let go of it, if it has it).
    pub(crate) fn with<R>(
        &mut self,
        body: impl FnOnce(&mut Client) -> Result<R, FfiError>,
    ) -> Result<R, FfiError> {
        match self {
            Self::Plain(client) => body(client),
            Self::Threaded(io) => body(&mut io.lock()),
        }
    }

    /// Runs `body`, which queues datagrams (an input, a message), and sends them at once.
    pub(crate) fn sending<R>(
        &mut self,
        body: impl FnOnce(&mut Client) -> Result<R, FfiError>,
    ) -> Result<R, FfiError> {
        match self {
            // `update` sends them, right after (the frame's order).
            Self::Plain(client) => body(client),
            Self::Threaded(io) => io.sending(body),
        }
    }

    /// Sends an input sampled at `now_us`: at once on this thread (plain, `On`), or handed to
    /// the I/O thread without waiting for it (`Wake`).
    pub(crate) fn send_input(&mut self, now_us: u64, input: Input) -> Result<(), FfiError> {
        match self {
            Self::Threaded(io) if io.path == InputPath::Wake && io.running() => {
                io.hand_input(now_us, input)
            }
            _ => self.sending(|client| client.send_input(now_us, input).map(drop)),
        }
    }

    /// The frame was shown at `now_us`: told the session here, or handed to the I/O thread
    /// with what the frame's read could show.
    pub(crate) fn present(&mut self, now_us: u64) -> Result<(), FfiError> {
        match self {
            Self::Threaded(io) if io.running() => {
                let (arrived_by, started) = (io.reader.current().arrived_by, io.frame_start);
                // Nothing to wake for: the meter closes the frame at the thread's next turn,
                // with the frame's own times.
                io.command(Command::Present(now_us, arrived_by, started))
            }
            _ => self.with(|client| client.present(now_us)),
        }
    }

    /// How many entities a read gives now.
    pub(crate) fn entity_count(&mut self) -> Result<usize, FfiError> {
        match self {
            Self::Threaded(io) if io.running() => Ok(io.reader.latest().rows.len()),
            _ => self.with(|client| client.entity_count()),
        }
    }

    /// The entities [`Driven::entity_count`] counted, newest or at `at_us`, into `out`.
    pub(crate) fn entities(
        &mut self,
        at_us: Option<u64>,
        out: &mut EntitiesOut<'_>,
    ) -> Result<(), FfiError> {
        match self {
            Self::Threaded(io) if io.running() => {
                io.reader.current().read(at_us.map(instant), out);
                Ok(())
            }
            _ => self.with(|client| client.entities(at_us, |i, entity| out.put(i, entity))),
        }
    }

    /// Hands the next event to `body`, and takes it if `body` says so.
    pub(crate) fn poll_event(
        &mut self,
        body: impl FnOnce(Option<&Happening>) -> Result<bool, FfiError>,
    ) -> Result<(), FfiError> {
        match self {
            Self::Threaded(io) if io.running() => {
                if io.next_event.is_none() {
                    io.next_event = io.events.try_recv().ok();
                    if io.next_event.is_some() {
                        io.in_flight.fetch_sub(1, Ordering::AcqRel);
                    }
                }
                if body(io.next_event.as_ref())? {
                    io.next_event = None;
                }
                Ok(())
            }
            _ => self.with(|client| client.poll_event(body)),
        }
    }

    /// Runs `body` (a connect) and gives the I/O thread a turn at once to act on it.
    pub(crate) fn waking<R>(
        &mut self,
        body: impl FnOnce(&mut Client) -> Result<R, FfiError>,
    ) -> Result<R, FfiError> {
        let out = self.with(body)?;
        if let Self::Threaded(io) = self {
            io.shared.bell.ring();
        }
        Ok(out)
    }

    /// The frame's turn: the socket work on this thread, or with the I/O thread, only the
    /// errors a turn would give (the connection ended, the client closed).
    pub(crate) fn update(&mut self, now_us: u64) -> Result<(), FfiError> {
        match self {
            Self::Plain(client) => client.update(now_us),
            Self::Threaded(io) if io.running() => {
                io.frame_start = instant(now_us);
                io.game_turn()
            }
            Self::Threaded(io) => io.lock().game_turn(),
        }
    }

    /// The library's clock, microseconds.
    pub(crate) fn now_us(&mut self) -> Result<u64, FfiError> {
        match self {
            Self::Plain(client) => client.open().map(|()| client.now_us()),
            // The thread runs until close: the client is open, and the clock needs no lock.
            Self::Threaded(io) if io.running() => Ok(io.clock.now().as_nanos() / 1000),
            Self::Threaded(io) => {
                let clock = io.clock;
                io.lock().open().map(|()| clock.now().as_nanos() / 1000)
            }
        }
    }

    /// The connection's figures, with the lock's when there is an I/O thread.
    pub(crate) fn stats(&mut self) -> Result<RallyConnectionStats, FfiError> {
        match self {
            Self::Plain(client) => client.stats(),
            Self::Threaded(io) => {
                let mut stats = io.lock().stats()?;
                stats.io_lock_waits = io.waits;
                stats.io_lock_wait_us = io.waited_ns / 1000;
                Ok(stats)
            }
        }
    }

    /// Says goodbye and refuses every later call; stops the I/O thread first.
    pub(crate) fn close(&mut self) -> Result<(), FfiError> {
        match self {
            Self::Plain(client) => client.close(),
            Self::Threaded(io) => {
                io.lock().open()?;
                io.stop();
                io.lock().close()
            }
        }
    }
}

/// How an input reaches the socket with the I/O thread on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InputPath {
    /// The sending thread writes it.
    Now,
    /// The I/O thread is woken to write it.
    Wake,
}

/// What the game thread and the I/O thread share.
#[derive(Debug)]
struct Shared {
    client: Mutex<Client>,
    bell: Bell,
    stop: AtomicBool,
    /// A test's way to make the I/O thread's next turn panic.
    #[cfg(test)]
    panic_next: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Client> {
        // A panic caught at the boundary while a call held the client leaves it poisoned; the
        // client is still whole enough to report and close, as without the thread.
        self.client.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The I/O thread and the game thread's side of it.
#[derive(Debug)]
pub(crate) struct IoThread {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    path: InputPath,
    clock: Clock,
    /// Calls that found the I/O thread holding the client, and the time they waited.
    waits: u64,
    waited_ns: u64,
    /// What the frame reads: the I/O thread's newest copy.
    reader: Reader<View>,
    /// The frame's start, as `update` was told: the latency meter judges the frame from it.
    frame_start: rally_proto::Instant,
    /// Events from the I/O thread, the next one taken out to peek at, and how many are
    /// sent and not yet taken.
    events: Receiver<Happening>,
    next_event: Option<Happening>,
    in_flight: Arc<AtomicUsize>,
    /// Inputs and presents to the I/O thread.
    commands: SyncSender<Command>,
    /// Whether `update` has returned once since the connection ended.
    end_told: bool,
}

/// The I/O thread's ends of what it shares with the game thread without a lock.
struct Hands {
    view: Publisher<View>,
    events: Sender<Happening>,
    in_flight: Arc<AtomicUsize>,
    commands: Receiver<Command>,
}

impl IoThread {
    fn start(client: Client, path: InputPath) -> Result<Self, FfiError> {
        let socket = client.socket()?;
        let clock = client.clock();
        let bell = Bell::new()?;
        let shared = Arc::new(Shared {
            client: Mutex::new(client),
            bell,
            stop: AtomicBool::new(false),
            #[cfg(test)]
            panic_next: AtomicBool::new(false),
        });
        let theirs = Arc::clone(&shared);
        let (view, reader) = triple();
        let (events_in, events) = channel();
        let (commands, commands_out) = sync_channel(COMMANDS_MAX);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let mut hands = Hands {
            view,
            events: events_in,
            in_flight: Arc::clone(&in_flight),
            commands: commands_out,
        };
        let thread = std::thread::Builder::new()
            .name("rally-io".into())
            .spawn(move || run(&theirs, &socket, &mut hands))
            .map_err(|e| FfiError::Io(format!("starting the I/O thread: {e}")))?;
        Ok(Self {
            shared,
            thread: Some(thread),
            path,
            clock,
            waits: 0,
            waited_ns: 0,
            reader,
            frame_start: rally_proto::Instant::ZERO,
            events,
            next_event: None,
            in_flight,
            commands,
            end_told: false,
        })
    }

    /// Whether the I/O thread is there to publish (it is until `close`).
    fn running(&self) -> bool {
        self.thread.is_some()
    }

    /// `update`'s answer from the newest copy, without the client.
    fn game_turn(&mut self) -> Result<(), FfiError> {
        match &self.reader.latest().status {
            Err(FfiError::Disconnected(_)) if !std::mem::replace(&mut self.end_told, true) => {
                Ok(())
            }
            other => other.clone(),
        }
    }

    /// An input for the I/O thread to send, refused here as the client would refuse it.
    fn hand_input(&mut self, now_us: u64, input: Input) -> Result<(), FfiError> {
        self.reader.latest().live.clone()?;
        check_input(&input)?;
        self.command(Command::Input(now_us, input))?;
        self.shared.bell.ring();
        Ok(())
    }

    fn command(&mut self, command: Command) -> Result<(), FfiError> {
        self.commands.try_send(command).map_err(|error| match error {
            TrySendError::Full(_) => FfiError::Refused(format!(
                "the library's I/O thread has not taken the last {COMMANDS_MAX} inputs and \
                 presents: it is not running (a machine that starves it of CPU)"
            )),
            // The receiver goes only with the thread, which ends only by failing (the view
            // says so) or by close.
            TrySendError::Disconnected(_) => {
                FfiError::Disconnected("the library's I/O thread stopped".into())
            }
        })
    }

    /// The client, counting the times the I/O thread had it.
    fn lock(&mut self) -> MutexGuard<'_, Client> {
        match self.shared.client.try_lock() {
            Ok(client) => client,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                let from = self.clock.now();
                let client = self.shared.lock();
                self.waits += 1;
                self.waited_ns += self.clock.now().as_nanos() - from.as_nanos();
                client
            }
        }
    }

    fn sending<R>(
        &mut self,
        body: impl FnOnce(&mut Client) -> Result<R, FfiError>,
    ) -> Result<R, FfiError> {
        let path = self.path;
        let mut client = self.lock();
        let out = body(&mut client)?;
        match path {
            InputPath::Now => client.send_now()?,
            InputPath::Wake => {
                drop(client);
                self.shared.bell.ring();
            }
        }
        Ok(out)
    }

    /// Stops the I/O thread and waits for it; the client is the caller's alone after.
    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.bell.wake();
        if let Some(thread) = self.thread.take() {
            // The thread catches its own panics: it ends normally.
            let _ = thread.join();
        }
    }
}

impl Drop for IoThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The I/O thread: a turn, then a wait for the socket, a timer or a wake, until stopped or
/// failed. After each turn it publishes what changed and hands over the events.
fn run(shared: &Shared, socket: &UdpSocket, hands: &mut Hands) {
    rally_driver::precise_timers();
    let (frame, clock) = {
        let client = shared.lock();
        (client.frame(), client.clock())
    };
    let mut window = InputWindow::new(frame);
    loop {
        let (wait, seen) = {
            let mut client = shared.lock();
            if shared.stop.load(Ordering::Acquire) {
                return;
            }
            // Before the commands: a ring after this read is one the wait must look for.
            let seen = shared.bell.rings();
            let turn = catch_unwind(AssertUnwindSafe(|| {
                #[cfg(test)]
                if shared.panic_next.swap(false, Ordering::AcqRel) {
                    panic!("a test's panic on the I/O thread");
                }
                for command in hands.commands.try_iter() {
                    if let Command::Input(sampled_us, _) = command {
                        window.input(instant(sampled_us));
                    }
                    // A command refused here (the connection ended meanwhile) has nobody to
                    // tell: the game learns the end from the view and the event.
                    let _ = client.apply(command);
                }
                client.io_turn(WAIT_MAX)
            }));
            let wait = match turn {
                Ok(Ok(wait)) => Some(wait),
                Ok(Err(error)) => {
                    client.fail(error.to_string());
                    None
                }
                Err(panic) => {
                    let what = crate::error::panic_text(panic.as_ref());
                    client.fail(format!("a bug in rally-ffi, please report it: {what}"));
                    None
                }
            };
            // The view first: a game that sees an event (Joined) finds the state behind it.
            if client.publish(hands.view.back()) {
                hands.view.publish();
            }
            client.hand_events(&hands.events, &hands.in_flight);
            match wait {
                Some(wait) => (wait, seen),
                None => return,
            }
        };
        shared.bell.wait(socket, wait, (&window, seen), &shared.stop, &clock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Happening;

    fn threaded(io_thread: RallyIoThread) -> Driven {
        let config = RallyConfig {
            bind_address: std::ptr::null(),
            frame_us: 11_111,
            interpolate: true,
            io_thread: io_thread as u32,
        };
        Driven::new(&config, Some("127.0.0.1:0")).unwrap()
    }

    #[test]
    fn a_panic_on_the_io_thread_ends_the_connection_with_an_event_not_an_abort() {
        // Goal: a bug on the I/O thread reaches the game as a Disconnected event saying what
        // happened and as an error from every later call, and close still joins the thread.
        // Method: make its next turn panic, wake it, and poll for the event.
        let mut driven = threaded(RallyIoThread::On);
        let Driven::Threaded(io) = &driven else { panic!("no I/O thread") };
        io.shared.panic_next.store(true, Ordering::Release);
        io.shared.bell.wake();
        let why = loop {
            let mut event = None;
            driven.poll_event(|e| Ok((event = e.cloned(), true).1)).unwrap();
            match event {
                Some(Happening::Failed(why)) => break why,
                Some(other) => panic!("{other:?}"),
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        assert!(why.contains("a test's panic") && why.contains("a bug in rally-ffi"), "{why}");
        assert_eq!(driven.update(0), Ok(()), "the first turn after the end");
        let later = driven.update(0).unwrap_err();
        assert!(later.to_string().contains("I/O thread stopped"), "{later}");
        driven.close().unwrap();
        assert_eq!(driven.update(0), Err(FfiError::Closed));
    }

    /// A client of `io_thread` connecting (to a port nobody answers on: a connection that
    /// stays in its handshake), its first view published.
    fn connecting(io_thread: RallyIoThread) -> Driven {
        use rally_proto::token::{self, Grant, TokenRandomness, USER_DATA_LEN};
        let nobody = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let grant = Grant {
            client_id: 1,
            room_id: 1,
            user_data: [0; USER_DATA_LEN],
            server_addresses: vec![nobody],
            timeout_s: 30,
        };
        let random = TokenRandomness {
            nonce: [1; 24],
            client_to_server_key: [2; 32],
            server_to_client_key: [3; 32],
        };
        let key = rally_proto::TokenKey([5; 32]);
        let token = token::issue(&key, 7, &grant, 1_000, 60, &random).unwrap().encode();
        let mut driven = threaded(io_thread);
        driven.waking(|c| c.connect(&token, None, 1_001)).unwrap();
        let Driven::Threaded(io) = &mut driven else { panic!("no I/O thread") };
        while io.reader.latest().live.is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
        driven
    }

    #[test]
    fn a_frame_never_waits_for_an_io_thread_that_holds_the_client() {
        // Goal: a preempted I/O thread (holding the client) cannot stall the game's frame:
        // with `Wake`, every call of a frame (input, update, events, the read at the frame's
        // time, present) goes through without the client's lock.
        // Method: another thread holds the lock while this one plays frames; the lock is let
        // go after a while only so that a regression shows as a counted wait, not a hang.
        let mut driven = connecting(RallyIoThread::Wake);
        let Driven::Threaded(io) = &mut driven else { panic!("no I/O thread") };
        let shared = Arc::clone(&io.shared);
        let (held_tx, held_rx) = channel();
        let (done_tx, done_rx) = channel::<()>();
        let holder = std::thread::spawn(move || {
            let _client = shared.lock();
            held_tx.send(()).unwrap();
            let _ = done_rx.recv_timeout(Duration::from_secs(2));
        });
        held_rx.recv().unwrap();
        // Waits before the frames (the connect) or after them (the stats call itself, while
        // the I/O thread takes its turn) are not a frame's: count only those in between.
        let before = waits(&driven);
        for _ in 0..10 {
            let now = driven.now_us().unwrap();
            driven.send_input(now, Input::Raw(vec![1, 2, 3])).unwrap();
            driven.update(now).unwrap();
            driven.poll_event(|_| Ok(true)).unwrap();
            let count = driven.entity_count().unwrap();
            driven.entities(Some(now), &mut EntitiesOut::new(&mut [])).unwrap();
            assert_eq!(count, 0, "a handshake shows no entity");
            driven.present(now).unwrap();
        }
        let during = waits(&driven) - before;
        done_tx.send(()).unwrap();
        holder.join().unwrap();
        assert_eq!(during, 0, "a frame's call waited for the I/O thread");
        driven.close().unwrap();
    }

    fn waits(driven: &Driven) -> u64 {
        let Driven::Threaded(io) = driven else { panic!("no I/O thread") };
        io.waits
    }

    #[test]
    fn a_config_asking_for_no_known_io_thread_is_refused() {
        let mut config = RallyConfig {
            bind_address: std::ptr::null(),
            frame_us: 11_111,
            interpolate: true,
            io_thread: 9,
        };
        let error = Driven::new(&config, Some("127.0.0.1:0")).unwrap_err();
        assert!(error.to_string().contains("config.io_thread = 9"), "{error}");
        config.io_thread = RallyIoThread::Wake as u32;
        assert!(matches!(Driven::new(&config, Some("127.0.0.1:0")), Ok(Driven::Threaded(_))));
    }
}
