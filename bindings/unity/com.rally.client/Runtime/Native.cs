// The C ABI of librally (include/rally.h) as C# sees it: blittable structs laid out as the
// header's, and one P/Invoke per function. Nothing here allocates on the managed heap per
// call: structs go by reference, arrays of blittable structs are pinned, not copied, and bools
// in structs are bytes (a C# bool field is not blittable). This file and RallyConnection.cs
// use no UnityEngine type, so CI compiles and runs them under Mono.
using System;
using System.Runtime.InteropServices;

namespace Rally
{
    /// <summary>What every call returns; <c>Ok</c> is 0 (RallyStatus in rally.h).</summary>
    public enum Status : int
    {
        Ok = 0,
        NullPointer = 1,
        BufferTooSmall = 2,
        InvalidArgument = 3,
        InvalidToken = 4,
        NotConnected = 5,
        Disconnected = 6,
        Closed = 7,
        Io = 8,
        Refused = 9,
        Panic = 10,
    }

    /// <summary>Which event <c>PollEvent</c> gave (RallyEventKind).</summary>
    public enum EventKind : int
    {
        None = 0,
        Joined = 1,
        PlayerJoined = 2,
        PlayerLeft = 3,
        Relayed = 4,
        Changed = 5,
        Disconnected = 6,
    }

    /// <summary>Why a connection ended (RallyDisconnectReason).</summary>
    public enum DisconnectReason : int
    {
        NotDisconnected = 0,
        Closed = 1,
        TimedOut = 2,
        PeerMisbehaved = 3,
        ServerFull = 4,
        ServerShutdown = 5,
        RoomFailed = 6,
        /// <summary>The library's I/O thread stopped: the event's data says why.</summary>
        Failed = 7,
        Unknown = 255,
    }

    /// <summary>Who does the socket work (RallyIoThread, Config.IoThread).</summary>
    public enum IoThread : uint
    {
        /// <summary>Update does it on the calling thread (the default).</summary>
        Off = 0,
        /// <summary>
        /// A library thread owns the socket; an input is written by the thread that sends it.
        /// </summary>
        On = 1,
        /// <summary>As On, but an input is handed to the I/O thread, which is woken.</summary>
        Wake = 2,
    }

    /// <summary>Who a relayed message goes to (RallyRelayTarget).</summary>
    public enum RelayTarget : uint
    {
        All = 0,
        Others = 1,
        One = 2,
    }

    /// <summary>Metres, in the room's frame (x right, y up, -z forward).</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct Vec3
    {
        public float X, Y, Z;

        public Vec3(float x, float y, float z) { X = x; Y = y; Z = z; }
    }

    /// <summary>A unit quaternion, x, y, z, w.</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct Quat
    {
        public float X, Y, Z, W;

        public static readonly Quat Identity = new Quat { W = 1 };
    }

    /// <summary>A pose (RallyPose).</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct Pose
    {
        public Vec3 Position;
        public Quat Rotation;
    }

    /// <summary>One hand: pose, grip and trigger, 0 to 255 (grip from 128 holds).</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct Hand
    {
        public Pose Pose;
        public byte Grip;
        public byte Trigger;
    }

    /// <summary>The standard XR input of scene rooms (RallyXrInput).</summary>
    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct XrInput
    {
        /// <summary>The most game bytes one input carries.</summary>
        public const int GameBytesMax = 32;

        public Pose Head;
        public Hand Left;
        public Hand Right;
        /// <summary>Opaque bytes for the game; the first <c>GameLength</c> count.</summary>
        public fixed byte Game[GameBytesMax];
        public byte GameLength;
    }

    /// <summary>An entity as the client shows it (RallyEntity).</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct Entity
    {
        /// <summary>Unique in its room.</summary>
        public uint Id;
        public Vec3 Position;
        public Quat Rotation;
        /// <summary>Metres a second.</summary>
        public Vec3 LinearVelocity;
        /// <summary>Radians a second.</summary>
        public Vec3 AngularVelocity;
        /// <summary>
        /// An index into the room's class names (<c>RallyConnection.ClassName</c>), or
        /// <c>None</c> while the room has not said.
        /// </summary>
        public uint Class;
        /// <summary>The player whose hand holds it, or <c>None</c>.</summary>
        public uint Holder;
        /// <summary><c>HandLeft</c>, <c>HandRight</c>, or <c>HandNone</c> when not held.</summary>
        public byte Hand;

        /// <summary>No class, no holder (RALLY_NONE).</summary>
        public const uint None = uint.MaxValue;
        public const byte HandLeft = 0;
        public const byte HandRight = 1;
        public const byte HandNone = 255;
    }

    /// <summary>One event (RallyEvent); its bytes go to the caller's buffer.</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct Event
    {
        /// <summary>The <c>Client</c> of an event from the room itself.</summary>
        public const uint Room = uint.MaxValue;

        public EventKind Kind;
        public uint Client;
        public byte Resumed;
        public byte RoomScope;
        public byte HasValue;
        public uint KeyLength;
        public uint DataLength;
        public DisconnectReason Reason;
    }

    /// <summary>The latency meter's figures (RallyLatency), microseconds.</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct Latency
    {
        public ulong Samples;
        public ulong MeanUs;
        public ulong P99Us;
        /// <summary>Share (0 to 1) of the samples within the W2 model, 1 ms of slack, judged
        /// on the frames presented.</summary>
        public double WithinModel;
        public ulong BestUs;
        public ulong WorstUs;
        /// <summary>Share (0 to 1) of the samples above the model and its slack: late.</summary>
        public double AboveModel;
        /// <summary>Share (0 to 1) of the samples at L_best, 1 ms of slack (the fast path's
        /// target).</summary>
        public double AtBest;
    }

    /// <summary>
    /// The connection's figures and the session's counters (RallyConnectionStats).
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct ConnectionStats
    {
        /// <summary>This client's id once joined, else <c>ulong.MaxValue</c>.</summary>
        public ulong ClientId;
        public byte Joined;
        public ulong RttUs;
        public ulong JitterUs;
        public double Loss;
        public ulong PacketsSent;
        public ulong PacketsReceived;
        public ulong PacketsLost;
        public ulong Snapshots;
        public ulong EventsDropped;
        /// <summary>Calls that waited for the I/O thread to let go of the client.</summary>
        public ulong IoLockWaits;
        /// <summary>The time those calls waited, microseconds in all.</summary>
        public ulong IoLockWaitUs;
    }

    /// <summary>A client's settings (RallyConfig).</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct Config
    {
        /// <summary>A NUL-terminated "ip:port" to bind, or zero for any port.</summary>
        public IntPtr BindAddress;
        /// <summary>The display's frame time, microseconds: the latency model's frame.</summary>
        public uint FrameUs;
        public byte Interpolate;
        /// <summary>An IoThread: whether the library runs its own thread for the socket.</summary>
        public uint IoThread;
    }

    /// <summary>The P/Invoke layer: one declaration per function of rally.h.</summary>
    /// <summary>
    /// A whole frame for <c>Native.Frame</c> (RallyFrame): the time, the input and presents,
    /// the caller's arrays (pinned for the call), and what the call wrote. Pointers, so that
    /// Mono passes it as it is (blittable): <c>RallyConnection.PlayFrame</c> pins and fills
    /// them.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct Frame
    {
        /// <summary><c>PresentUs</c>: presented when the call ends (RALLY_PRESENT_NOW).</summary>
        public const ulong PresentNow = ulong.MaxValue;

        public ulong NowUs;
        public ulong AtUs;
        public ulong PresentedUs;
        public ulong PresentUs;
        public XrInput* XrInput;
        public byte* InputBytes;
        public UIntPtr InputLength;
        public Event* Events;
        public UIntPtr EventsCapacity;
        public UIntPtr EventsCount;
        public byte* EventData;
        public UIntPtr EventDataCapacity;
        public UIntPtr EventDataLength;
        public Entity* Entities;
        public UIntPtr EntitiesCapacity;
        public UIntPtr EntitiesCount;
        public byte EventsMore;
    }

    public static class Native
    {
        // iOS (and consoles) link librally.a into the game: its symbols are the game's own.
#if UNITY_IOS && !UNITY_EDITOR
        public const string Library = "__Internal";
#else
        public const string Library = "rally";
#endif

        [DllImport(Library, EntryPoint = "rally_version")]
        public static extern IntPtr Version();

        [DllImport(Library, EntryPoint = "rally_last_error")]
        public static extern Status LastError(byte[] buffer, UIntPtr capacity, out UIntPtr needed);

        [DllImport(Library, EntryPoint = "rally_config_default")]
        public static extern Status ConfigDefault(out Config config);

        [DllImport(Library, EntryPoint = "rally_client_create")]
        public static extern Status Create(ref Config config, out IntPtr client);

        [DllImport(Library, EntryPoint = "rally_client_destroy")]
        public static extern Status Destroy(IntPtr client);

        [DllImport(Library, EntryPoint = "rally_client_connect")]
        public static extern Status Connect(
            IntPtr client, byte[] token, UIntPtr tokenLength, byte[] address);

        [DllImport(Library, EntryPoint = "rally_client_now_us")]
        public static extern unsafe Status NowUs(IntPtr client, ulong* nowUs);

        [DllImport(Library, EntryPoint = "rally_client_update")]
        public static extern Status Update(IntPtr client, ulong nowUs);

        [DllImport(Library, EntryPoint = "rally_client_send_xr_input")]
        public static extern unsafe Status SendXrInput(IntPtr client, ulong nowUs, XrInput* input);

        [DllImport(Library, EntryPoint = "rally_client_send_input_bytes")]
        public static extern Status SendInputBytes(
            IntPtr client, ulong nowUs, byte[] input, UIntPtr length);

        [DllImport(Library, EntryPoint = "rally_client_present")]
        public static extern Status Present(IntPtr client, ulong nowUs);

        // The per-frame calls take pointers (the caller pins with `fixed`): Mono's marshaller
        // otherwise inspects each array or struct argument's type on every call, which costs
        // more than the call itself.

        [DllImport(Library, EntryPoint = "rally_client_entities")]
        public static extern unsafe Status Entities(
            IntPtr client, Entity* entities, UIntPtr capacity, UIntPtr* count);

        [DllImport(Library, EntryPoint = "rally_client_entities_at")]
        public static extern unsafe Status EntitiesAt(
            IntPtr client, ulong atUs, Entity* entities, UIntPtr capacity, UIntPtr* count);

        [DllImport(Library, EntryPoint = "rally_client_frame")]
        public static extern unsafe Status PlayFrame(IntPtr client, Frame* frame);

        [DllImport(Library, EntryPoint = "rally_client_class_count")]
        public static extern Status ClassCount(IntPtr client, out UIntPtr count);

        [DllImport(Library, EntryPoint = "rally_client_class_name")]
        public static extern Status ClassName(
            IntPtr client, uint index, byte[] name, UIntPtr capacity, out UIntPtr length);

        [DllImport(Library, EntryPoint = "rally_client_poll_event")]
        public static extern unsafe Status PollEvent(
            IntPtr client, Event* ev, byte* data, UIntPtr capacity, UIntPtr* dataLength);

        [DllImport(Library, EntryPoint = "rally_client_set_value")]
        public static extern Status SetValue(
            IntPtr client, [MarshalAs(UnmanagedType.U1)] bool roomScope, byte[] key,
            byte[] value, UIntPtr length);

        [DllImport(Library, EntryPoint = "rally_client_relay")]
        public static extern Status Relay(
            IntPtr client, RelayTarget target, uint to,
            [MarshalAs(UnmanagedType.U1)] bool reliable, byte[] bytes, UIntPtr length);

        [DllImport(Library, EntryPoint = "rally_client_latency")]
        public static extern Status Latency(IntPtr client, out Latency latency);

        [DllImport(Library, EntryPoint = "rally_client_stats")]
        public static extern Status Stats(IntPtr client, out ConnectionStats stats);

        [DllImport(Library, EntryPoint = "rally_client_close")]
        public static extern Status Close(IntPtr client);
    }
}
