// The C# binding against a real room, under Mono: joins a `rally server --scene` room over UDP
// with a token from `rally token issue`, takes the block under the grab point and carries it to
// a target, and exits 0 only if the room's newest state shows the hand there and the block held
// beside it, as examples/c/sample.c checks; then prints the latency meter's readout. It also
// checks the struct layouts against the C compiler's and the documented errors (a malformed
// token, an array too short for the entities, a call after close). With --bench N it then
// times N frames of the steady state (send one input, update, poll events, read the entities)
// in thread CPU time and counts the managed bytes they allocated; --json FILE writes those
// figures (mean, p50, p99, max, per phase, bytes allocated) as JSON too. --io-thread on|wake
// runs the library's I/O thread (Config.IoThread); the bench then also reports the process's
// CPU per frame, that thread's included. The bench's frame figure reads the thread's CPU clock
// only at the frame's edges (one read's cost taken out); a second pass times each call; a third
// times the floor: a frame of one call that does nothing (rally_version), and one of none.
// --calls frame (the default) plays each frame in one call (RallyConnection.PlayFrame,
// rally_client_frame); --calls separate in the six calls one by one.
//
//   mono ConsoleTest.exe --rally PATH --key HEX --server IP:PORT --layout FILE
//        [--grab X,Y,Z] [--seconds S] [--bench FRAMES] [--json FILE] [--interpolate 0|1]
//        [--spin-us US] [--io-thread off|on|wake] [--gap-us US] [--calls frame|separate]
//
// bindings/unity/run-mono.sh builds everything and runs it.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Runtime.InteropServices;
using Rally;

static class ConsoleTest
{
    const uint FrameUs = RallyConnection.Frame90Hz;
    /// <summary>
    /// How long before a frame the loop stops sleeping and polls the clock (--spin-us).
    /// </summary>
    static ulong SpinUs = 0;
    static readonly Vec3 Target = new Vec3(0.4f, 1.3f, -0.6f);
    /// <summary>The snapshot quantizes positions to millimetres.</summary>
    const float CloseM = 0.02f;
    /// <summary>
    /// A held block keeps its grab offset: at most the grab radius plus its size.
    /// </summary>
    const float HeldM = 0.35f;

    static int Main(string[] args)
    {
        var options = Options(args);
        string rally = options["--rally"], key = options["--key"], server = options["--server"];
        Vec3 grab = ParseVec3(options.ContainsKey("--grab") ? options["--grab"] : "0.9,0.25,-1.0");
        double seconds = double.Parse(Get(options, "--seconds", "3"), CultureInfo.InvariantCulture);
        int bench = int.Parse(Get(options, "--bench", "0"), CultureInfo.InvariantCulture);
        bool interpolate = Get(options, "--interpolate", "1") != "0";
        string ioName = Get(options, "--io-thread", "off");
        IoThread io = ioName == "on" ? IoThread.On : ioName == "wake" ? IoThread.Wake : IoThread.Off;
        SpinUs = ulong.Parse(Get(options, "--spin-us", "0"), CultureInfo.InvariantCulture);
        GapUs = double.Parse(Get(options, "--gap-us", "0"), CultureInfo.InvariantCulture);
        FrameCall = Get(options, "--calls", "frame") != "separate";
        Console.WriteLine("librally {0} under Mono {1}; I/O thread {2}; {3}",
            RallyConnection.Version, Environment.Version, io,
            FrameCall ? "one call a frame" : "the calls one by one");

        PreciseTimers();
        CheckLayouts(options["--layout"]);
        CheckErrors(rally, key, server);
        using (var client = new RallyConnection(RallyConnection.Frame90Hz, interpolate, io))
        {
            client.Connect(IssueToken(rally, key, server), server);
            var entities = new Entity[1024];
            int count = Play(client, grab, (int)(seconds * 90), entities);
            int needed;
            if (client.TryReadEntities(new Entity[1], out needed) || needed != count)
                throw new Exception("a one-entity array for " + count + " entities was not " +
                    "refused with the count needed (" + needed + ")");
            int failures = CheckRoom(client, entities, count);
            PrintLatency(client);
            string json = options.ContainsKey("--json") ? options["--json"] : null;
            if (bench > 0) Bench(client, bench, json);
            client.Close();
            Expect(Status.Closed, () => client.Update(0), "a call after close");
            Console.WriteLine(failures == 0 ? "1 passed, 0 failed" : "0 passed, 1 failed");
            return failures == 0 ? 0 : 1;
        }
    }

    /// <summary>How long the room may take to accept the client, in frames (5 s).</summary>
    const int JoinFramesMax = 450;

    /// <summary>
    /// The frames: once the room has accepted the client, reach the block, close the hand,
    /// circle, then hold at the target. The schedule counts from the join, so that a room
    /// slow to accept (a debug build on a loaded machine) still gets the whole reach.
    /// </summary>
    static int Play(RallyConnection client, Vec3 grab, int frames, Entity[] entities)
    {
        var data = new byte[EventBytesMax];
        int count = 0;
        var late = new double[frames];
        ulong start = client.NowUs();
        int n = 0;
        // No input before the join: it would wait in the session and be measured from its
        // sampling.
        for (bool joined = false; !joined; n++)
        {
            if (n == JoinFramesMax)
                throw new Exception("the room did not accept the client within 5 s");
            ulong now = client.NowUs();
            client.Update(now);
            joined = PrintEvents(client, data);
            client.Present(now);
            WaitUntil(client, start + (ulong)(n + 1) * FrameUs);
        }
        Console.WriteLine("joined after {0} frames ({1:F0} ms)", n, n * FrameUs / 1000.0);
        for (int k = 0; k < frames; k++, n++)
        {
            ulong now = client.NowUs();
            late[k] = (now - (start + (ulong)n * FrameUs)) / 1000.0;
            XrInput input = Input(Reach(k, frames, grab), (byte)(k > 20 ? 255 : 0));
            if (FrameCall) count = PlayOne(client, now, ref input, entities, data);
            else
            {
                client.SendXrInput(now, ref input);
                client.Update(now);
                PrintEvents(client, data);
                if (!client.TryReadEntitiesAt(now, entities, out count))
                    throw new Exception(count + " entities: more than the test's array");
                // Presented once read: with the I/O thread a state that came during the
                // frame's work is shown too, and was not there at the frame's start.
                client.Present(client.NowUs());
            }
            if (k % 90 == 89) PrintStats(client, k, count);
            WaitUntil(client, start + (ulong)(n + 1) * FrameUs);
        }
        PrintLateness(late);
        return count;
    }

    /// <summary>Whether frames go in one call (--calls frame) or one by one.</summary>
    static bool FrameCall = true;

    /// <summary>The frame call's events: more wait for the next frame (or a poll).</summary>
    static readonly Event[] FrameEvents = new Event[16];

    /// <summary>
    /// A frame of the play in one call: the input sent, the events noted (those the array had
    /// no room for polled), the entities read at the frame's time, presented at the call's end
    /// as the separate path presents once read; the entities read.
    /// </summary>
    static int PlayOne(RallyConnection client, ulong now, ref XrInput input, Entity[] entities,
        byte[] data)
    {
        var frame = new Frame { NowUs = now, PresentUs = Frame.PresentNow };
        if (!client.PlayFrame(ref frame, ref input, true, FrameEvents, data, entities))
            throw new Exception(string.Format("rally_client_frame: {0} entities, an event of " +
                "{1} bytes: more than the test's arrays", frame.EntitiesCount,
                frame.EventDataLength));
        for (int i = 0; i < (int)frame.EventsCount; i++) Note(FrameEvents[i]);
        if (frame.EventsMore != 0) PrintEvents(client, data);
        return (int)frame.EntitiesCount;
    }

    /// <summary>
    /// Where the hand is at frame <paramref name="k"/> of <paramref name="frames"/>: at the
    /// block for the first third, then circling, then at the target.
    /// </summary>
    static Vec3 Reach(int k, int frames, Vec3 grab)
    {
        float t = k / 90f;
        if (k < frames / 3) return grab;
        if (k < frames / 2)
            return new Vec3(Target.X + 0.2f * (float)Math.Cos(t * 3), Target.Y,
                Target.Z + 0.2f * (float)Math.Sin(t * 3));
        return Target;
    }

    /// <summary>
    /// How late the frames started against their schedule: a frame late by more than the
    /// meter's millisecond of slack takes two samples out of the model (its own input's, and
    /// the one before, which it presents late).
    /// </summary>
    static void PrintLateness(double[] late)
    {
        var sorted = (double[])late.Clone();
        Array.Sort(sorted);
        int over = 0;
        foreach (double l in late) if (l > 1.0) over++;
        Console.WriteLine("frame start lateness: p50 {0:F3} ms, p99 {1:F3} ms, max {2:F3} ms; " +
            "{3} of {4} frames more than 1 ms late", sorted[sorted.Length / 2],
            sorted[sorted.Length * 99 / 100], sorted[sorted.Length - 1], over, late.Length);
    }

    static XrInput Input(Vec3 at, byte grip)
    {
        var input = new XrInput();
        input.Head.Position = new Vec3(0, 1.6f, 0);
        input.Head.Rotation = Quat.Identity;
        input.Left.Pose.Position = new Vec3(-0.3f, 1.0f, 0);
        input.Left.Pose.Rotation = Quat.Identity;
        input.Right.Pose.Position = at;
        input.Right.Pose.Rotation = Quat.Identity;
        input.Right.Grip = grip;
        return input;
    }

    /// <summary>
    /// Frames start on a fixed schedule, as a display's do. By default the loop sleeps to the
    /// frame itself: with a microsecond of timer slack a sleeper wakes within about 0.05 ms,
    /// while on a shared machine a thread polling the clock is the one preempted
    /// (examples/c/sample.c says the same; docs/ffi.md has the runs).
    /// </summary>
    static void WaitUntil(RallyConnection client, ulong next)
    {
        // Sleeps until SpinUs before the frame (again if woken early), then polls the clock.
        // usleep, not Thread.Sleep: a sleep in whole milliseconds would end up to one early.
        for (ulong now = client.NowUs(); now < next; now = client.NowUs())
            if (next > now + SpinUs) Usleep((uint)(next - now - SpinUs));
    }

    /// <summary>
    /// An event's bytes at most: a key (256 bytes) and its value (16 KiB; the room's class
    /// table of a scene of many bodies is kilobytes).
    /// </summary>
    const int EventBytesMax = 256 + 16384;

    /// <summary>This client's id, from its Joined event.</summary>
    static uint Me = Entity.None;

    static bool PrintEvents(RallyConnection client, byte[] data)
    {
        bool joined = false;
        Event ev;
        int length;
        while (client.PollEvent(out ev, data, out length)) joined |= Note(ev);
        return joined;
    }

    /// <summary>Notes an event: this client's join (true), or a disconnection (throws).</summary>
    static bool Note(Event ev)
    {
        if (ev.Kind == EventKind.Disconnected) throw new Exception("disconnected: " + ev.Reason);
        if (ev.Kind != EventKind.Joined) return false;
        Console.WriteLine("joined as client {0}", ev.Client);
        Me = ev.Client;
        return true;
    }

    static void PrintStats(RallyConnection client, int n, int count)
    {
        ConnectionStats stats = client.Stats();
        Console.WriteLine("t={0:F0}s: {1} entities, rtt {2:F2} ms, jitter {3:F2} ms, {4} snapshots",
            (n + 1) / 90.0, count, stats.RttUs / 1000.0, stats.JitterUs / 1000.0, stats.Snapshots);
    }

    /// <summary>
    /// The room's newest state: the hand at the target, and beside it a block the room's roster
    /// says this client's right hand holds.
    /// </summary>
    static int CheckRoom(RallyConnection client, Entity[] entities, int count)
    {
        if (!client.TryReadEntities(entities, out count)) throw new Exception("too many entities");
        int atTarget = 0, held = 0;
        for (int i = 0; i < count; i++)
        {
            Entity e = entities[i];
            float d = Distance(e.Position, Target);
            bool ours = e.Holder == Me && e.Hand == Entity.HandRight;
            string name = e.Class == Entity.None ? "?" : client.ClassName(e.Class);
            if (d < CloseM) atTarget++;
            else if (d < HeldM && ours && name == "block") held++;
            else continue;
            Console.WriteLine("entity {0}, a {1}, at ({2:F3}, {3:F3}, {4:F3}){5}", e.Id, name,
                e.Position.X, e.Position.Y, e.Position.Z,
                d < CloseM ? ", the hand" : ", held by this client's right hand");
        }
        Console.WriteLine("{0} entities at the hand's target, {1} blocks this client holds " +
            "beside it", atTarget, held);
        return atTarget >= 1 && held >= 1 ? 0 : 1;
    }

    static void PrintLatency(RallyConnection client)
    {
        Latency latency = client.Latency();
        Console.WriteLine("latency: {0} samples, mean {1:F2} ms, p99 {2:F2} ms, {3:F0}% within " +
            "the model [{4:F2}, {5:F2}] ms, {6:F0}% above it, {7:F0}% at L_best",
            latency.Samples, latency.MeanUs / 1000.0, latency.P99Us / 1000.0,
            latency.WithinModel * 100, latency.BestUs / 1000.0, latency.WorstUs / 1000.0,
            latency.AboveModel * 100, latency.AtBest * 100);
        if (latency.Samples == 0)
            throw new Exception("no latency samples: the room never answered");
    }

    /// <summary>
    /// Times <paramref name="frames"/> frames of the steady state twice. The first pass reads
    /// the thread's CPU clock only at each frame's edges and takes one read's cost out of each
    /// frame: the frame's figure, without the bench's own instrumentation. The second reads it
    /// around each call (<see cref="Split"/>), each interval less one read, for the phases.
    /// Also the managed bytes the first pass allocated.
    /// </summary>
    static void Bench(RallyConnection client, int frames, string json)
    {
        var entities = new Entity[1024];
        var data = new byte[EventBytesMax];
        var cpu = new double[frames];
        XrInput input = Input(Target, 255);
        int count = 0;
        double clock = ClockReadUs();
        var split = new Split(clock, 1);
        OneFrame(client, ref input, entities, data, null, out count); // warm the JIT up
        OneFrame(client, ref input, entities, data, split, out count);
        split = new Split(clock, frames);
        long allocated = GC.GetAllocatedBytesForCurrentThread();
        int collections = GC.CollectionCount(0);
        ConnectionStats statsBefore = client.Stats();
        double process = ProcessCpuUs();
        ulong start = client.NowUs();
        for (int n = 0; n < frames; n++)
        {
            double before = ThreadCpuUs();
            OneFrame(client, ref input, entities, data, null, out count);
            cpu[n] = ThreadCpuUs() - before - clock;
            WaitUntil(client, start + (ulong)(n + 1) * FrameUs);
        }
        process = ProcessCpuUs() - process;
        allocated = GC.GetAllocatedBytesForCurrentThread() - allocated;
        collections = GC.CollectionCount(0) - collections;
        ConnectionStats after = client.Stats();
        start = client.NowUs();
        for (int n = 0; n < frames; n++)
        {
            split.Frame = n;
            OneFrame(client, ref input, entities, data, split, out count);
            WaitUntil(client, start + (ulong)(n + 1) * FrameUs);
        }
        Array.Sort(cpu);
        double sum = 0;
        foreach (double c in cpu) sum += c;
        Console.WriteLine("bench: one read of the thread's CPU clock {0:F3} us (taken out of " +
            "every figure below)", clock);
        Console.WriteLine("bench: {0} frames reading {1} entities: CPU per frame mean {2:F1} us, " +
            "p50 {3:F1} us, p99 {4:F1} us, max {5:F1} us; managed bytes allocated {6} " +
            "({7:F2} per frame), gen-0 collections {8}", frames, count, sum / frames,
            cpu[frames / 2], cpu[Math.Min(frames - 1, frames * 99 / 100)], cpu[frames - 1],
            allocated, (double)allocated / frames, collections);
        ulong waits = after.IoLockWaits - statsBefore.IoLockWaits;
        Console.WriteLine("bench: the process's CPU per frame (every thread, waits included) " +
            "{0:F1} us; {1} calls waited for the I/O thread ({2} us in all)", process / frames,
            waits, after.IoLockWaitUs - statsBefore.IoLockWaitUs);
        double[] phases = split.Phases(frames);
        if (!FrameCall)
            Console.WriteLine("bench: mean CPU per phase (a second pass of {0} frames, the " +
                "clock read around each call): clock and input {1:F1} us, update and events " +
                "{2:F1} us, entities {3:F1} us, present {4:F1} us; sum {5:F1} us", frames,
                phases[0], phases[1], phases[2], phases[3],
                phases[0] + phases[1] + phases[2] + phases[3]);
        Console.WriteLine("bench: mean CPU per call: {0}; {1:F2} polls a frame",
            split.Calls(frames), (double)split.Polls / frames);
        double[] floor = Floor(client, Math.Max(1, frames / 3), clock);
        Console.WriteLine("bench: the floor, {0} frames after the same sleep: one call that " +
            "does nothing (rally_version) mean {1:F2} us, p50 {2:F2}, p99 {3:F2}; no call " +
            "(the clock's reads less one) mean {4:F2} us, p50 {5:F2}, p99 {6:F2}",
            Math.Max(1, frames / 3), floor[0], floor[1], floor[2], floor[3], floor[4], floor[5]);
        // What the binding adds to each call: Mono's transition to native code and back,
        // around the cheapest call there is.
        const int calls = 100000;
        double t = ThreadCpuUs();
        for (int i = 0; i < calls; i++) client.NowUs();
        double pinvoke = (ThreadCpuUs() - t) / calls;
        Console.WriteLine("bench: one P/Invoke call (rally_client_now_us) {0:F3} us of CPU",
            pinvoke);
        var none = new byte[EventBytesMax];
        t = ThreadCpuUs();
        Event polled;
        int polledLength;
        for (int i = 0; i < calls; i++) client.PollEvent(out polled, none, out polledLength);
        Console.WriteLine("bench: one rally_client_poll_event with nothing waiting, in a loop, " +
            "{0:F3} us of CPU", (ThreadCpuUs() - t) / calls);
        if (json == null) return;
        var inv = CultureInfo.InvariantCulture;
        File.WriteAllText(json, string.Format(inv,
            "{{\"frames\": {0}, \"entities\": {1}, \"cpu_us\": {{\"mean\": {2:F2}, " +
            "\"p50\": {3:F2}, \"p99\": {4:F2}, \"max\": {5:F2} }}, \"phases_us\": " +
            "{{\"input\": {6:F2}, \"update_and_events\": {7:F2}, \"entities\": {8:F2}, " +
            "\"present\": {9:F2} }}, \"managed_bytes_allocated\": {10}, " +
            "\"gen0_collections\": {11}, \"pinvoke_us\": {12:F4}, " +
            "\"process_cpu_us\": {13:F2}, \"io_lock_waits\": {14}, " +
            "\"clock_read_us\": {15:F4}, \"calls_us\": {{{16}}}, \"polls_per_frame\": {17:F2}, " +
            "\"calls\": \"{18}\", \"floor_call_us\": {{\"mean\": {19:F3}, \"p50\": {20:F3}, " +
            "\"p99\": {21:F3} }}, \"floor_none_us\": {{\"mean\": {22:F3}, \"p50\": {23:F3}, " +
            "\"p99\": {24:F3} }} }}\n",
            frames, count, sum / frames, cpu[frames / 2],
            cpu[Math.Min(frames - 1, frames * 99 / 100)], cpu[frames - 1], phases[0],
            phases[1], phases[2], phases[3], allocated, collections,
            pinvoke, process / frames, waits, clock, split.Json(frames),
            (double)split.Polls / frames, FrameCall ? "frame" : "separate", floor[0],
            floor[1], floor[2], floor[3], floor[4], floor[5]));
        Console.WriteLine("bench: wrote {0}", json);
    }

    /// <summary>
    /// The floor of any frame's design on this machine: <paramref name="frames"/> frames, each
    /// after the bench's sleep (and its clock polls), of one call into the library that does
    /// nothing (rally_version: Mono's transition and the first touch of the library's code),
    /// then as many of no call at all (two reads of the clock less one read's cost: what the
    /// measurement itself leaves). Mean, p50 and p99 of each, us.
    /// </summary>
    static double[] Floor(RallyConnection client, int frames, double clock)
    {
        var call = new double[frames];
        var none = new double[frames];
        ulong start = client.NowUs();
        for (int n = 0; n < frames; n++)
        {
            double before = ThreadCpuUs();
            Native.Version();
            call[n] = ThreadCpuUs() - before - clock;
            WaitUntil(client, start + (ulong)(2 * n + 1) * FrameUs);
            before = ThreadCpuUs();
            none[n] = ThreadCpuUs() - before - clock;
            WaitUntil(client, start + (ulong)(2 * n + 2) * FrameUs);
        }
        double[] a = Summary(call), b = Summary(none);
        return new[] { a[0], a[1], a[2], b[0], b[1], b[2] };
    }

    /// <summary>Mean, p50 and p99 of <paramref name="values"/> (sorts them).</summary>
    static double[] Summary(double[] values)
    {
        Array.Sort(values);
        double sum = 0;
        foreach (double v in values) sum += v;
        int n = values.Length;
        return new[] { sum / n, values[n / 2], values[Math.Min(n - 1, n * 99 / 100)] };
    }

    /// <summary>
    /// With --gap-us, the split pass spins this long (thread CPU) after the input's send, so
    /// that what the hand-off makes land on this thread a few microseconds later (the
    /// scheduler's interrupts) lands in the spin, not in the next call: a diagnostic.
    /// </summary>
    static double GapUs;

    /// <summary>What one read of this thread's CPU clock costs it.</summary>
    static double ClockReadUs()
    {
        const int reads = 20000;
        double from = ThreadCpuUs();
        for (int i = 0; i < reads - 1; i++) ThreadCpuUs();
        return (ThreadCpuUs() - from) / reads;
    }

    /// <summary>
    /// The thread's CPU time each of a frame's calls took, summed over frames: the interval
    /// between the reads around a call, less one read's cost.
    /// </summary>
    sealed class Split
    {
        public static readonly string[] Names = {
            "rally_client_now_us", "rally_client_send_xr_input", "rally_client_update",
            "rally_client_poll_event", "rally_client_entities_at", "rally_client_present",
            "rally_client_frame",
        };
        readonly double clock;
        readonly double[] sums = new double[Names.Length];
        /// <summary>Each call's time in each frame, for its median.</summary>
        readonly double[][] each = new double[Names.Length][];
        public long Polls;
        /// <summary>The frame being timed (its slot in <see cref="each"/>).</summary>
        public int Frame;

        public Split(double clock, int frames)
        {
            this.clock = clock;
            for (int i = 0; i < Names.Length; i++) each[i] = new double[Math.Max(1, frames)];
        }

        /// <summary>Adds the time since <paramref name="from"/> to call <paramref name="call"/>;
        /// returns the clock's reading, the next call's start.</summary>
        public double Lap(int call, double from)
        {
            double now = ThreadCpuUs();
            sums[call] += now - from - clock;
            each[call][Frame % each[call].Length] += now - from - clock;
            return now;
        }

        /// <summary>Per frame: clock and input, update and events, entities, present.</summary>
        public double[] Phases(int frames)
        {
            return new[] { (sums[0] + sums[1]) / frames, (sums[2] + sums[3]) / frames,
                sums[4] / frames, sums[5] / frames };
        }

        /// <summary>Each call the frames made: mean and p50.</summary>
        public string Calls(int frames)
        {
            return Each(frames, "{0} {1:F2} us (p50 {2:F2})");
        }

        public string Json(int frames)
        {
            return Each(frames, "\"{0}\": {{\"mean\": {1:F3}, \"p50\": {2:F3} }}");
        }

        string Each(int frames, string format)
        {
            var parts = new List<string>();
            for (int i = 0; i < Names.Length; i++)
                if (sums[i] != 0)
                    parts.Add(string.Format(CultureInfo.InvariantCulture, format, Names[i],
                        sums[i] / frames, Median(each[i])));
            return string.Join(", ", parts.ToArray());
        }

        static double Median(double[] values)
        {
            var sorted = (double[])values.Clone();
            Array.Sort(sorted);
            return sorted[sorted.Length / 2];
        }
    }

    /// <summary>
    /// One frame's work: sample and send, update, drain events, read every entity, present;
    /// with <paramref name="split"/>, each call's thread CPU time added to it.
    /// </summary>
    static void OneFrame(RallyConnection client, ref XrInput input, Entity[] entities,
        byte[] data, Split split, out int count)
    {
        double t = split != null ? ThreadCpuUs() : 0;
        if (FrameCall)
        {
            // The clock read in the call, the frame presented at its end.
            var frame = new Frame { PresentUs = Frame.PresentNow };
            client.PlayFrame(ref frame, ref input, true, FrameEvents, data, entities);
            if (split != null) split.Lap(6, t);
            count = (int)frame.EntitiesCount;
            return;
        }
        ulong now = client.NowUs();
        if (split != null) t = split.Lap(0, t);
        client.SendXrInput(now, ref input);
        if (split != null) t = split.Lap(1, t);
        if (split != null && GapUs > 0)
        {
            while (ThreadCpuUs() - t < GapUs) { }
            t = ThreadCpuUs();
        }
        client.Update(now);
        if (split != null) t = split.Lap(2, t);
        Event ev;
        int length;
        bool more;
        do
        {
            more = client.PollEvent(out ev, data, out length);
            if (split == null) continue;
            t = split.Lap(3, t);
            split.Polls++;
        } while (more);
        client.TryReadEntitiesAt(now, entities, out count);
        if (split != null) t = split.Lap(4, t);
        client.Present(now);
        if (split != null) split.Lap(5, t);
    }

    [StructLayout(LayoutKind.Sequential)]
    struct Timespec
    {
        public long Seconds;
        public long Nanoseconds;
    }

    [DllImport("libc", EntryPoint = "usleep")]
    static extern int Usleep(uint microseconds);

    [DllImport("libc", EntryPoint = "prctl")]
    static extern int Prctl(int option, ulong arg2, ulong arg3, ulong arg4, ulong arg5);

    /// <summary>
    /// Asks Linux to end this thread's sleeps within a microsecond rather than the default 50
    /// (PR_SET_TIMERSLACK), as Rally's own driver does, so that frames start on time.
    /// </summary>
    static void PreciseTimers()
    {
        const int SetTimerSlack = 29;
        try
        {
            Prctl(SetTimerSlack, 1000, 0, 0, 0);
        }
        catch (EntryPointNotFoundException)
        {
            // Not Linux: the OS's own timer precision stands.
        }
    }

    [DllImport("libc", EntryPoint = "clock_gettime")]
    static extern unsafe int ClockGettime(int clock, Timespec* time);

    /// <summary>This thread's CPU time (CLOCK_THREAD_CPUTIME_ID), microseconds.</summary>
    static double ThreadCpuUs()
    {
        return CpuUs(3);
    }

    /// <summary>
    /// The process's CPU time (CLOCK_PROCESS_CPUTIME_ID: every thread's), microseconds.
    /// </summary>
    static double ProcessCpuUs()
    {
        return CpuUs(2);
    }

    static double CpuUs(int clock)
    {
        Timespec t;
        unsafe
        {
            ClockGettime(clock, &t);
        }
        return t.Seconds * 1e6 + t.Nanoseconds / 1e3;
    }

    /// <summary>Each struct's size and field offsets as the C compiler lays out rally.h.</summary>
    static void CheckLayouts(string path)
    {
        var types = new Dictionary<string, Type> {
            { "RallyXrInput", typeof(XrInput) }, { "RallyEntity", typeof(Entity) },
            { "RallyEvent", typeof(Event) }, { "RallyLatency", typeof(Latency) },
            { "RallyConnectionStats", typeof(ConnectionStats) }, { "RallyConfig", typeof(Config) },
            { "RallyFrame", typeof(Frame) },
        };
        var fields = new Dictionary<string, string> {
            { "RallyXrInput.game", "Game" }, { "RallyXrInput.game_len", "GameLength" },
            { "RallyXrInput.hands", "Left" }, { "RallyEvent.key_len", "KeyLength" },
            { "RallyEvent.reason", "Reason" }, { "RallyConnectionStats.rtt_us", "RttUs" },
            { "RallyEntity.angular_velocity", "AngularVelocity" },
            { "RallyEntity.class_index", "Class" }, { "RallyEntity.hand", "Hand" },
            { "RallyConfig.io_thread", "IoThread" }, { "RallyLatency.above_model", "AboveModel" },
            { "RallyLatency.at_best", "AtBest" },
            { "RallyConnectionStats.io_lock_waits", "IoLockWaits" },
            { "RallyFrame.xr_input", "XrInput" }, { "RallyFrame.events_count", "EventsCount" },
            { "RallyFrame.entities_count", "EntitiesCount" },
            { "RallyFrame.events_more", "EventsMore" },
        };
        int checkedLines = 0;
        foreach (string line in File.ReadAllLines(path))
        {
            string[] parts = line.Split(' ');
            int c = int.Parse(parts[1], CultureInfo.InvariantCulture);
            string[] name = parts[0].Split('.');
            int cs = name.Length == 1
                ? Marshal.SizeOf(types[name[0]])
                : (int)Marshal.OffsetOf(types[name[0]], fields[parts[0]]);
            if (cs != c)
                throw new Exception(string.Format("{0}: C says {1}, C# {2}", parts[0], c, cs));
            checkedLines++;
        }
        Console.WriteLine("layouts: {0} sizes and offsets match the C compiler's", checkedLines);
    }

    /// <summary>A malformed token gives its documented error, not a crash.</summary>
    static void CheckErrors(string rally, string key, string server)
    {
        using (var client = new RallyConnection())
        {
            string message = Expect(Status.InvalidToken,
                () => client.Connect(new byte[] { 1, 2, 3 }, server), "a malformed token");
            if (!message.Contains("not a connect token"))
                throw new Exception("a malformed token's message does not say so: " + message);
            Console.WriteLine("errors: {0}", message);
        }
    }

    /// <summary>
    /// Runs <paramref name="call"/>, which must fail with <paramref name="status"/>; its message.
    /// </summary>
    static string Expect(Status status, Action call, string what)
    {
        try
        {
            call();
        }
        catch (RallyException e)
        {
            if (e.Status != status) throw;
            return e.Message;
        }
        throw new Exception(what + " did not fail with " + status);
    }

    /// <summary>Plays the game's backend: `rally token issue` prints the token in hex.</summary>
    static byte[] IssueToken(string rally, string key, string server)
    {
        var start = new ProcessStartInfo(rally, string.Format(CultureInfo.InvariantCulture,
            "token issue --key {0} --client {1} --room 0 --server {2} --ttl 60", key,
            Environment.TickCount % 100000 + 1, server))
        {
            RedirectStandardOutput = true,
            UseShellExecute = false,
        };
        using (Process process = Process.Start(start))
        {
            string hex = process.StandardOutput.ReadToEnd().Trim();
            process.WaitForExit();
            if (process.ExitCode != 0 || hex.Length == 0 || hex.Length % 2 != 0)
                throw new Exception("`rally token issue` printed no hex token");
            var token = new byte[hex.Length / 2];
            for (int i = 0; i < token.Length; i++)
                token[i] = byte.Parse(hex.Substring(2 * i, 2), NumberStyles.HexNumber);
            return token;
        }
    }

    static float Distance(Vec3 a, Vec3 b)
    {
        float dx = a.X - b.X, dy = a.Y - b.Y, dz = a.Z - b.Z;
        return (float)Math.Sqrt(dx * dx + dy * dy + dz * dz);
    }

    static Vec3 ParseVec3(string text)
    {
        string[] p = text.Split(',');
        Func<int, float> f = i => float.Parse(p[i], CultureInfo.InvariantCulture);
        return new Vec3(f(0), f(1), f(2));
    }

    static Dictionary<string, string> Options(string[] args)
    {
        var options = new Dictionary<string, string>();
        for (int i = 0; i + 1 < args.Length; i += 2) options[args[i]] = args[i + 1];
        foreach (string required in new[] { "--rally", "--key", "--server", "--layout" })
            if (!options.ContainsKey(required))
                throw new ArgumentException("usage: ConsoleTest --rally PATH --key HEX " +
                    "--server IP:PORT --layout FILE [--grab X,Y,Z] [--seconds S] [--bench N] " +
                    "[--json FILE] [--interpolate 0|1] [--spin-us US] [--io-thread off|on|wake]");
        return options;
    }

    static string Get(Dictionary<string, string> options, string name, string fallback)
    {
        return options.ContainsKey(name) ? options[name] : fallback;
    }
}
