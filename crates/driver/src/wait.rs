//! Waiting for a socket or a deadline, whichever comes first, to within microseconds.
//!
//! A socket's receive timeout is counted in kernel ticks (a 0.1 ms timeout measured 8 ms on
//! this project's machines), far coarser than a 128 Hz tick; sleeping in short steps and
//! polling keeps time but wakes thousands of times a second for nothing. `ppoll` takes its
//! timeout in nanoseconds on the kernel's high-resolution timers and wakes at once when a
//! datagram arrives, so a loop sleeps exactly as long as it has nothing to do.

use std::io;
use std::net::UdpSocket;
use std::time::Duration;

/// Waits until `socket` has a datagram to read or `timeout` passes; whether it has one.
#[cfg(target_os = "linux")]
pub fn readable(socket: &UdpSocket, timeout: Duration) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    readable_fds(&[socket.as_raw_fd()], timeout)
}

/// Waits until any of the file descriptors `fds` (sockets, TUN devices) has something to read
/// or `timeout` passes; whether one has.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn readable_fds(fds: &[i32], timeout: Duration) -> io::Result<bool> {
    let mut polled: Vec<libc::pollfd> =
        fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    let spec = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    let count = polled.len() as libc::nfds_t;
    // SAFETY: `polled` holds `count` valid entries and `spec` is valid for the call; ppoll
    // writes only the entries' `revents`; a null signal mask keeps the thread's own.
    let ready = unsafe { libc::ppoll(polled.as_mut_ptr(), count, &spec, std::ptr::null()) };
    match ready {
        -1 => {
            let error = io::Error::last_os_error();
            // A signal (SIGTERM's handler, say) woke the wait early: the loop looks again.
            if error.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(error)
            }
        }
        0 => Ok(false),
        _ => Ok(true),
    }
}

/// Elsewhere: a short sleep, then a look (the socket is non-blocking).
#[cfg(not(target_os = "linux"))]
pub fn readable(_socket: &UdpSocket, timeout: Duration) -> io::Result<bool> {
    std::thread::sleep(timeout.min(Duration::from_micros(200)));
    Ok(true)
}

/// Asks the kernel to wake this thread within a microsecond of its timers rather than its
/// default slack of 50 us, so that ticks start on time without spinning. Once per thread;
/// [`UdpDriver::run_for`](crate::UdpDriver::run_for) calls it.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn precise_timers() {
    thread_local!(static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    if DONE.replace(true) {
        return;
    }
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer (nanoseconds) and touches no memory; a
    // failure leaves the default slack, which is still correct, only less precise.
    unsafe {
        // prctl is variadic: pass every argument the option reads as unsigned long, the unused
        // ones 0 (valgrind reads five).
        libc::prctl(
            libc::PR_SET_TIMERSLACK,
            1_000 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        );
    }
}

/// Elsewhere the OS's default slack stands.
#[cfg(not(target_os = "linux"))]
pub fn precise_timers() {}
