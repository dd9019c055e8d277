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
    /// <c>rally token issue</c> into <c>DevelopmentToken</c> while developing). Each frame:
    /// sample the rig, send at once, update, drain events, place entities, present.
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
        readonly byte[] eventData = new byte[64 * 1024];
        XrInput input;
        int frame;

        void Start()
        {
            if (DevelopmentToken.Length > 0) Connect(FromHex(DevelopmentToken), ServerAddress);
        }

        /// <summary>Joins the room with a connect token from the game's backend.</summary>
        public void Connect(byte[] token, string address)
        {
            if (Connection != null) Connection.Dispose();
            Connection = new RallyConnection((uint)(1e6 / Math.Max(1f, DisplayHz)), true, IoThread);
            Connection.Connect(token, address);
        }

        void Update()
        {
            if (Connection == null) return;
            ulong now = Connection.NowUs();
            if (ClientId.HasValue)
            {
                Sample(ref input);
                Connection.SendXrInput(now, ref input);
            }
            Connection.Update(now);
            DrainEvents();
            int count;
            while (!Connection.TryReadEntitiesAt(now, entities, out count))
                entities = new Entity[count * 2];
            Place(count);
        }

        void LateUpdate()
        {
            // Everything read this frame is drawn next: the latency meter's "presented".
            if (Connection != null) Connection.Present(Connection.NowUs());
        }

        void OnDestroy()
        {
            if (Connection != null) Connection.Dispose();
            Connection = null;
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
