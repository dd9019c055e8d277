//! `rally-bench count --callgrind`: the count's runs under valgrind, and callgrind's inclusive
//! counts read back by phase.
//!
//! Callgrind writes one file per thread (`--separate-threads=yes`) and collects only inside
//! the worker's measured window (`--collect-atstart=no --toggle-collect=...worker_window`), so
//! the worker thread's file holds the worker's instructions over the measured ticks and
//! nothing else but the harness's copy of each datagram out ([`HARNESS_FUNCTION`]: it stands
//! for the kernel's copy from a socket's send batch), which the total leaves out.
//! `callgrind_annotate --inclusive=yes` then gives each function's instructions with everything
//! it called; a function the compiler inlined into another has no count of its own, so the
//! phases are the functions that survive as calls (see [`PHASES`]).
//!
//! The telemetry-off run also simulates this machine's data caches (`--cache-sim=yes`, with its
//! first-level data cache and its second level given as callgrind's "last level", read from
//! `/sys`), and reports the second level's misses per room-tick by phase: the lines a core's
//! own caches could not serve, which the shared third level or memory served at several times
//! an L2 hit's latency. Instructions alone do not say why a room-tick takes the time it does
//! (docs/benchmarks.md, "Instructions and misses"); these say where the rest goes. The model
//! has no prefetcher (a copy into a cold buffer counts every line, which a real core fetches
//! ahead) and one cache for every thread (the clients' thread, a bot process on another core
//! in the load bench, shares it here): a guide to where misses are, not a timing.

use super::count::CountArgs;
use crate::machine::Machine;
use serde::Serialize;
use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A phase and the function whose inclusive count it is, less the phases it contains.
struct PhaseFunction {
    phase: &'static str,
    /// The function, as callgrind names it (a substring of the demangled name).
    function: &'static str,
    /// Phases counted inside this function, subtracted from it.
    minus: &'static [&'static str],
}

/// The phases of a room-tick, in the order a datagram and a tick pass through them.
const PHASES: [PhaseFunction; 8] = [
    PhaseFunction { phase: "open", function: "rally_proto::crypto::PacketKeys::open", minus: &[] },
    PhaseFunction {
        phase: "decode",
        function: "rally_proto::endpoint::Endpoint::handle_datagram",
        minus: &["open"],
    },
    PhaseFunction { phase: "ingest", function: "rally_engine::room::Room<S>::receive", minus: &[] },
    PhaseFunction {
        phase: "simulate",
        function: "as rally_engine::room::Simulation>::step",
        minus: &[],
    },
    PhaseFunction {
        phase: "replicate",
        function: "rally_engine::room::Room<S>::replicate",
        minus: &[],
    },
    PhaseFunction {
        phase: "transmit",
        function: "rally_engine::room::Room<S>::transmit",
        minus: &[],
    },
    PhaseFunction {
        phase: "encode",
        function: "rally_proto::endpoint::Endpoint::poll_transmit",
        minus: &["seal"],
    },
    PhaseFunction { phase: "seal", function: "rally_proto::crypto::PacketKeys::seal", minus: &[] },
];

/// The worker's whole turn (datagrams in, ticks, datagrams out, housekeeping).
const TOTAL_FUNCTION: &str = "rally_bench::bench::count::worker_turn";
/// Inside it, the harness's copy of each datagram out, left out of the total: a worker on a
/// socket has the endpoint write each datagram straight into its send batch, and the kernel
/// copies it from there (the load bench's floor counts that copy).
const HARNESS_FUNCTION: &str = "rally_bench::bench::count::Out::push";

/// One counted run.
#[derive(Debug, Serialize)]
struct Counted {
    telemetry: bool,
    room_ticks: u64,
    /// Datagrams the worker opened and sealed, per room-tick.
    datagrams_in_per_room_tick: f64,
    datagrams_out_per_room_tick: f64,
    /// Instructions per room-tick over the worker's whole turn.
    total: f64,
    /// Instructions per room-tick by phase; "other" is the rest of the total.
    phases: BTreeMap<String, f64>,
    /// Simulated second-level cache misses per room-tick (the telemetry-off run only).
    misses: Option<Misses>,
}

/// Simulated second-level data-cache misses per room-tick: reads and writes together.
#[derive(Debug, Serialize)]
struct Misses {
    /// The caches simulated, as callgrind's `--D1` and `--LL` took them (size,ways,line).
    first_level: String,
    second_level: String,
    /// Misses over the worker's whole turn, and of those the writes.
    total: f64,
    writes: f64,
    /// By phase; "other" is the rest of the total.
    phases: BTreeMap<String, f64>,
}

/// Runs the count under callgrind, telemetry off and on, and prints the table.
pub(super) fn run(args: &CountArgs, ticks: usize) -> Result<(), Box<dyn Error>> {
    check_valgrind()?;
    std::fs::create_dir_all(&args.out)?;
    let off = count(args, false)?;
    let on = count(args, true)?;
    print(args, ticks, &off, &on);
    let mut seal = super::count_seal::measure()?;
    super::count_seal::count(&mut seal, &args.out)?;
    super::count::print_seal(&seal);
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "bench": "count", "mode": "callgrind", "quick": args.quick, "rooms": args.rooms,
            "ticks": ticks, "machine": Machine::detect(),
            "instructions_per_room_tick": { "telemetry_off": off, "telemetry_on": on },
            "telemetry_ratio": on.total / off.total, "seal_open": seal,
        });
        super::write_json(path, &json)?;
    }
    Ok(())
}

fn check_valgrind() -> Result<(), Box<dyn Error>> {
    let found =
        Command::new("valgrind").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        return Err("valgrind is not installed (apt-get install valgrind; scripts/count.sh \
                    installs it)"
            .into());
    }
    Ok(())
}

/// One run of this executable under callgrind; its worker thread's counts per room-tick.
fn count(args: &CountArgs, telemetry: bool) -> Result<Counted, Box<dyn Error>> {
    let mode = if telemetry { "on" } else { "off" };
    let base = args.out.join(format!("callgrind.telemetry-{mode}.out"));
    for old in thread_files(&base)? {
        std::fs::remove_file(old)?;
    }
    let exe = std::env::current_exe()?;
    let mut command = Command::new("valgrind");
    command
        .arg("--tool=callgrind")
        .arg("--separate-threads=yes")
        .arg("--collect-atstart=no")
        .arg("--toggle-collect=*count::worker_window*")
        .arg(format!("--callgrind-out-file={}", base.display()));
    let caches = if telemetry { None } else { cache_geometry(args.second_level) };
    if let Some([first, second]) = &caches {
        command.args(["--cache-sim=yes", &format!("--D1={first}"), &format!("--LL={second}")]);
    }
    command.arg(exe).args(["count", "--only", mode, "--rooms", &args.rooms.to_string()]);
    if args.quick {
        command.arg("--quick");
    }
    eprintln!("counting with telemetry {mode} under callgrind (about a minute)...");
    let output = command.output()?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!("the run under callgrind failed:\n{stderr}").into());
    }
    let run: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let room_ticks = run["room_ticks"].as_u64().ok_or("the run reported no room-ticks")?;
    let inclusive = worker_counts(&base, "Ir")?;
    let mut counted = counted(telemetry, room_ticks, &inclusive);
    if let Some([first, second]) = caches {
        let reads = counted_by_phase(room_ticks, &worker_counts(&base, "DLmr")?);
        let writes = counted_by_phase(room_ticks, &worker_counts(&base, "DLmw")?);
        let phases =
            reads.1.iter().map(|(phase, r)| (phase.clone(), r + writes.1[phase])).collect();
        let (total, writes) = (reads.0 + writes.0, writes.0);
        counted.misses =
            Some(Misses { first_level: first, second_level: second, total, writes, phases });
    }
    counted.datagrams_in_per_room_tick = run["datagrams_in_per_room_tick"].as_f64().unwrap_or(0.0);
    counted.datagrams_out_per_room_tick =
        run["datagrams_out_per_room_tick"].as_f64().unwrap_or(0.0);
    Ok(counted)
}

/// Per-thread files callgrind wrote for `base` (`base-01`, `base-02`, ...).
fn thread_files(base: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let dir = base.parent().ok_or("no directory")?;
    let name = base.file_name().and_then(|n| n.to_str()).ok_or("no file name")?.to_string();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let file = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if file.starts_with(&name) {
            files.push(path);
        }
    }
    Ok(files)
}

/// The inclusive counts of `event` (callgrind's name: `Ir`, `DLmr`, ...) of the thread that ran
/// the worker: the one that collected most (the others collected nothing).
fn worker_counts(base: &Path, event: &str) -> Result<BTreeMap<String, u64>, Box<dyn Error>> {
    let mut best = BTreeMap::new();
    for file in thread_files(base)? {
        let output = Command::new("callgrind_annotate")
            .args(["--inclusive=yes", "--threshold=100"])
            .args([format!("--show={event}"), format!("--sort={event}")])
            .arg(&file)
            .output()?;
        let counts = parse_inclusive(&String::from_utf8_lossy(&output.stdout));
        if counts.get(TOTAL_FUNCTION) > best.get(TOTAL_FUNCTION) {
            best = counts;
        }
    }
    if best.is_empty() {
        return Err(format!("callgrind counted no worker turn in {}-*", base.display()).into());
    }
    Ok(best)
}

/// `callgrind_annotate --inclusive=yes` lines (`1,234 (5.6%)  file:function [object]`) as
/// function -> count. Code inlined from another file is listed again under that file with a
/// part of the count: the largest count of a name is the function's own.
fn parse_inclusive(text: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim_start();
        let Some((number, rest)) = line.split_once(' ') else { continue };
        let Ok(count) = number.replace(',', "").parse::<u64>() else { continue };
        let Some((_, located)) = rest.split_once(")  ") else { continue };
        // Every function has a file (`???` when unknown); the totals line has none.
        let Some((_, name)) = located.split_once(':') else { continue };
        let name = name.rsplit_once(" [").map_or(name, |(f, _)| f).trim();
        let entry = counts.entry(name.to_string()).or_insert(0);
        *entry = (*entry).max(count);
    }
    counts
}

/// The counts of a run, per room-tick, by phase.
fn counted(telemetry: bool, room_ticks: u64, inclusive: &BTreeMap<String, u64>) -> Counted {
    let (total, phases) = counted_by_phase(room_ticks, inclusive);
    Counted {
        telemetry,
        room_ticks,
        datagrams_in_per_room_tick: 0.0,
        datagrams_out_per_room_tick: 0.0,
        total,
        phases,
        misses: None,
    }
}

/// One event's inclusive counts per room-tick: the worker's total, and by phase with "other"
/// the rest of it.
fn counted_by_phase(
    room_ticks: u64,
    inclusive: &BTreeMap<String, u64>,
) -> (f64, BTreeMap<String, f64>) {
    let per_tick = |count: u64| count as f64 / room_ticks.max(1) as f64;
    let of = |function: &str| -> u64 {
        let matching = inclusive.iter().filter(|(name, _)| name.contains(function));
        matching.map(|(_, count)| *count).max().unwrap_or(0)
    };
    let mut phases = BTreeMap::new();
    for phase in &PHASES {
        let inside: u64 = phase.minus.iter().map(|m| of(function_of(m))).sum();
        phases.insert(phase.phase.to_string(), per_tick(of(phase.function).saturating_sub(inside)));
    }
    let total = per_tick(of(TOTAL_FUNCTION).saturating_sub(of(HARNESS_FUNCTION)));
    let other = total - phases.values().sum::<f64>();
    phases.insert("other".to_string(), other);
    (total, phases)
}

/// The caches to simulate, as callgrind's `--D1` and `--LL` take them ("size,ways,line"): this
/// machine's first-level data cache and its second level (cpu 0's, from `/sys`), the second's
/// size `second_bytes` if given; `None` where the machine does not say, and then no misses are
/// counted.
fn cache_geometry(second_bytes: Option<u64>) -> Option<[String; 2]> {
    let mut first = None;
    let mut second = None;
    for index in 0..8 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{index}");
        let read = |name: &str| std::fs::read_to_string(format!("{dir}/{name}")).ok();
        let (Some(level), Some(kind)) = (read("level"), read("type")) else { continue };
        let geometry = |size: Option<u64>| -> Option<String> {
            let size = size.or_else(|| parse_cache_size(read("size")?.trim()))?;
            let ways: u64 = read("ways_of_associativity")?.trim().parse().ok()?;
            let line: u64 = read("coherency_line_size")?.trim().parse().ok()?;
            Some(format!("{size},{ways},{line}"))
        };
        match (level.trim(), kind.trim()) {
            ("1", "Data") => first = geometry(None),
            ("2", "Unified") => second = geometry(second_bytes),
            _ => {}
        }
    }
    Some([first?, second?])
}

/// A cache size as `/sys` writes it (`32K`, `1024K`, `2M`), in bytes.
fn parse_cache_size(text: &str) -> Option<u64> {
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => text.split_at(at),
        None => (text, ""),
    };
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

fn function_of(phase: &str) -> &'static str {
    PHASES.iter().find(|p| p.phase == phase).map_or("", |p| p.function)
}

fn print(args: &CountArgs, ticks: usize, off: &Counted, on: &Counted) {
    println!(
        "{} reference rooms (10 clients each, 256 bodies, 64 moving, 128 Hz), {ticks} measured \
         ticks: {} room-ticks; the worker's instructions per room-tick (callgrind)",
        args.rooms, on.room_ticks
    );
    let misses = off.misses.as_ref();
    let column = if misses.is_some() { "L2 misses (off)" } else { "" };
    println!(
        "{:<12} {:>14} {:>14} {:>9} {column:>16}",
        "phase", "telemetry off", "telemetry on", "on/off"
    );
    let missed = |name: &str| misses.map_or(String::new(), |m| format!("{:.0}", m.phases[name]));
    let names = PHASES.iter().map(|p| p.phase).chain(["other"]);
    for name in names {
        let (a, b) = (off.phases[name], on.phases[name]);
        println!("{name:<12} {a:>14.0} {b:>14.0} {:>9.3} {:>16}", b / a.max(1.0), missed(name));
    }
    for phase in PHASES.iter().filter(|p| off.phases[p.phase] == 0.0) {
        println!(
            "note: callgrind saw no call to {} ({}): the build inlined it, and its \
             instructions count in the phase that called it",
            phase.function, phase.phase
        );
    }
    let ratio = on.total / off.total;
    let total = misses.map_or(String::new(), |m| format!("{:.0}", m.total));
    println!("{:<12} {:>14.0} {:>14.0} {ratio:>9.3} {total:>16}", "total", off.total, on.total);
    match misses {
        Some(m) => println!(
            "L2 misses: callgrind's cache model with this machine's L1d ({}) and {} L2 ({}) as \
             size,ways,line; {:.0} of the {:.0} a room-tick are writes; no prefetcher modelled",
            m.first_level,
            if args.second_level.is_some() { "a smaller" } else { "its" },
            m.second_level,
            m.writes,
            m.total
        ),
        None => println!("L2 misses: not counted (the machine does not describe its caches)"),
    }
    println!(
        "telemetry's cost: {:.0} instructions per room-tick, {:.1}% of the worker's \
         instructions (target: at most 2%)",
        on.total - off.total,
        (ratio - 1.0) * 100.0
    );
    let (d_in, d_out) = (on.datagrams_in_per_room_tick, on.datagrams_out_per_room_tick);
    println!(
        "per datagram: open {:.0} instructions ({d_in:.1} in per room-tick), seal {:.0} \
         ({d_out:.1} out per room-tick)",
        on.phases["open"] / d_in.max(1e-9),
        on.phases["seal"] / d_out.max(1e-9)
    );
    println!(
        "(under valgrind a clock read is a syscall counted as about 10 instructions; natively \
         it costs what `rally-bench count` without --callgrind prints: telemetry's clock reads \
         are undercounted, see docs/benchmarks.md)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotate_lines_give_each_function_its_largest_inclusive_count() {
        // Goal: a function listed twice (its own line, and code inlined from another file)
        // counts once, with its whole count; names keep their `::` and generics.
        let text = "\
184,505,284 (100.0%)  PROGRAM TOTALS
 41,491,000 (22.49%)  /w/crates/proto/src/crypto.rs:rally_proto::crypto::PacketKeys::seal [/b]
 41,245,240 (22.35%)  /r/chacha20poly1305/src/lib.rs:rally_proto::crypto::PacketKeys::seal
  7,806,080 ( 4.23%)  /w/crates/engine/src/room.rs:rally_engine::room::Room<S>::receive [/b]
";
        let counts = parse_inclusive(text);
        assert_eq!(counts["rally_proto::crypto::PacketKeys::seal"], 41_491_000);
        assert_eq!(counts["rally_engine::room::Room<S>::receive"], 7_806_080);
        assert!(!counts.contains_key("PROGRAM TOTALS"));
        let mut inclusive = counts;
        inclusive.insert(TOTAL_FUNCTION.into(), 101_000_000);
        // The harness's copy of datagrams out is the socket's: not the worker's.
        inclusive.insert(HARNESS_FUNCTION.into(), 1_000_000);
        let counted = counted(true, 1_000, &inclusive);
        assert_eq!(counted.total, 100_000.0);
        assert_eq!(counted.phases["seal"], 41_491.0);
        let named: f64 = PHASES.iter().map(|p| counted.phases[p.phase]).sum();
        assert_eq!(named + counted.phases["other"], counted.total);
    }

    #[test]
    fn cache_sizes_read_as_sys_writes_them() {
        assert_eq!(parse_cache_size("32K"), Some(32 * 1024));
        assert_eq!(parse_cache_size("1024K"), Some(1 << 20));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("1G"), None);
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size("99999999999999999999M"), None);
    }
}
