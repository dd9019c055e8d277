#!/usr/bin/env bash
# Where the host worker's time goes on real sockets: `rally-bench load` at one step (32 rooms by
# default) under `perf record -e cpu-clock` (a timer's samples: this needs no hardware counters,
# which virtual machines often lack), then the worker thread's samples and the kernel floor's
# bare server's, split into kernel and user time and into the phases `rally-bench count` uses
# (docs/benchmarks.md, "Where the own share's time goes"). The count says how many
# instructions each phase runs; this says how long they take among the kernel's own work, which
# is what the own share above the floor is made of.
# Usage: scripts/load-profile.sh [OUT_DIR] [ROOMS]   (about 3 minutes; needs root for --realtime)
# RALLY_BENCH=<binary> profiles that build instead of building this checkout's.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/load-profile}"
rooms="${2:-32}"
if ! command -v perf >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq linux-perf
    else
        echo "perf is needed: sudo apt-get install linux-perf" >&2
        exit 1
    fi
fi
bench="${RALLY_BENCH:-}"
if [ -z "$bench" ]; then
    cargo build --release --locked --quiet -p rally-bench
    bench="${CARGO_TARGET_DIR:-target}/release/rally-bench"
fi
mkdir -p "$out"
# Kernel symbols for the syscalls' share; harmless if the kernel refuses.
echo 0 > /proc/sys/kernel/kptr_restrict 2>/dev/null || true
echo -1 > /proc/sys/kernel/perf_event_paranoid 2>/dev/null || true
# DWARF call graphs: release builds keep no frame pointers. 1999 Hz keeps the data to ~400 MB.
perf record -q -e cpu-clock -F 1999 --call-graph dwarf,8192 -o "$out/perf.data" -- \
    "$bench" load --realtime 10 --to-saturation --rooms "$rooms" > "$out/load.txt" 2>&1
for comm in rally-worker-0 rally-bare-host; do
    perf script -i "$out/perf.data" --comms "$comm" -F tid,ip,sym 2>/dev/null > "$out/$comm.stacks"
done
rm -f "$out/perf.data"
python3 - "$out" <<'EOF'
import collections, re, sys
out = sys.argv[1]
text = open(f"{out}/load.txt").read()
m = re.search(r"kernel floor at (\d+) rooms .*?: ([\d.]+) us CPU per room-tick; "
              r"Rally ([\d.]+) there, ([\d.-]+) of it its own", text, re.S)

def stacks(path):
    """(whether the leaf is the kernel's, the frames leaf first, inlined ones included) for
    each sample."""
    samples, frames, kernel = [], None, False
    for line in open(path):
        if not line.strip():
            if frames:
                samples.append((kernel, frames))
            frames = None
        elif not line.startswith("\t"):
            frames = []
        elif frames is not None:
            parts = line.strip().split(" ", 1)
            if len(parts) > 1:
                if not frames:
                    kernel = parts[0].startswith("ffffffff")
                frames.append(parts[1].replace(" (inlined)", ""))
    if frames:
        samples.append((kernel, frames))
    return samples

# The count's phases, innermost first: a sample goes to the first phase any of its frames
# (from the leaf up) belongs to, so sealing inside the send path is `seal`, not `encode`. A phase
# is named by a path (a function called) or by a bare name (the same function inlined: perf
# prints inlined frames without their path).
PHASES = [
    ("clock", ("__vdso_clock_gettime", "clock_gettime"), ()),
    ("seal", ("PacketKeys::seal",), ("seal_tagged",)),
    ("open", ("PacketKeys::open",), ("open_tagged",)),
    ("simulate", ("Simulation>::step",), ()),
    ("ingest", ("Room<S>::receive",), ("receive<rally_app",)),
    ("replicate", ("Room<S>::replicate",), ("replicate<rally_app",)),
    ("transmit", ("Room<S>::transmit",), ("transmit<rally_app",)),
    ("decode", ("Endpoint::handle_datagram",), ("handle_datagram",)),
    ("encode", ("Endpoint::poll_transmit",), ("poll_transmit",)),
    ("sleep", ("sleep_until", "thread::functions::sleep"), ()),
]

def phase(frames):
    for frame in frames:
        bare = frame.split("<", 1)[0]
        for name, paths, inlined in PHASES:
            if any(p in frame for p in paths) or any(
                    frame.startswith(i) if "<" in i else bare == i for i in inlined):
                return name
    return "other"

def report(comm, per_tick):
    samples = stacks(f"{out}/{comm}.stacks")
    n = len(samples)
    if n == 0:
        print(f"{comm}: no samples")
        return
    kernel = collections.Counter()
    user = collections.Counter()
    leaves = collections.Counter()
    for in_kernel, frames in samples:
        (kernel if in_kernel else user)[phase(frames)] += 1
        if not in_kernel:
            leaves[frames[0]] += 1
    # The load run's CPU a room-tick leaves the game's step out: so does the scale.
    scale = per_tick / (n - user["simulate"] - kernel["simulate"]) if per_tick else None
    us = lambda k: f"{k * scale:7.2f}" if scale else "      -"
    k, u = sum(kernel.values()), sum(user.values())
    print(f"\n{comm}: {n} samples; kernel {100 * k / n:.1f}%, user {100 * u / n:.1f}%"
          + (f" (scaled to its {per_tick:.1f} us a room-tick)" if per_tick else ""))
    print(f"{'phase':<10} {'user %':>7} {'user us':>8} {'kernel %':>9} {'kernel us':>10}")
    for name in [p for p, _, _ in PHASES] + ["other"]:
        if user[name] or kernel[name]:
            print(f"{name:<10} {100 * user[name] / n:7.2f} {us(user[name])} "
                  f"{100 * kernel[name] / n:9.2f}   {us(kernel[name])}")
    print(f"{'total':<10} {100 * u / n:7.2f} {us(u)} {100 * k / n:9.2f}   {us(k)}")
    print("user-space leaves, most samples first:")
    for frame, count in leaves.most_common(15):
        print(f"  {100 * count / n:5.2f}%  {frame[:90]}")

if m:
    rooms, floor, rally, own = m.groups()
    print(f"{rooms} rooms: Rally {rally} us CPU a room-tick (without simulate), the kernel "
          f"floor {floor}, own share {own} (this one run: it moves by 10 us from run to run)")
    report("rally-worker-0", float(rally))
    report("rally-bare-host", float(floor))
else:
    print("no kernel floor line in the load run's output; shares only")
    report("rally-worker-0", None)
    report("rally-bare-host", None)
print("\n(samples are of the whole step, its warm-up included; us = this thread's samples "
      "scaled to the run's CPU a room-tick, which leaves simulate out)")
EOF
