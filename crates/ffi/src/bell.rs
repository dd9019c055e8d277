//! How the game thread gets the I/O thread to act on what it handed over (an input, a
//! message), at the least cost to the game thread.
//!
//! Waking a sleeping thread costs the waker a system call and, for a thread on another CPU, an
//! interrupt: 3.3 to 3.7 us of the game thread's CPU on this project's machine
//! (`examples/c/handoff.c`), about 10 us inside a C# frame. Yet a game's inputs come once a
//! frame, at the frame's start, so the I/O thread knows when the next one is due: the last
//! one's time plus a frame. From [`LOOK_BEFORE`] before that time to [`LOOK_AFTER`] after it, the
//! I/O thread waits by looking at a counter the game thread bumps instead of sleeping (and at
//! the socket every [`SOCKET_EVERY`]), and the game thread, seeing it look, skips the wake: an
//! input handed in that window costs the game thread an atomic add and a load. One handed
//! outside it (a frame that started late, the first input) wakes the thread as before. The
//! window costs the I/O thread 250 us of looking a frame, about 2% of a core at 90 Hz.
//!
//! No hand-off is ever lost: the game thread bumps the counter and then reads whether the I/O
//! thread looks; the I/O thread stops looking and then reads the counter (both sequentially
//! consistent). Either the game thread sees it still looking, and the I/O thread then sees
//! the bump and takes its turn, or the game thread sees it gone and wakes it.

use crate::error::FfiError;
use rally_driver::Clock;
use rally_proto::Instant;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

/// How long before an input is due the I/O thread starts looking for it: its own sleep to the
/// window overruns about as much as the game's sleep to its frame (tens to a hundred us on a
/// loaded machine), so a shorter lead starts looking after the input came.
pub(crate) const LOOK_BEFORE: Duration = Duration::from_micros(120);
/// How long after an input was due it keeps looking: frames start late by 0.05 to 0.1 ms at
/// the median on a loaded machine (docs/ffi.md).
pub(crate) const LOOK_AFTER: Duration = Duration::from_micros(130);
/// How often a looking I/O thread checks the socket: a datagram waits this long at most.
const SOCKET_EVERY: Duration = Duration::from_micros(20);

/// The game thread's way to have the I/O thread take a turn.
#[derive(Debug)]
pub(crate) struct Bell {
    waker: Waker,
    /// Whether the I/O thread is looking at `rung` (and will not sleep before it has seen it).
    looking: AtomicBool,
    /// Hand-offs so far.
    rung: AtomicU64,
}

/// Why [`Bell::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// The game thread handed something over while the I/O thread looked.
    Rung,
    /// The socket, a wake or the timeout (a sleep's end does not say which).
    Other,
}

/// When the next input is due, as the I/O thread learns from the inputs it gets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InputWindow {
    frame: Duration,
    next: Option<Instant>,
    /// [`LOOK_AFTER`] (a test's own otherwise).
    after: Duration,
}

/// How to wait from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Sleep until something happens, this long at most.
    Sleep(Duration),
    /// Look for this long.
    Look(Duration),
}

impl InputWindow {
    /// A window for a game presenting a frame every `frame`.
    pub(crate) fn new(frame: Duration) -> Self {
        Self { frame, next: None, after: LOOK_AFTER }
    }

    /// An input sampled at `sampled` (the library's clock) arrived: the next is due a frame
    /// after the game's frame grid. A game's frames start on a grid and late now and then (a
    /// busy machine), so an input earlier than due moves the grid to it, and a later one only
    /// an eighth of the way (a frame slower than `frame` still moves it on, a late start
    /// hardly).
    pub(crate) fn input(&mut self, sampled: Instant) {
        let on_grid = match self.next {
            Some(due) if sampled >= due => due + (sampled - due) / 8,
            _ => sampled,
        };
        self.next = Some(on_grid + self.frame);
    }

    /// How to wait at `now` for at most `timeout` (the endpoint's next timer).
    fn plan(&self, now: Instant, timeout: Duration) -> Wait {
        let Some(due) = self.next else { return Wait::Sleep(timeout) };
        let start = Instant::from_nanos(due.as_nanos().saturating_sub(nanos(LOOK_BEFORE)));
        let end = due + self.after;
        if now >= end {
            Wait::Sleep(timeout)
        } else if now >= start {
            Wait::Look(timeout.min(end - now))
        } else {
            Wait::Sleep(timeout.min(start - now))
        }
    }
}

impl Bell {
    pub(crate) fn new() -> Result<Self, FfiError> {
        Ok(Self { waker: Waker::new()?, looking: AtomicBool::new(false), rung: AtomicU64::new(0) })
    }

    /// The game thread handed something over (call after the hand-off): wakes the I/O thread
    /// unless it is looking.
    pub(crate) fn ring(&self) {
        self.rung.fetch_add(1, SeqCst);
        if !self.looking.load(SeqCst) {
            self.waker.wake();
        }
    }

    /// The hand-offs so far: the I/O thread reads it before it takes what was handed, and
    /// gives it to [`Bell::wait`], so that a ring after that read is looked for.
    pub(crate) fn rings(&self) -> u64 {
        self.rung.load(SeqCst)
    }

    /// Wakes the I/O thread whatever it does (to stop it).
    pub(crate) fn wake(&self) {
        self.waker.wake();
    }

    /// The I/O thread waits for the socket, a ring after the `seen`th ([`Bell::rings`]),
    /// `stop` or `timeout`: by looking inside `window` (on `clock`, the library's), else
    /// asleep.
    pub(crate) fn wait(
        &self,
        socket: &UdpSocket,
        timeout: Duration,
        (window, seen): (&InputWindow, u64),
        stop: &AtomicBool,
        clock: &Clock,
    ) -> Woke {
        let now = clock.now();
        match window.plan(now, timeout) {
            Wait::Look(span) if Waker::CAN_LOOK => {
                self.look(socket, (now + span, seen), stop, clock)
            }
            Wait::Look(span) | Wait::Sleep(span) => {
                self.waker.wait(socket, span);
                Woke::Other
            }
        }
    }

    /// Looks until `until` for a ring after the `seen`th. `seen` comes from before the I/O
    /// thread took what was handed: read here, after `looking` is set, a ring between that
    /// store and the read would write no wake and count as seen, and wait for the window's end.
    fn look(
        &self,
        socket: &UdpSocket,
        (until, seen): (Instant, u64),
        stop: &AtomicBool,
        clock: &Clock,
    ) -> Woke {
        self.looking.store(true, SeqCst);
        let mut socket_at = clock.now();
        let mut woke = Woke::Other;
        loop {
            if self.rung.load(SeqCst) != seen {
                woke = Woke::Rung;
                break;
            }
            let now = clock.now();
            if now >= until || stop.load(SeqCst) {
                break;
            }
            if now >= socket_at {
                if Waker::ready(socket) {
                    break;
                }
                socket_at = now + SOCKET_EVERY;
            }
            std::hint::spin_loop();
        }
        self.looking.store(false, SeqCst);
        // A ring between the last look and the store above did not wake: take it now.
        if self.rung.load(SeqCst) != seen {
            woke = Woke::Rung;
        }
        woke
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// An `eventfd` the I/O thread waits on with the socket.
#[cfg(target_os = "linux")]
#[derive(Debug)]
struct Waker {
    fd: std::os::fd::OwnedFd,
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
impl Waker {
    const CAN_LOOK: bool = true;

    fn new() -> Result<Self, FfiError> {
        use std::os::fd::FromRawFd;
        // SAFETY: eventfd takes two integers and touches no memory.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            let error = std::io::Error::last_os_error();
            return Err(FfiError::Io(format!("an eventfd for the I/O thread: {error}")));
        }
        // SAFETY: a new descriptor, owned by nothing else.
        Ok(Self { fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) } })
    }

    fn wake(&self) {
        use std::os::fd::AsRawFd;
        let one = 1u64;
        // SAFETY: writes the 8 bytes of `one`, which outlives the call. A full counter (never,
        // at 2^64 - 1) would only fail the write: the thread is awake then anyway.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Waits for the socket, a wake or `timeout`, and clears the wake.
    fn wait(&self, socket: &UdpSocket, timeout: Duration) {
        use std::os::fd::AsRawFd;
        // An error from ppoll (none is expected) is a short spin: the next turn goes on.
        let _ = rally_driver::readable_fds(&[socket.as_raw_fd(), self.fd.as_raw_fd()], timeout);
        self.clear();
    }

    /// Takes a wake written, if any.
    fn clear(&self) -> bool {
        use std::os::fd::AsRawFd;
        let mut count = 0u64;
        // SAFETY: reads at most 8 bytes into `count`, which outlives the call; the descriptor
        // is non-blocking, so an unwoken one returns EAGAIN at once.
        let read = unsafe { libc::read(self.fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        read == 8
    }

    /// Whether a datagram waits on `socket`, without waiting (and without allocating).
    fn ready(socket: &UdpSocket) -> bool {
        use std::os::fd::AsRawFd;
        let mut polled = libc::pollfd { fd: socket.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd, which outlives the call; a zero timeout returns at once.
        unsafe { libc::poll(&mut polled, 1, 0) > 0 }
    }
}

/// Elsewhere than on Linux the I/O thread looks at the socket every 200 us
/// (`rally_driver::readable`): nothing to wake, nothing to look at.
#[cfg(not(target_os = "linux"))]
#[derive(Debug)]
struct Waker;

#[cfg(not(target_os = "linux"))]
impl Waker {
    const CAN_LOOK: bool = false;

    fn new() -> Result<Self, FfiError> {
        Ok(Self)
    }

    fn wake(&self) {}

    fn wait(&self, socket: &UdpSocket, timeout: Duration) {
        let _ = rally_driver::readable(socket, timeout);
    }

    fn ready(_socket: &UdpSocket) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_opens_around_the_next_input_and_a_timer_still_ends_the_wait() {
        let mut window = InputWindow::new(Duration::from_millis(10));
        let now = Instant::from_millis(1_000);
        let long = Duration::from_secs(1);
        assert_eq!(window.plan(now, long), Wait::Sleep(long), "no input yet: no window");
        window.next = Some(now + Duration::from_millis(10));
        let start = Duration::from_millis(10) - LOOK_BEFORE;
        assert_eq!(window.plan(now, long), Wait::Sleep(start), "asleep until the window");
        let timer = Duration::from_millis(2);
        assert_eq!(window.plan(now, timer), Wait::Sleep(timer), "a timer first");
        let inside = now + Duration::from_millis(10);
        assert_eq!(window.plan(inside, long), Wait::Look(LOOK_AFTER));
        assert_eq!(window.plan(inside, Duration::from_micros(5)), Wait::Look(5 * MICRO));
        let after = inside + LOOK_AFTER;
        assert_eq!(window.plan(after, long), Wait::Sleep(long), "missed: asleep, woken");
    }

    const MICRO: Duration = Duration::from_micros(1);

    #[test]
    fn the_window_follows_the_games_frame_grid_not_its_late_frames() {
        // Goal: a frame that starts late does not move the next window by its lateness; an
        // early one moves it at once, and frames steadily slower than `frame` move it on.
        let frame = Duration::from_millis(10);
        let mut window = InputWindow::new(frame);
        window.input(Instant::from_millis(1_000));
        let due = window.next.unwrap();
        // The next input 400 us late: the window after it opens 50 us later than the grid's
        // next frame, not 400.
        window.input(due + 400 * MICRO);
        assert_eq!(window.next.unwrap(), due + frame + 50 * MICRO);
        // One 100 us early: the grid is there from now on.
        let early = Instant::from_nanos(window.next.unwrap().as_nanos() - 100_000);
        window.input(early);
        assert_eq!(window.next.unwrap(), early + frame);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_ring_while_the_io_thread_looks_reaches_it_without_a_wake_and_after_it_with_one() {
        // Goal: a hand-off is never lost: taken by the looking thread with no system call on
        // the game thread's side, or, once it stopped looking, by a wake it will see.
        // Method: a thread looks (a window now, a long span); ring when it says it looks.
        let bell = std::sync::Arc::new(Bell::new().unwrap());
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let clock = Clock::start();
        let mut window = InputWindow::new(Duration::from_secs(60));
        // Looking from now on, for longer than the test takes.
        (window.next, window.after) = (Some(clock.now()), Duration::from_secs(60));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let looker = {
            let (bell, stop) = (bell.clone(), stop.clone());
            let long = Duration::from_secs(60);
            let seen = bell.rings();
            std::thread::spawn(move || bell.wait(&socket, long, (&window, seen), &stop, &clock))
        };
        while !bell.looking.load(SeqCst) {
            std::thread::yield_now();
        }
        bell.ring();
        assert_eq!(looker.join().unwrap(), Woke::Rung);
        assert!(!bell.waker.clear(), "the game thread wrote a wake while the thread looked");
        bell.ring();
        assert!(bell.waker.clear(), "no wake once the thread stopped looking");
    }
}
