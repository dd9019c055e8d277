// A managed client over librally: what a game calls once a frame. Errors become a
// RallyException carrying the library's message; the per-frame calls (NowUs, SendXrInput,
// Update, PollEvent, TryReadEntities, Present) allocate nothing on the managed heap, so a game
// that reuses its arrays runs with no garbage collection from Rally. No UnityEngine here: CI
// compiles and runs this file under Mono.
using System;
using System.Text;

namespace Rally
{
    /// <summary>
    /// A call into librally failed: <c>Status</c> says how, the message what to do.
    /// </summary>
    public sealed class RallyException : Exception
    {
        public readonly Status Status;

        public RallyException(string function, Status status, string message)
            : base(function + " failed (" + status + "): " + message)
        {
            Status = status;
        }
    }

    /// <summary>
    /// One client of a Rally room. A frame, in the order that keeps latency at the model's
    /// floor: <c>NowUs</c>, sample the input and <c>SendXrInput</c> at once, <c>Update</c>,
    /// drain <c>PollEvent</c>, <c>TryReadEntitiesAt</c>, draw, <c>Present</c>; or all of it
    /// in one call, <c>PlayFrame</c> (one crossing into the library, not six).
    /// One thread at a time; <c>Dispose</c> frees the native client.
    /// </summary>
    public sealed class RallyConnection : IDisposable
    {
        /// <summary>The display's frame time at 90 Hz, microseconds.</summary>
        public const uint Frame90Hz = 11111;

        IntPtr client;

        /// <summary>librally's version, "major.minor.patch".</summary>
        public static string Version
        {
            get
            {
                IntPtr text = Native.Version();
                int length = 0;
                while (System.Runtime.InteropServices.Marshal.ReadByte(text, length) != 0) length++;
                var bytes = new byte[length];
                System.Runtime.InteropServices.Marshal.Copy(text, bytes, 0, length);
                return Encoding.UTF8.GetString(bytes);
            }
        }

        /// <summary>A client with its socket bound (any port), not connecting yet.</summary>
        /// <param name="frameUs">The display's frame time: the latency model's frame.</param>
        /// <param name="interpolate">Buffer entities for <c>TryReadEntitiesAt</c>.</param>
        /// <param name="ioThread">
        /// Whether the library runs a thread of its own for the socket and the session, so that
        /// the game thread's calls do no socket work (docs/integrating.md says when).
        /// </param>
        public RallyConnection(uint frameUs = Frame90Hz, bool interpolate = true,
            IoThread ioThread = IoThread.Off)
        {
            Config config;
            Check("rally_config_default", Native.ConfigDefault(out config));
            config.FrameUs = frameUs;
            config.Interpolate = (byte)(interpolate ? 1 : 0);
            config.IoThread = (uint)ioThread;
            Check("rally_client_create", Native.Create(ref config, out client));
        }

        /// <summary>
        /// Starts connecting with a connect token (the bytes the game's backend issued) to
        /// <paramref name="address"/> ("ip:port", one the token names; null: its first).
        /// </summary>
        public void Connect(byte[] token, string address)
        {
            if (token == null) throw new ArgumentNullException("token");
            byte[] text = address == null ? null : Encoding.UTF8.GetBytes(address + "\0");
            Check("rally_client_connect",
                Native.Connect(Live(), token, (UIntPtr)token.Length, text));
        }

        /// <summary>The library's clock, microseconds: every <c>nowUs</c> is on it.</summary>
        public unsafe ulong NowUs()
        {
            ulong now;
            Check("rally_client_now_us", Native.NowUs(Live(), &now));
            return now;
        }

        /// <summary>Datagrams in and out, timers, events queued; never blocks.</summary>
        public void Update(ulong nowUs)
        {
            Check("rally_client_update", Native.Update(Live(), nowUs));
        }

        /// <summary>
        /// Sends the standard XR input sampled at <paramref name="nowUs"/>, at once.
        /// </summary>
        public unsafe void SendXrInput(ulong nowUs, ref XrInput input)
        {
            fixed (XrInput* pinned = &input)
                Check("rally_client_send_xr_input", Native.SendXrInput(Live(), nowUs, pinned));
        }

        /// <summary>
        /// Sends the first <paramref name="length"/> bytes as the room's own input.
        /// </summary>
        public void SendInputBytes(ulong nowUs, byte[] input, int length)
        {
            CheckRange(input, length);
            Check("rally_client_send_input_bytes",
                Native.SendInputBytes(Live(), nowUs, input, (UIntPtr)length));
        }

        /// <summary>
        /// A frame showing the newest state was presented at <paramref name="nowUs"/>.
        /// </summary>
        public void Present(ulong nowUs)
        {
            Check("rally_client_present", Native.Present(Live(), nowUs));
        }

        /// <summary>
        /// A whole frame in one call (rally_client_frame), in the order that keeps latency
        /// lowest: the previous frame's present (<c>frame.PresentedUs</c>, 0 for none), the
        /// clock (<c>frame.NowUs</c> 0: read, and written back), <paramref name="input"/> sent
        /// if <paramref name="send"/>, <c>Update</c>, the waiting events into
        /// <paramref name="events"/> with their bytes one after another in
        /// <paramref name="eventData"/> (each event's <c>DataLength</c> its share), every entity
        /// as a frame at <c>frame.AtUs</c> (0: <c>NowUs</c>) shows it into
        /// <paramref name="entities"/>, and this frame's present (<c>frame.PresentUs</c>:
        /// <c>Frame.PresentNow</c> for the call's end, 0 for none). The same as those calls
        /// one by one, for one crossing into the library instead of six. The counts come back
        /// in <paramref name="frame"/> (<c>EventsCount</c>, <c>EntitiesCount</c>; <c>EventsMore</c>
        /// when events still wait). False when an array is too short (its count says the size
        /// needed); any other error throws after every step ran, so the events taken (a
        /// Disconnected one among them) are still in the arrays. Allocates nothing.
        /// </summary>
        public unsafe bool PlayFrame(ref Frame frame, ref XrInput input, bool send,
            Event[] events, byte[] eventData, Entity[] entities)
        {
            Status status;
            fixed (XrInput* pinnedInput = &input)
            fixed (Event* pinnedEvents = events)
            fixed (byte* pinnedData = eventData)
            fixed (Entity* pinnedEntities = entities)
            fixed (Frame* pinned = &frame)
            {
                pinned->XrInput = send ? pinnedInput : null;
                pinned->Events = pinnedEvents;
                pinned->EventsCapacity = Capacity(events);
                pinned->EventData = pinnedData;
                pinned->EventDataCapacity = Capacity(eventData);
                pinned->Entities = pinnedEntities;
                pinned->EntitiesCapacity = Capacity(entities);
                status = Native.PlayFrame(Live(), pinned);
                // Pinned only for the call: no pointer outlives it.
                pinned->XrInput = null;
                pinned->Events = null;
                pinned->EventData = null;
                pinned->Entities = null;
            }
            if (status == Status.BufferTooSmall) return false;
            Check("rally_client_frame", status);
            return true;
        }

        /// <summary>
        /// The newest state of every entity into <paramref name="into"/>; false (and
        /// <paramref name="count"/> the length needed) when the array is too short.
        /// </summary>
        public unsafe bool TryReadEntities(Entity[] into, out int count)
        {
            UIntPtr n;
            Status status;
            fixed (Entity* pinned = into)
                status = Native.Entities(Live(), pinned, Capacity(into), &n);
            return Counted("rally_client_entities", status, n, out count);
        }

        /// <summary>
        /// Every entity as a frame at <paramref name="atUs"/> should show it (buffered against
        /// jitter and interpolated); false (and the length needed) when the array is too short.
        /// </summary>
        public unsafe bool TryReadEntitiesAt(ulong atUs, Entity[] into, out int count)
        {
            UIntPtr n;
            Status status;
            fixed (Entity* pinned = into)
                status = Native.EntitiesAt(Live(), atUs, pinned, Capacity(into), &n);
            return Counted("rally_client_entities_at", status, n, out count);
        }

        /// <summary>
        /// The name of class <paramref name="index"/> (an <c>Entity.Class</c>): "head" and
        /// "hand" for avatars, the scene's <c>class</c> for its bodies. Allocates a string:
        /// look names up when an entity first appears, not every frame.
        /// </summary>
        public string ClassName(uint index)
        {
            var name = new byte[64];
            UIntPtr length;
            Check("rally_client_class_name",
                Native.ClassName(Live(), index, name, Capacity(name), out length));
            return System.Text.Encoding.ASCII.GetString(name, 0, (int)length);
        }

        /// <summary>
        /// Takes the next event, its bytes into <paramref name="data"/>; false when none waits.
        /// A <paramref name="data"/> too short leaves the event queued and throws (BufferTooSmall,
        /// the message says the size needed).
        /// </summary>
        public unsafe bool PollEvent(out Event ev, byte[] data, out int dataLength)
        {
            UIntPtr n;
            Event taken;
            fixed (byte* pinned = data)
                Check("rally_client_poll_event",
                    Native.PollEvent(Live(), &taken, pinned, Capacity(data), &n));
            ev = taken;
            dataLength = (int)n;
            return ev.Kind != EventKind.None;
        }

        /// <summary>
        /// Sets <paramref name="key"/> in the room's scope or this player's; null removes it.
        /// </summary>
        public void SetValue(bool roomScope, string key, byte[] value)
        {
            if (key == null) throw new ArgumentNullException("key");
            byte[] text = Encoding.UTF8.GetBytes(key + "\0");
            UIntPtr length = (UIntPtr)(value == null ? 0 : value.Length);
            Check("rally_client_set_value",
                Native.SetValue(Live(), roomScope, text, value, length));
        }

        /// <summary>
        /// Relays the first <paramref name="length"/> bytes to <paramref name="target"/>.
        /// </summary>
        public void Relay(RelayTarget target, uint to, bool reliable, byte[] bytes, int length)
        {
            CheckRange(bytes, length);
            Check("rally_client_relay",
                Native.Relay(Live(), target, to, reliable, bytes, (UIntPtr)length));
        }

        /// <summary>
        /// The latency meter: samples, mean, p99, share within the model, L_best, L_worst.
        /// </summary>
        public Latency Latency()
        {
            Latency latency;
            Check("rally_client_latency", Native.Latency(Live(), out latency));
            return latency;
        }

        /// <summary>RTT, jitter, loss, packets, snapshots.</summary>
        public ConnectionStats Stats()
        {
            ConnectionStats stats;
            Check("rally_client_stats", Native.Stats(Live(), out stats));
            return stats;
        }

        /// <summary>Says goodbye to the server; every later call throws (Closed).</summary>
        public void Close()
        {
            Check("rally_client_close", Native.Close(Live()));
        }

        /// <summary>Closes (if open) and frees the native client.</summary>
        public void Dispose()
        {
            if (client == IntPtr.Zero) return;
            Native.Destroy(client);
            client = IntPtr.Zero;
            GC.SuppressFinalize(this);
        }

        ~RallyConnection()
        {
            if (client != IntPtr.Zero) Native.Destroy(client);
        }

        /// <summary>This thread's last error message from librally.</summary>
        public static string LastError()
        {
            var buffer = new byte[1024];
            UIntPtr needed;
            if (Native.LastError(buffer, (UIntPtr)buffer.Length, out needed) != Status.Ok)
            {
                buffer = new byte[(int)needed];
                Native.LastError(buffer, (UIntPtr)buffer.Length, out needed);
            }
            return Encoding.UTF8.GetString(buffer, 0, Math.Max(0, (int)needed - 1));
        }

        IntPtr Live()
        {
            if (client == IntPtr.Zero) throw new ObjectDisposedException("RallyConnection");
            return client;
        }

        static UIntPtr Capacity(Array array)
        {
            return (UIntPtr)(array == null ? 0 : array.Length);
        }

        static void CheckRange(byte[] bytes, int length)
        {
            if (length < 0 || length > (bytes == null ? 0 : bytes.Length))
                throw new ArgumentOutOfRangeException("length");
        }

        static bool Counted(string function, Status status, UIntPtr n, out int count)
        {
            count = (int)n;
            if (status == Status.BufferTooSmall) return false;
            Check(function, status);
            return true;
        }

        static void Check(string function, Status status)
        {
            if (status != Status.Ok) throw new RallyException(function, status, LastError());
        }
    }
}
