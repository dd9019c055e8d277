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
