//! `rally-bench transport`: the W1 workload of docs/design.md.
//!
//! A client sends a 400-byte payload every 1/60 s on a reliable-ordered stream; the server
//! echoes each one; the client records the round trip from handing the payload to the library
//! to receiving its echo. Every peer runs through the same emulated link profiles with the same
//! seeds, in one run. In `sim` mode everything runs in virtual time: Rally's endpoints through
//! `rally-sim`, KCP (the original C ikcp.c, through the kcp-rs crate) driven by the same clock.
//!
//! Beside each peer's figures the report gives the link's own RTT on the same profile and
//! seeds: what an ideal protocol (one packet per payload, no loss, no traffic of its own) would
//! measure; see [`ideal`]. It is the first row of each profile, peer `link`. Sim mode also gives
//! the floor of any protocol that sends two copies of each payload (the most W1's byte budget
//! holds), peer `floor`; see [`floor`]. Neither is a library: the targets compare Rally with the
//! link and with the other peers only.

mod code_ideal;
mod crypto_cost;
mod floor;
mod ideal;
mod kcp;
mod rally;
mod real;
mod repair_cost;

use crate::machine::Machine;
use crate::plot;
use crate::stats::{summary, Summary};
use indicatif::{ProgressBar, ProgressStyle};
use rally_netem::{Link, LinkConfig, LinkProfile, PROFILE_NAMES};
use rally_proto::Instant;
use serde::Serialize;
use std::error::Error;
use std::time::Duration;

/// The W1 payload size.
pub const PAYLOAD_BYTES: usize = 400;
/// The W1 send rate.
pub const SEND_HZ: u64 = 60;
/// The W1 send interval.
pub const SEND_INTERVAL: Duration = Duration::from_nanos(16_666_667);
/// Peers of sim mode, in report order.
pub const SIM_PEERS: [&str; 6] =
    ["rally", "rally-coded", "kcp-source", "kcp-flush", "floor", "code-ideal"];
/// Rows that are references, not libraries.
const REFERENCES: [&str; 3] = ["link", "floor", "code-ideal"];

/// Options of `rally-bench transport`.
#[derive(Debug, clap::Args)]
pub struct TransportArgs {
    /// `sim`: virtual time through the emulator; `real`: real sockets and the OS clock through
    /// a real-time relay, every peer the real library.
    #[arg(long, default_value = "sim")]
    pub mode: String,
    /// Shorter runs and fewer seeds: finishes in well under a minute.
    #[arg(long)]
    pub quick: bool,
    /// Seeds per profile in sim mode (default 5, or 2 with `--quick`): more seeds shrink the
    /// noise of a mean, which moves by about 0.002 between neighbouring configurations at 5.
    #[arg(long)]
    pub seeds: Option<usize>,
    /// Link profiles: W1 names separated by commas, or one spec per `--profile`.
    #[arg(long, value_delimiter = ',')]
    pub profiles: Vec<String>,
    /// A link profile spec such as `clean,loss=5%` (repeatable).
    #[arg(long = "profile")]
    pub profile_specs: Vec<String>,
    /// Peers to run, separated by commas (default: all).
    #[arg(long, value_delimiter = ',')]
    pub peers: Vec<String>,
    /// Write the report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json: Option<std::path::PathBuf>,
    /// Draw one CDF plot per profile into this directory.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<std::path::PathBuf>,
}

/// What one run of one peer over one profile and seed measured.
#[derive(Debug, Default)]
pub struct Run {
    /// Round trips, milliseconds, one per echoed payload.
    pub rtts_ms: Vec<f64>,
    /// Payload bytes handed to the library, both directions.
    pub payload_bytes: u64,
    /// Datagram bytes sent into the links, both directions.
    pub wire_bytes: u64,
    /// Payloads the library refused (a full send queue): load it shed.
    pub refused: u64,
    /// Payloads sent but never echoed by the end of the run.
    pub missing: u64,
}

/// One row of the report.
#[derive(Debug, Clone, Serialize)]
struct Row {
    peer: String,
    profile: String,
    samples: usize,
    rtt_ms: Summary,
    link_rtt_ms: LinkRtt,
    wire_bytes_per_payload_byte: f64,
    /// Mean RTT over the link's own mean RTT.
    rtt_over_link: f64,
    refused: u64,
    missing: u64,
    #[serde(skip)]
    rtts_ms: Vec<f64>,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct LinkRtt {
    mean: f64,
    p99: f64,
}

/// Runs the benchmark.
pub fn run(args: &TransportArgs) -> Result<(), Box<dyn Error>> {
    let profiles = profiles(args)?;
    // Real mode also reports the link each profile's relay applied.
    let (rows, applied) = match args.mode.as_str() {
        "sim" => (run_sim(args, &profiles)?, Vec::new()),
        "real" => run_real(args, &profiles)?,
        other => return Err(format!("--mode {other}: use sim or real").into()),
    };
    print_table(&rows, &args.mode);
    print_targets(&rows);
    if args.mode == "real" {
        print_sanity(&rows);
    }
    let crypto = crypto_cost::measure()?;
    println!(
        "encryption (Rally's rows are sealed): {:.2} us of CPU per packet to seal and open \
         ({:.2} sealed, {:.2} plaintext, {} packets of {PAYLOAD_BYTES} bytes), and {} bytes \
         of tag; with {}-byte tags (rally-coded) {:.2} us ({:.2} sealed)",
        crypto.cost_us_per_packet,
        crypto.sealed_us_per_packet,
        crypto.plaintext_us_per_packet,
        crypto.packets,
        crypto.tag_bytes,
        crypto.short_tag_bytes,
        crypto.short_tag_cost_us_per_packet,
        crypto.short_tag_sealed_us_per_packet
    );
    let repair = repair_cost::measure()?;
    println!(
        "streaming repair (rally-coded): {:.2} us of CPU per {PAYLOAD_BYTES}-byte payload to \
         encode and decode (a repair of {} messages per payload, 10% of messages and repairs \
         lost, {} decoded in {} payloads)",
        repair.us_per_payload, repair.window, repair.decoded, repair.payloads
    );
    if let Some(path) = &args.json {
        let applied = applied_json(&profiles, &applied);
        write_json(path, args, &rows, &applied, (&crypto, &repair))?;
    }
    if let Some(dir) = &args.plot {
        draw(dir, &profiles, &rows, &args.mode)?;
    }
    Ok(())
}

/// Every peer in virtual time, through the emulator, over `seeds` seeds per profile.
fn run_sim(args: &TransportArgs, profiles: &[LinkProfile]) -> Result<Vec<Row>, Box<dyn Error>> {
    let peers = peers(args, &SIM_PEERS)?;
    let (seconds, seeds) = if args.quick { (20, 2) } else { (60, 5) };
    let seeds = args.seeds.unwrap_or(seeds);
    if seeds == 0 {
        return Err("--seeds: at least 1".into());
    }
    let duration = Duration::from_secs(seconds);
    let progress = progress((profiles.len() * peers.len() * seeds) as u64);
    let mut rows = Vec::new();
    for profile in profiles {
        let ideal = ideal_run(&profile.config, seeds, duration);
        let link = summary(&ideal.rtts_ms);
        rows.push(row("link", &profile.name, link, ideal));
        for peer in &peers {
            let reference = peer == "floor" || peer == "code-ideal";
            if reference && !floor::applies(&profile.config) {
                progress.inc(seeds as u64);
                continue;
            }
            progress.set_message(format!("{peer} {}", profile.name));
            let mut merged = Run::default();
            let link_rtt = Duration::from_secs_f64(link.mean / 1e3);
            // The same seeds for every peer, so each meets the same link decisions' statistics.
            for seed in 0..seeds as u64 {
                let run = run_peer(peer, &profile.config, seed, duration, link_rtt)?;
                merge(&mut merged, run);
                progress.inc(1);
            }
            rows.push(row(peer, &profile.name, link, merged));
        }
    }
    progress.finish_and_clear();
    Ok(rows)
}

/// Every peer on real sockets through the real-time relay: rounds over every profile and
/// every peer in turn, so that the machine's noise falls on all of them alike.
fn run_real(
    args: &TransportArgs,
    profiles: &[LinkProfile],
) -> Result<(Vec<Row>, Vec<crate::testbed::RelayStats>), Box<dyn Error>> {
    let mut peers = peers(args, &real::REAL_PEERS)?;
    // The bare UDP echo is every row's baseline: it always runs, first.
    peers.retain(|p| p != "link");
    peers.insert(0, "link".to_string());
    peers.retain(|peer| match real::available(peer) {
        Ok(()) => true,
        Err(why) => {
            println!("skipped {peer}: {why}");
            false
        }
    });
    // Eight peers over five profiles: --quick in under 3 minutes, the full run in under 15.
    let (seconds, rounds) = if args.quick { (3, 1) } else { (8, 2) };
    let duration = Duration::from_secs(seconds);
    let progress = progress((rounds * profiles.len() * peers.len()) as u64);
    let mut runs: Vec<Vec<Run>> = (0..profiles.len() * peers.len()).map(|_| Vec::new()).collect();
    let mut applied = vec![crate::testbed::RelayStats::default(); profiles.len()];
    let mut failed = std::collections::BTreeSet::new();
    for round in 0..rounds as u64 {
        for (p, profile) in profiles.iter().enumerate() {
            for (k, peer) in peers.iter().enumerate() {
                progress.set_message(format!("{peer} {}", profile.name));
                progress.inc(1);
                if failed.contains(peer) {
                    continue;
                }
                // Each round's seed is the same for every peer: the same link decisions.
                match real::run(peer, &profile.config, round, duration) {
                    Ok(done) => {
                        applied[p].up.merge(&done.relay.up);
                        applied[p].down.merge(&done.relay.down);
                        runs[p * peers.len() + k].push(done.run);
                    }
                    Err(e) => {
                        progress.println(format!(
                            "{peer} failed on {}: {e}; skipping it",
                            profile.name
                        ));
                        failed.insert(peer.clone());
                    }
                }
            }
        }
    }
    progress.finish_and_clear();
    let mut rows = Vec::new();
    for (p, profile) in profiles.iter().enumerate() {
        let mut link_run = Run::default();
        runs[p * peers.len()].drain(..).for_each(|r| merge(&mut link_run, r));
        let link = summary(&link_run.rtts_ms);
        rows.push(row("link", &profile.name, link, link_run));
        for (k, peer) in peers.iter().enumerate().skip(1) {
            if failed.contains(peer) {
                continue;
            }
            let mut merged = Run::default();
            runs[p * peers.len() + k].drain(..).for_each(|r| merge(&mut merged, r));
            rows.push(row(peer, &profile.name, link, merged));
        }
    }
    print_applied(profiles, &applied);
    Ok((rows, applied))
}

fn progress(total: u64) -> ProgressBar {
    let progress = ProgressBar::new(total);
    progress.set_style(
        ProgressStyle::with_template("{msg:>24} [{bar:40}] {pos}/{len} runs")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    progress
}

/// The link each profile asked for beside what the relay applied, over all its runs (the
/// applied delay runs from send to delivery: the bottleneck's serialization and queue
/// included, as a packet meets them).
fn print_applied(profiles: &[LinkProfile], applied: &[crate::testbed::RelayStats]) {
    println!(
        "{:<14} {:>18} {:>10} {:>10} {:>18} {:>18} {:>8}",
        "link applied",
        "asked delay ms",
        "loss up",
        "loss down",
        "delay up ms",
        "delay down ms",
        "q drops"
    );
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for (profile, stats) in profiles.iter().zip(applied) {
        let (up, down) = (&stats.up, &stats.down);
        println!(
            "{:<14} {:>18} {:>9.2}% {:>9.2}% {:>18} {:>18} {:>8}",
            profile.name,
            format!("{:.1} sd {:.1}", ms(profile.config.delay), ms(profile.config.jitter)),
            up.loss_rate() * 100.0,
            down.loss_rate() * 100.0,
            format!("{:.1} sd {:.1}", ms(up.delay_mean()), ms(up.delay_sd())),
            format!("{:.1} sd {:.1}", ms(down.delay_mean()), ms(down.delay_sd())),
            up.queue_dropped + down.queue_dropped,
        );
    }
}

fn profiles(args: &TransportArgs) -> Result<Vec<LinkProfile>, Box<dyn Error>> {
    let mut specs: Vec<String> = args.profiles.clone();
    specs.extend(args.profile_specs.iter().cloned());
    if specs.is_empty() {
        specs = PROFILE_NAMES.iter().map(|s| s.to_string()).collect();
    }
    specs
        .iter()
        .map(|s| LinkProfile::parse(s).map_err(|e| format!("--profile {s}: {e}").into()))
        .collect()
}

/// The peers asked for (all of `known` by default), each checked against `known`.
fn peers(args: &TransportArgs, known: &[&str]) -> Result<Vec<String>, Box<dyn Error>> {
    if args.peers.is_empty() {
        return Ok(known.iter().map(|s| s.to_string()).collect());
    }
    for peer in &args.peers {
        if !known.contains(&peer.as_str()) {
            let (mode, names) = (&args.mode, known.join(", "));
            return Err(format!("unknown peer `{peer}`; {mode} mode has {names}").into());
        }
    }
    Ok(args.peers.clone())
}

fn run_peer(
    peer: &str,
    link: &LinkConfig,
    seed: u64,
    duration: Duration,
    link_rtt: Duration,
) -> Result<Run, Box<dyn Error>> {
    match peer {
        "rally" => rally::run(link, seed, duration, false),
        "rally-coded" => rally::run(link, seed, duration, true),
        "kcp-source" => Ok(kcp::run(link, seed, duration, false)),
        "kcp-flush" => Ok(kcp::run(link, seed, duration, true)),
        "floor" => Ok(floor::run(link, seed, duration, link_rtt)),
        "code-ideal" => Ok(code_ideal::run(link, seed, duration)),
        other => Err(format!("unknown peer {other}").into()),
    }
}

fn merge(into: &mut Run, run: Run) {
    into.rtts_ms.extend(run.rtts_ms);
    into.payload_bytes += run.payload_bytes;
    into.wire_bytes += run.wire_bytes;
    into.refused += run.refused;
    into.missing += run.missing;
}

/// The ideal protocol's round trips over `seeds` runs of `profile`.
fn ideal_run(profile: &LinkConfig, seeds: usize, duration: Duration) -> Run {
    let mut merged = Run::default();
    for seed in 0..seeds as u64 {
        merge(&mut merged, ideal::run(profile, seed, duration));
    }
    merged
}

/// A row of `run`, compared with the link's own round trips `link`.
fn row(peer: &str, profile: &str, link: Summary, run: Run) -> Row {
    let rtt = summary(&run.rtts_ms);
    Row {
        peer: peer.into(),
        profile: profile.into(),
        samples: run.rtts_ms.len(),
        rtt_ms: rtt,
        link_rtt_ms: LinkRtt { mean: link.mean, p99: link.p99 },
        wire_bytes_per_payload_byte: run.wire_bytes as f64 / run.payload_bytes.max(1) as f64,
        rtt_over_link: rtt.mean / link.mean.max(1e-9),
        refused: run.refused,
        missing: run.missing,
        rtts_ms: run.rtts_ms,
    }
}

fn print_table(rows: &[Row], mode: &str) {
    println!(
        "{:<14} {:<11} {:>7} {:>8} {:>7} {:>8} {:>8} {:>8} {:>9} {:>9} {:>7} {:>6}",
        "profile",
        "peer",
        "samples",
        "mean ms",
        "sd",
        "p50",
        "p99",
        "max",
        "link mean",
        "link p99",
        "x link",
        "wire/B"
    );
    for r in rows {
        println!(
            "{:<14} {:<11} {:>7} {:>8.1} {:>7.1} {:>8.1} {:>8.1} {:>8.1} {:>9.1} {:>9.1} \
             {:>7.2} {:>6.2} {:>6}",
            r.profile,
            r.peer,
            r.samples,
            r.rtt_ms.mean,
            r.rtt_ms.sd,
            r.rtt_ms.p50,
            r.rtt_ms.p99,
            r.rtt_ms.max,
            r.link_rtt_ms.mean,
            r.link_rtt_ms.p99,
            r.rtt_over_link,
            r.wire_bytes_per_payload_byte,
            r.refused
        );
    }
    let link = match mode {
        "real" => {
            "a bare UDP echo through the same relay (one datagram per payload, no \
                   protocol; lost payloads stay lost, the survivors' round trips are the link's)"
        }
        _ => {
            "an ideal protocol on the same profile (one packet per payload, no loss, no \
              traffic of its own)\nfloor = two copies of each payload 2 ms apart, no headers \
              or acks, and perfect knowledge of loss: both copies again one send interval plus \
              one link round trip after a send both were lost in (the most W1's 2.5x byte \
              budget holds; a protocol within it pays for acks and loss detection on top)\n\
              code-ideal = Rally's streaming repair with perfect knowledge of loss: each payload \
              once, a repair 2 ms after any send that leaves the receiver a hole, no headers or \
              acks\nrally-coded = Rally with streaming repair on (Repair::adaptive) and 12-byte \
              AEAD tags on data packets (short_tag)"
        }
    };
    println!(
        "link = {link}\nx link = mean RTT / the link's mean RTT; wire/B = bytes on the wire per \
         payload byte"
    );
}

/// Whether the source's table (docs/design.md, W1) reproduces here: on `clean` ENet within a
/// few milliseconds of the link and KCP as the source ran it about one KCP interval (10 ms)
/// slower; on `netem-10-25` KCP as the source ran it near 40 ms on a 27.5 ms link (1.45x).
/// A shape that does not reproduce means something here differs from the source's setup.
fn print_sanity(rows: &[Row]) {
    let mean = |profile: &str, peer: &str| {
        rows.iter().find(|r| r.profile == profile && r.peer == peer).map(|r| r.rtt_ms.mean)
    };
    let mut checks = Vec::new();
    if let (Some(link), Some(enet)) = (mean("clean", "link"), mean("clean", "enet")) {
        let over = enet - link;
        checks.push((
            format!("clean: ENet {over:+.1} ms over the link (source: within a few ms)"),
            over <= 5.0,
        ));
    }
    if let (Some(link), Some(kcp)) = (mean("clean", "link"), mean("clean", "kcp-source")) {
        let over = kcp - link;
        let text = format!(
            "clean: KCP as the source ran it {over:+.1} ms over the link (source: about one \
             10 ms interval)"
        );
        checks.push((text, (5.0..=20.0).contains(&over)));
    }
    if let (Some(link), Some(kcp)) =
        (mean("netem-10-25", "link"), mean("netem-10-25", "kcp-source"))
    {
        let ratio = kcp / link;
        let text = format!(
            "netem-10-25: KCP as the source ran it {kcp:.1} ms on a {link:.1} ms link, {ratio:.2}x \
             (source: near 40 on 27.5, 1.45x)"
        );
        checks.push((text, (1.25..=1.75).contains(&ratio)));
    }
    for (text, reproduces) in checks {
        println!("{} {text}", if reproduces { "SHAPE OK  " } else { "SHAPE DIFF" });
    }
}

/// The W1 targets for Rally (issue #27): the mean over the link's, and the p99 in
/// milliseconds (`None`: the link's p99 plus one send interval).
const TARGETS: [(&str, f64, Option<f64>); 4] = [
    ("clean", 1.02, None),
    ("netem-10-25", 1.045, Some(62.0)),
    ("bernoulli-10", 1.08, Some(66.0)),
    ("bursty-10", 1.45, Some(160.0)),
];

/// The W1 targets, checked against this run for each Rally row (with and without repairs).
fn print_targets(rows: &[Row]) {
    for r in rows.iter().filter(|r| r.peer.starts_with("rally")) {
        let Some((_, limit, p99_ms)) = TARGETS.iter().find(|(p, ..)| *p == r.profile) else {
            continue;
        };
        // The fastest other library on this profile (the link and the references are none).
        let best = rows
            .iter()
            .filter(|k| k.profile == r.profile && !k.peer.starts_with("rally"))
            .filter(|k| !REFERENCES.contains(&k.peer.as_str()))
            .min_by(|a, b| a.rtt_ms.mean.total_cmp(&b.rtt_ms.mean));
        let (best_name, best_mean) =
            best.map_or(("none", f64::INFINITY), |b| (&*b.peer, b.rtt_ms.mean));
        let send_ms = SEND_INTERVAL.as_secs_f64() * 1e3;
        let p99_limit = p99_ms.unwrap_or(r.link_rtt_ms.p99 + send_ms);
        let bytes_limit = if r.profile == "clean" { 1.3 } else { 2.5 };
        let checks = [
            (format!("mean/link {:.3} <= {limit}", r.rtt_over_link), r.rtt_over_link <= *limit),
            (format!("p99 {:.1} <= {p99_limit:.1}", r.rtt_ms.p99), r.rtt_ms.p99 <= p99_limit),
            (
                format!("mean {:.1} < the next best, {best_name}, {best_mean:.1}", r.rtt_ms.mean),
                r.rtt_ms.mean < best_mean,
            ),
            (
                format!("wire {:.2} <= {bytes_limit}x payload", r.wire_bytes_per_payload_byte),
                r.wire_bytes_per_payload_byte <= bytes_limit,
            ),
        ];
        for (text, met) in checks {
            let verdict = if met { "MET " } else { "MISS" };
            println!("{verdict} {} {}: {}", r.peer, r.profile, text);
        }
        if let Some(floor) = rows.iter().find(|k| k.profile == r.profile && k.peer == "floor") {
            note_floor(r, floor, *limit, p99_limit);
        }
    }
}

/// Says where the two-copy floor itself misses a target: no protocol within the byte budget
/// that learns of losses from its acks can meet it there.
fn note_floor(rally: &Row, floor: &Row, mean_limit: f64, p99_limit: f64) {
    let profile = &rally.profile;
    if floor.rtt_over_link > mean_limit {
        println!(
            "NOTE {profile}: the two-copy floor's mean is {:.3}x the link, above the target of \
             {mean_limit}; {}'s is {:.3}x",
            floor.rtt_over_link, rally.peer, rally.rtt_over_link
        );
    }
    if floor.rtt_ms.p99 > p99_limit {
        println!(
            "NOTE {profile}: the two-copy floor's p99 is {:.1}, above the target of \
             {p99_limit:.1}; {}'s is {:.1}",
            floor.rtt_ms.p99, rally.peer, rally.rtt_ms.p99
        );
    }
}

/// What each profile's relays applied, per direction, as JSON (empty in sim mode).
fn applied_json(
    profiles: &[LinkProfile],
    applied: &[crate::testbed::RelayStats],
) -> serde_json::Value {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let direction = |l: &rally_netem::LinkStats| {
        serde_json::json!({
            "packets": l.sent,
            "loss": l.loss_rate(),
            "queue_dropped": l.queue_dropped,
            "delay_ms": { "mean": ms(l.delay_mean()), "sd": ms(l.delay_sd()) },
        })
    };
    let links: Vec<serde_json::Value> = profiles
        .iter()
        .zip(applied)
        .map(|(p, a)| {
            let (up, down) = (direction(&a.up), direction(&a.down));
            serde_json::json!({ "profile": p.name, "up": up, "down": down })
        })
        .collect();
    serde_json::Value::Array(links)
}

fn write_json(
    path: &std::path::Path,
    args: &TransportArgs,
    rows: &[Row],
    applied: &serde_json::Value,
    costs: (&crypto_cost::CryptoCost, &repair_cost::RepairCost),
) -> Result<(), Box<dyn Error>> {
    let report = serde_json::json!({
        "bench": "transport",
        "encryption": costs.0,
        "repair_cost": costs.1,
        "mode": args.mode,
        "quick": args.quick,
        "machine": Machine::detect(),
        "workload": { "payload_bytes": PAYLOAD_BYTES, "send_hz": SEND_HZ },
        "results": rows,
        "links_applied": applied,
    });
    super::write_json(path, &report)
}

fn draw(
    dir: &std::path::Path,
    profiles: &[LinkProfile],
    rows: &[Row],
    mode: &str,
) -> Result<(), Box<dyn Error>> {
    std::fs::create_dir_all(dir)?;
    for profile in profiles {
        let series: Vec<(String, Vec<f64>)> = rows
            .iter()
            .filter(|r| r.profile == profile.name)
            .map(|r| (r.peer.clone(), r.rtts_ms.clone()))
            .collect();
        let file = profile.name.replace([',', '=', '%', '/'], "_");
        let (suffix, clock) = match mode {
            "real" => ("-real", "real sockets"),
            _ => ("", "virtual time"),
        };
        let path = dir.join(format!("transport-{file}{suffix}.png"));
        // The bodies of the distributions near the link, not the seconds-long tails of the
        // peers that collapse (which would squeeze everything else against the axis): four
        // times the link's median, or half as much again as Rally's 99th percentile if later.
        // A peer whose median lies past the cut is named in the title.
        let of = |peer: &str| series.iter().find(|(p, _)| p == peer).map(|(_, v)| summary(v));
        let link = of("link").map_or(0.0, |s| s.p50);
        let rally = of("rally").map_or(0.0, |s| s.p99);
        let cut = (4.0 * link).max(1.5 * rally);
        let beyond: Vec<&str> =
            series.iter().filter(|(_, v)| summary(v).p50 > cut).map(|(p, _)| p.as_str()).collect();
        let mut title = format!("W1 RTT CDF, {} ({clock}; cut at {cut:.0} ms", profile.name);
        if !beyond.is_empty() {
            title.push_str(&format!("; mostly beyond: {}", beyond.join(", ")));
        }
        title.push(')');
        plot::cdf(&path, &title, "round trip, ms", &series, &[], Some(cut))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Sends `packet` of `size` bytes into `link` at `now`; returns whether it survives the link's
/// loss and queue (the link decides a packet's fate when it is sent): the references' perfect
/// knowledge of loss.
pub fn send_surviving<T: Clone>(link: &mut Link<T>, now: Instant, packet: T, size: usize) -> bool {
    let dropped = |l: &Link<T>| {
        let s = l.stats();
        s.lost + s.queue_dropped + s.overflow_dropped + s.oversize_dropped
    };
    let before = dropped(link);
    link.send(now, packet, size);
    dropped(link) == before
}

/// Records the round trips of the payloads in `echoed`, arrived back at `now`.
pub fn record_echoes(run: &mut Run, start: Instant, now: Instant, echoed: std::ops::Range<usize>) {
    for index in echoed {
        run.rtts_ms.push((now - send_time(start, index as u64)).as_secs_f64() * 1e3);
    }
}

/// The instant `n` send intervals after `start`.
pub fn send_time(start: Instant, n: u64) -> Instant {
    start + SEND_INTERVAL * n as u32
}
