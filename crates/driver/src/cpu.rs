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

/// Elsewhere threads stay where the OS puts them.
#[cfg(not(target_os = "linux"))]
pub fn pin_current_thread(_cores: &[usize]) -> std::io::Result<()> {
    Ok(())
}
