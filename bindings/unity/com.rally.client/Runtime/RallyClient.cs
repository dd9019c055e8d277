// The Unity side: a MonoBehaviour that joins a Rally room, sends the XR rig's head and hands
// as the standard XR input every frame, and shows every entity of the room as a GameObject at
// the pose the library interpolates for the frame. Only Unity compiles this file (it needs
// UnityEngine); the rest of Runtime/ is plain C# that CI runs under Mono.
#if UNITY_5_3_OR_NEWER
using System;
using System.Collections.Generic;
using UnityEngine;
using UnityEngine.XR;

namespace Rally
{
    /// <summary>
    /// Add it to a GameObject, give it the rig's transforms and a prefab, and call
    /// <c>Connect</c> with the token your backend issued (or paste one from
    /// <c>rally token issue</c> into <c>DevelopmentToken</c> while developing). Each frame, in
    /// one call into the library (<c>RallyConnection.PlayFrame</c>): the previous frame's
    /// present, the rig sampled and sent at once, update, the events, the entities at the
    /// frame's time; then the entities placed.
    /// </summary>
    [DefaultExecutionOrder(-100)]
    public sealed class RallyClient : MonoBehaviour
    {
        [Tooltip("The room server, ip:port (one the token names).")]
        public string ServerAddress = "127.0.0.1:7777";
        [Tooltip("A token in hex from `rally token issue`, for development only: a shipped " +
            "game gets its token from its backend and calls Connect.")]
        public string DevelopmentToken = "";
        [Tooltip("The XR rig's head (the main camera), left and right hand.")]
        public Transform Head, LeftHand, RightHand;
        [Tooltip("What each of the room's entities looks like.")]
        public GameObject EntityPrefab;
        [Tooltip("Parent of the entities' GameObjects: the room's origin in this scene.")]
        public Transform Room;
        [Tooltip("The headset's display rate, Hz: the latency model's frame.")]
        public float DisplayHz = 90;
        [Tooltip("Off: the socket work runs in Update. On: on a thread of the library's own, " +
            "for a game whose main thread is the bottleneck (docs/integrating.md).")]
        public IoThread IoThread = IoThread.Off;

        /// <summary>The native client, once connected; null before.</summary>
        public RallyConnection Connection { get; private set; }
        /// <summary>This client's id in the room, once joined.</summary>
        public uint? ClientId { get; private set; }
        /// <summary>Each event the room sends (relay messages, key-values, players).</summary>
        public event Action<Event, ArraySegment<byte>> EventReceived;

        struct Shown
        {
            public Transform Transform;
            public int Frame;
        }

        readonly Dictionary<uint, Shown> shown = new Dictionary<uint, Shown>();
        readonly List<uint> gone = new List<uint>();
        Entity[] entities = new Entity[256];
        readonly Event[] events = new Event[32];
        byte[] eventData = new byte[64 * 1024];
        XrInput input;
        int frame;
        /// <summary>The library's clock when this frame's call read it, and Unity's then.</summary>
        ulong readUs;
        double readAt;
        /// <summary>When the previous frame was presented, for the next call (0: none).</summary>
        ulong presentedUs;

        void Start()
        {
            if (DevelopmentToken.Length > 0) Connect(FromHex(DevelopmentToken), ServerAddress);
        }

        /// <summary>Joins the room with a connect token from the game's backend.</summary>
        public void Connect(byte[] token, string address)
        {
            if (Connection != null) Connection.Dispose();
            Connection = new RallyConnection((uint)(1e6 / Math.Max(1f, DisplayHz)), true, IoThread);
            // A new client's clock: no present of the old one's frames.
            readUs = 0;
            presentedUs = 0;
            Connection.Connect(token, address);
        }

        void Update()
        {
            if (Connection == null) return;
            bool send = ClientId.HasValue;
            if (send) Sample(ref input);
            // The clock read by the call (NowUs 0), the entities at its time (AtUs 0).
            var call = new Frame { PresentedUs = presentedUs };
            readAt = Time.realtimeSinceStartupAsDouble;
            bool fits;
            try
            {
                fits = Connection.PlayFrame(ref call, ref input, send, events, eventData,
                    entities);
            }
            catch (RallyException)
            {
                // Every step ran: the events taken (a Disconnected among them) still count.
                Dispatch((int)call.EventsCount);
                throw;
            }
            readUs = call.NowUs;
            presentedUs = 0;
            int count = (int)call.EntitiesCount;
            if (!fits)
            {
                // Every other step ran: read again into room for what the call counted.
                if (count > entities.Length) entities = new Entity[count * 2];
                if ((int)call.EventDataLength > eventData.Length)
                    eventData = new byte[(int)call.EventDataLength * 2];
                while (!Connection.TryReadEntitiesAt(readUs, entities, out count))
                    entities = new Entity[count * 2];
            }
            Dispatch((int)call.EventsCount);
            if (call.EventsMore != 0) DrainEvents();
            Place(count);
        }

        void LateUpdate()
        {
            // Everything read this frame is drawn next: the latency meter's "presented", told
            // with the next frame's call (no call of its own), on the library's clock.
            if (Connection == null || readUs == 0) return;
            presentedUs = readUs + (ulong)((Time.realtimeSinceStartupAsDouble - readAt) * 1e6);
        }

        void OnDestroy()
        {
            if (Connection != null) Connection.Dispose();
            Connection = null;
        }

        /// <summary>The frame call's events, each with its share of the bytes.</summary>
        void Dispatch(int count)
        {
            int at = 0;
            for (int i = 0; i < count; i++)
            {
                Event ev = events[i];
                if (ev.Kind == EventKind.Joined) ClientId = ev.Client;
                if (EventReceived != null)
                    EventReceived(ev, new ArraySegment<byte>(eventData, at, (int)ev.DataLength));
                at += (int)ev.DataLength;
            }
        }

        void DrainEvents()
        {
            Event ev;
            int length;
            while (Connection.PollEvent(out ev, eventData, out length))
            {
                if (ev.Kind == EventKind.Joined) ClientId = ev.Client;
                if (EventReceived != null)
                    EventReceived(ev, new ArraySegment<byte>(eventData, 0, length));
            }
        }

        /// <summary>
        /// The rig as the standard XR input: poses in the room's frame, grip and trigger.
        /// </summary>
        void Sample(ref XrInput into)
        {
            into.Head = ToRoom(Head);
            SampleHand(ref into.Left, LeftHand, XRNode.LeftHand);
            SampleHand(ref into.Right, RightHand, XRNode.RightHand);
        }

        void SampleHand(ref Hand hand, Transform transform, XRNode node)
        {
            hand.Pose = ToRoom(transform);
            InputDevice device = InputDevices.GetDeviceAtXRNode(node);
            float grip, trigger;
            bool gripped = device.TryGetFeatureValue(CommonUsages.grip, out grip);
            bool triggered = device.TryGetFeatureValue(CommonUsages.trigger, out trigger);
            hand.Grip = gripped ? Byte(grip) : (byte)0;
            hand.Trigger = triggered ? Byte(trigger) : (byte)0;
        }

        /// <summary>Shows each entity at its pose; hides those the room no longer has.</summary>
        void Place(int count)
        {
            frame++;
            for (int i = 0; i < count; i++)
            {
                Shown entry;
                if (!shown.TryGetValue(entities[i].Id, out entry))
                {
                    GameObject created = Instantiate(EntityPrefab, Room);
                    created.name = "rally-" + entities[i].Id;
                    entry.Transform = created.transform;
                }
                entry.Frame = frame;
                shown[entities[i].Id] = entry;
                entry.Transform.localPosition = ToUnity(entities[i].Position);
                entry.Transform.localRotation = ToUnity(entities[i].Rotation);
            }
            if (shown.Count == count) return;
            gone.Clear();
            foreach (var pair in shown) if (pair.Value.Frame != frame) gone.Add(pair.Key);
            foreach (uint id in gone)
            {
                Destroy(shown[id].Transform.gameObject);
                shown.Remove(id);
            }
        }

        // Rally's room is right-handed (x right, y up, -z forward, as OpenXR); Unity's world is
        // left-handed (+z forward): mirror z, and the quaternion with it.
        static Vector3 ToUnity(Vec3 v) { return new Vector3(v.X, v.Y, -v.Z); }

        static Quaternion ToUnity(Quat q) { return new Quaternion(-q.X, -q.Y, q.Z, q.W); }

        Pose ToRoom(Transform t)
        {
            Vector3 p = Room != null ? Room.InverseTransformPoint(t.position) : t.position;
            Quaternion r = t.rotation;
            if (Room != null) r = Quaternion.Inverse(Room.rotation) * r;
            return new Pose
            {
                Position = new Vec3(p.x, p.y, -p.z),
                Rotation = new Quat { X = -r.x, Y = -r.y, Z = r.z, W = r.w },
            };
        }

        static byte Byte(float pressed) { return (byte)Mathf.Clamp(pressed * 255f, 0f, 255f); }

        static byte[] FromHex(string hex)
        {
            var bytes = new byte[hex.Length / 2];
            for (int i = 0; i < bytes.Length; i++)
                bytes[i] = Convert.ToByte(hex.Substring(2 * i, 2), 16);
            return bytes;
        }
    }
}
#endif
