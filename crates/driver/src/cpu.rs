//! CPU time from the OS, for telemetry and benchmarks.

/// The calling thread's CPU time (user and system) so far, in microseconds; 0 where the OS
/// cannot say.
pub fn thread_cpu_us() -> u64 {
    usage_us(libc::RUSAGE_THREAD)
}

/// The whole process's CPU time (user and system, every thread) so far, in microseconds.
pub fn process_cpu_us() -> u64 {
    usage_us(libc::RUSAGE_SELF)
}

#[allow(unsafe_code)]
fn usage_us(who: libc::c_int) -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole `rusage` into the pointer it is given, which points to
    // a zeroed value of that type that outlives the call; it reads nothing else.
    let status = unsafe { libc::getrusage(who, usage.as_mut_ptr()) };
    if status != 0 {
        return 0;
    }
    // SAFETY: the call succeeded, so it initialized the value (and it was zeroed before).
    let usage = unsafe { usage.assume_init() };
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    micros(usage.ru_utime) + micros(usage.ru_stime)
}

/// Pins the calling thread (and the threads it starts afterwards) to `cores`, so that a
/// benchmark's server and its load generator do not trade cores. Cores this machine does not
/// have are an error.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn pin_current_thread(cores: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data, valid when zeroed; CPU_SET writes within it for
    // indices below CPU_SETSIZE, which the check below ensures.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &core in cores {
        if core >= libc::CPU_SETSIZE as usize {
            return Err(std::io::Error::other(format!("core {core} is out of range")));
        }
        // SAFETY: see above.
        unsafe { libc::CPU_SET(core, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; the set outlives the call, which only reads it.
    let status = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if status == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Runs the calling thread under the OS's first-in-first-out realtime policy at `priority`
/// (1 to 99): ordinary threads (builds, other services, a load generator) no longer preempt
/// it while it has work, so a tick falls due on a core the worker holds. The OS's realtime
/// throttling (by default 5% of every second left to ordinary threads) still bounds what a
/// runaway thread can take. Refused without the right (`CAP_SYS_NICE`, root, or an `rtprio`
/// limit): the error says so.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn run_realtime(priority: u8) -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: libc::c_int::from(priority) };
    // SAFETY: pid 0 is the calling thread; the parameter outlives the call, which only reads it.
    let status = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if status == 0 {
        return Ok(());
    }
    let error = std::io::Error::last_os_error();
    Err(std::io::Error::new(
        error.kind(),
        format!(
            "realtime priority {priority} refused ({error}): it needs CAP_SYS_NICE, root, or an \
             rtprio limit of at least {priority}"
        ),
    ))
}

/// Elsewhere there is no realtime policy to ask for.
#[cfg(not(target_os = "linux"))]
pub fn run_realtime(priority: u8) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!("realtime priority {priority}: only on Linux"),
    ))
}

/// Elsewhere threads stay where the OS puts them.
#[cfg(not(target_os = "linux"))]
pub fn pin_current_thread(_cores: &[usize]) -> std::io::Result<()> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    #[allow(unsafe_code)]
    fn a_realtime_thread_runs_first_in_first_out_or_is_told_why_not() {
        // Goal: when the OS grants the policy, the thread really runs under it; when it does
        // not (no CAP_SYS_NICE), the error names the right that is missing. Method: a thread
        // of its own asks, then reads its policy back.
        let outcome = std::thread::spawn(|| {
            super::run_realtime(1)?;
            // SAFETY: pid 0 is the calling thread; the call reads nothing else.
            Ok(unsafe { libc::sched_getscheduler(0) })
        })
        .join()
        .expect("the thread ran");
        match outcome {
            Ok(policy) => assert_eq!(policy, libc::SCHED_FIFO),
            Err(error) => {
                let error: std::io::Error = error;
                assert!(error.to_string().contains("CAP_SYS_NICE"), "{error}");
            }
        }
    }
}
