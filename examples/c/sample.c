/* A Rally client in plain C: gets a connect token from `rally token issue` (playing the game's
 * backend), joins a room over UDP, moves a hand for a few seconds, prints what it sees, and
 * exits 0 only if the room shows the hand where the sample put it (and, with --grab, the
 * object it grabbed there too).
 *
 *   sample --rally PATH --key HEX --server IP:PORT [--input raw|xr] [--seconds S]
 *          [--grab X,Y,Z] [--class NAME] [--spin-us US] [--io-thread off|on|wake]
 *          [--calls separate|frame] [--floor FRAMES]
 *
 * --input raw (the default) sends the hand as the built-in `reference` and `paddles` rooms
 * decode it: seven little-endian floats (position, then rotation x, y, z, w). --input xr sends
 * the standard XR input of scene rooms (`rally server --scene`), moving the right hand.
 * --grab X,Y,Z (xr only) first puts the right hand at an object there with the grip pressed,
 * then carries it: the room must then show the hand at its final position and beside it an
 * entity of class NAME ("block" unless given) held by this client's right hand (the room's
 * roster: rally_client_class_name and RallyEntity's holder and hand).
 *
 * --spin-us US (0 by default): how long before each frame the loop stops sleeping and
 * polls the clock.
 *
 * --io-thread on|wake runs the library's I/O thread (RallyConfig.io_thread): the frame's calls
 * then do no socket work but an input's send (on) or a wake of that thread (wake). The sample
 * prints the CPU each frame's calls took on its own thread and the whole process's CPU per
 * frame (the I/O thread's included).
 *
 * --calls frame plays each frame in one rally_client_frame instead of the calls one by one
 * (separate, the default). --floor FRAMES then times FRAMES frames of one call that does
 * nothing (rally_version) and as many of no call, each after the same sleep: the floor of any
 * frame's design on this machine.
 *
 * examples/c/run.sh builds the library and this file, starts a server and runs it. */
#define _POSIX_C_SOURCE 200809L
#include "rally.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#define ENTITIES_MAX 1024
/* 90 Hz frames, as RallyConfig's default frame_us says. */
#define FRAME_US 11111
/* How long before a frame the sample stops sleeping and polls the clock (--spin-us). */
static uint64_t spin_us = 0;
#define TOKEN_BYTES_MAX 4096

/* Where the hand ends: the room must show an entity here. */
static const float TARGET[3] = {0.4f, 1.3f, -0.6f};
/* How close counts as "there": the snapshot quantizes positions to millimetres. */
#define CLOSE_M 0.02f
/* How far from the hand a held object may sit: its grab offset, at most the grab radius plus
 * the object's size. */
#define HELD_M 0.35f

static void fail(const char *what, RallyStatus status) {
    char message[512];
    size_t needed = 0;
    if (rally_last_error(message, sizeof message, &needed) != RALLY_STATUS_OK) {
        snprintf(message, sizeof message, "(message of %zu bytes)", needed);
    }
    fprintf(stderr, "sample: %s failed with status %d: %s\n", what, (int)status, message);
    exit(1);
}

#define CHECK(call)                                                                             \
    do {                                                                                        \
        RallyStatus status_ = (call);                                                           \
        if (status_ != RALLY_STATUS_OK) fail(#call, status_);                                   \
    } while (0)

static void sleep_us(long us) {
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

/* Waits for the next frame at `next` (the library's clock). Frames start on a fixed schedule,
 * as a display's do: a frame that starts late adds its lateness to the latency the meter
 * measures. It sleeps to the frame itself by default: with a microsecond of timer slack a
 * sleeper wakes within about 0.05 ms, and on a machine shared with other work a thread that
 * polls the clock instead is the one the scheduler preempts, for milliseconds (docs/ffi.md
 * has the runs side by side). */
static void wait_until(RallyClient *client, uint64_t next) {
    uint64_t now;
    CHECK(rally_client_now_us(client, &now));
    /* Sleeps until `spin_us` before the frame (again if woken early), then polls the clock. */
    while (now < next) {
        if (next > now + spin_us) sleep_us((long)(next - now - spin_us));
        CHECK(rally_client_now_us(client, &now));
    }
}

/* Asks the OS to wake this thread's sleeps within a microsecond of their end rather than the
 * default 50: a game's frame loop does the same (Rally's own driver does) so that frames start
 * on time. */
static void precise_timers(void) {
#ifdef __linux__
    prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
#endif
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A CPU clock (CLOCK_THREAD_CPUTIME_ID: this thread's; CLOCK_PROCESS_CPUTIME_ID: every
 * thread's), microseconds. */
static double cpu_us(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* What one read of this thread's CPU clock costs it (a system call, not the vDSO's): each
 * frame's figure holds one, which is taken out so that it counts the library's calls alone. */
static double clock_read_us(void) {
    enum { READS = 20000 };
    double from = cpu_us(CLOCK_THREAD_CPUTIME_ID);
    for (int i = 0; i < READS - 1; i++) cpu_us(CLOCK_THREAD_CPUTIME_ID);
    return (cpu_us(CLOCK_THREAD_CPUTIME_ID) - from) / READS;
}

/* The CPU each frame's calls took on this thread (sorts `cpu`), and the process's per frame
 * over the frames' whole span (waits included: the I/O thread works while this one sleeps). */
static void print_cpu(double *cpu, int frames, double process_us, const RallyConnectionStats *s) {
    if (frames <= 0) return;
    double sum = 0;
    for (int i = 0; i < frames; i++) sum += cpu[i];
    qsort(cpu, (size_t)frames, sizeof *cpu, compare_doubles);
    printf("cpu per frame: this thread mean %.1f us, p50 %.1f, p99 %.1f, max %.1f; the process "
           "%.1f us; %llu calls waited for the I/O thread (%llu us in all)\n",
           sum / frames, cpu[frames / 2], cpu[frames * 99 / 100], cpu[frames - 1],
           process_us / frames, (unsigned long long)s->io_lock_waits,
           (unsigned long long)s->io_lock_wait_us);
}

/* How late the frames started against their schedule: a frame late by more than the meter's
 * millisecond of slack takes two samples out of the model (its own input's, and the one before,
 * which it presents late). Sorts `late_ms`. */
static void print_lateness(double *late_ms, int frames) {
    if (frames <= 0) return;
    int over = 0;
    for (int i = 0; i < frames; i++) over += late_ms[i] > 1.0;
    qsort(late_ms, (size_t)frames, sizeof *late_ms, compare_doubles);
    printf("frame start lateness: p50 %.3f ms, p99 %.3f ms, max %.3f ms; %d of %d frames more "
           "than 1 ms late\n",
           late_ms[frames / 2], late_ms[frames * 99 / 100], late_ms[frames - 1], over, frames);
}

/* Runs `rally token issue` and decodes its hex into `token`; returns the length. */
static size_t issue_token(const char *rally, const char *key, const char *server,
                          uint8_t *token) {
    char command[1024];
    snprintf(command, sizeof command,
             "'%s' token issue --key %s --client %ld --room 0 --server %s --ttl 60", rally, key,
             (long)(time(NULL) % 100000) + 1, server);
    FILE *out = popen(command, "r");
    if (!out) {
        perror("sample: popen");
        exit(1);
    }
    static char hex[2 * TOKEN_BYTES_MAX + 2];
    size_t n = fread(hex, 1, sizeof hex - 1, out);
    hex[n] = '\0';
    if (pclose(out) != 0) {
        fprintf(stderr, "sample: `%s` failed\n", command);
        exit(1);
    }
    size_t len = 0;
    for (size_t i = 0; i + 1 < n && hex[i] != '\n'; i += 2) {
        unsigned byte;
        if (sscanf(hex + i, "%2x", &byte) != 1 || len == TOKEN_BYTES_MAX) {
            fprintf(stderr, "sample: `rally token issue` printed no hex token\n");
            exit(1);
        }
        token[len++] = (uint8_t)byte;
    }
    return len;
}

static void put_f32(uint8_t *out, float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    for (int i = 0; i < 4; i++) out[i] = (uint8_t)(bits >> (8 * i));
}

/* The hand at `at` (and the grip) as the room expects it: the standard XR input (`xr`) or
 * the built-in rooms' 28 bytes. */
struct hand {
    RallyXrInput xr;
    uint8_t bytes[28];
};

static void make_hand(struct hand *hand, int xr, const float at[3], uint8_t grip) {
    memset(hand, 0, sizeof *hand);
    if (xr) {
        RallyXrInput *input = &hand->xr;
        input->head.position[1] = 1.6f;
        input->head.rotation[3] = 1.0f;
        input->hands[0].pose.position[0] = -0.3f;
        input->hands[0].pose.position[1] = 1.0f;
        input->hands[0].pose.rotation[3] = 1.0f;
        memcpy(input->hands[1].pose.position, at, sizeof(float) * 3);
        input->hands[1].pose.rotation[3] = 1.0f;
        input->hands[1].grip = grip;
    } else {
        const float pose[7] = {at[0], at[1], at[2], 0.0f, 0.0f, 0.0f, 1.0f};
        for (int i = 0; i < 7; i++) put_f32(hand->bytes + 4 * i, pose[i]);
    }
}

/* Sends the hand at once. */
static void send_hand(RallyClient *client, uint64_t now, int xr, const struct hand *hand) {
    if (xr) CHECK(rally_client_send_xr_input(client, now, &hand->xr));
    else CHECK(rally_client_send_input_bytes(client, now, hand->bytes, sizeof hand->bytes));
}

/* An event's bytes at most: a key (256 bytes at most) and its value (16 KiB at most: the
 * room's class table of a scene of many bodies is kilobytes). */
#define EVENT_BYTES_MAX (256 + 16384)

/* Prints an event whose bytes are at `data`; returns 1 if it was this client's join, whose id
 * goes to *me. */
static int print_event(const RallyEvent *event, const uint8_t *data, uint32_t *me) {
    switch (event->kind) {
    case RALLY_EVENT_KIND_NONE:
        break;
    case RALLY_EVENT_KIND_JOINED:
        printf("joined as client %u\n", event->client);
        *me = event->client;
        return 1;
    case RALLY_EVENT_KIND_PLAYER_JOINED:
        printf("player %u is in the room\n", event->client);
        break;
    case RALLY_EVENT_KIND_PLAYER_LEFT:
        printf("player %u left\n", event->client);
        break;
    case RALLY_EVENT_KIND_RELAYED:
        printf("relay from %u: %u bytes\n", event->client, event->data_len);
        break;
    case RALLY_EVENT_KIND_CHANGED:
        printf("value %.*s changed (%u bytes)\n", (int)event->key_len, (const char *)data,
               event->data_len - event->key_len);
        break;
    case RALLY_EVENT_KIND_DISCONNECTED:
        printf("disconnected, reason %d\n", (int)event->reason);
        break;
    }
    return 0;
}

/* Prints the events waiting; returns 1 if one was this client's join, whose id goes to *me. */
static int print_events(RallyClient *client, uint32_t *me) {
    int joined = 0;
    RallyEvent event;
    static uint8_t data[EVENT_BYTES_MAX];
    size_t len;
    do {
        CHECK(rally_client_poll_event(client, &event, data, sizeof data, &len));
        joined |= print_event(&event, data, me);
    } while (event.kind != RALLY_EVENT_KIND_NONE);
    return joined;
}

/* One frame in one call: the hand sent at `now`, the events printed (those the array had no
 * room for polled after), the entities read at `now` into `entities`, presented at the call's
 * end as the separate calls present once read. Returns the entities read. */
static size_t play_frame(RallyClient *client, uint64_t now, int xr, const struct hand *hand,
                         RallyEntity *entities, uint32_t *me) {
    static RallyEvent events[16];
    static uint8_t data[EVENT_BYTES_MAX];
    RallyFrame frame;
    memset(&frame, 0, sizeof frame);
    frame.now_us = now;
    if (xr) frame.xr_input = &hand->xr;
    else {
        frame.input_bytes = hand->bytes;
        frame.input_len = sizeof hand->bytes;
    }
    frame.events = events;
    frame.events_capacity = sizeof events / sizeof events[0];
    frame.event_data = data;
    frame.event_data_capacity = sizeof data;
    frame.entities = entities;
    frame.entities_capacity = ENTITIES_MAX;
    frame.present_us = RALLY_PRESENT_NOW;
    CHECK(rally_client_frame(client, &frame));
    const uint8_t *bytes = data;
    for (size_t i = 0; i < frame.events_count; i++) {
        print_event(&events[i], bytes, me);
        bytes += events[i].data_len;
    }
    if (frame.events_more) print_events(client, me);
    return frame.entities_count;
}

/* The floor of any frame's design here: `frames` frames, each after the same sleep as the
 * play's, of one call that does nothing (rally_version), then as many of no call (two clock
 * reads less one: what the measurement leaves). Prints mean, p50 and p99 of each. */
static void print_floor(RallyClient *client, int frames, double clock_us) {
    double *call = calloc((size_t)frames, sizeof *call);
    double *none = calloc((size_t)frames, sizeof *none);
    if (!call || !none) {
        fprintf(stderr, "sample: out of memory\n");
        exit(1);
    }
    uint64_t start;
    CHECK(rally_client_now_us(client, &start));
    for (int n = 0; n < frames; n++) {
        double before = cpu_us(CLOCK_THREAD_CPUTIME_ID);
        if (!rally_version()) exit(1);
        call[n] = cpu_us(CLOCK_THREAD_CPUTIME_ID) - before - clock_us;
        wait_until(client, start + (uint64_t)(2 * n + 1) * FRAME_US);
        before = cpu_us(CLOCK_THREAD_CPUTIME_ID);
        none[n] = cpu_us(CLOCK_THREAD_CPUTIME_ID) - before - clock_us;
        wait_until(client, start + (uint64_t)(2 * n + 2) * FRAME_US);
    }
    double *each[2] = {call, none};
    double sums[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        for (int n = 0; n < frames; n++) sums[k] += each[k][n];
        qsort(each[k], (size_t)frames, sizeof *call, compare_doubles);
    }
    printf("floor, %d frames after the same sleep: one call that does nothing (rally_version) "
           "mean %.2f us, p50 %.2f, p99 %.2f; no call mean %.2f us, p50 %.2f, p99 %.2f\n",
           frames, sums[0] / frames, call[frames / 2], call[frames * 99 / 100],
           sums[1] / frames, none[frames / 2], none[frames * 99 / 100]);
    free(call);
    free(none);
}
/* How long the room may take to accept the client, in frames (5 s at 90 Hz). */
#define JOIN_FRAMES_MAX 450

/* Runs frames (update, events, present) from `start` until the room accepts the client, and
 * returns how many it took. No input goes before: it would wait in the session and be measured
 * from its sampling. The play's schedule counts from here, so that a room slow to accept (a
 * debug build on a loaded machine) still gets the whole reach. */
static int join(RallyClient *client, uint64_t start, uint32_t *me) {
    for (int n = 0; n < JOIN_FRAMES_MAX; n++) {
        uint64_t now;
        CHECK(rally_client_now_us(client, &now));
        CHECK(rally_client_update(client, now));
        int joined = print_events(client, me);
        CHECK(rally_client_present(client, now));
        wait_until(client, start + (uint64_t)(n + 1) * FRAME_US);
        if (joined) return n + 1;
    }
    fprintf(stderr, "sample: the room did not accept the client within 5 s\n");
    exit(1);
}

static float distance(const float a[3], const float b[3]) {
    float dx = a[0] - b[0], dy = a[1] - b[1], dz = a[2] - b[2];
    return sqrtf(dx * dx + dy * dy + dz * dz);
}

int main(int argc, char **argv) {
    const char *rally = NULL, *key = NULL, *server = NULL;
    int xr = 0, grab = 0;
    double seconds = 3.0;
    float grab_at[3] = {0};
    const char *grab_class = "block";
    uint32_t io_thread = RALLY_IO_THREAD_OFF;
    int one_call = 0, floor_frames = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rally")) rally = argv[i + 1];
        else if (!strcmp(argv[i], "--key")) key = argv[i + 1];
        else if (!strcmp(argv[i], "--server")) server = argv[i + 1];
        else if (!strcmp(argv[i], "--input")) xr = !strcmp(argv[i + 1], "xr");
        else if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--class")) grab_class = argv[i + 1];
        else if (!strcmp(argv[i], "--spin-us")) spin_us = (uint64_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--calls")) one_call = !strcmp(argv[i + 1], "frame");
        else if (!strcmp(argv[i], "--floor")) floor_frames = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--io-thread")) {
            io_thread = !strcmp(argv[i + 1], "on")     ? RALLY_IO_THREAD_ON
                        : !strcmp(argv[i + 1], "wake") ? RALLY_IO_THREAD_WAKE
                                                       : RALLY_IO_THREAD_OFF;
        }
        else if (!strcmp(argv[i], "--grab")) {
            grab = sscanf(argv[i + 1], "%f,%f,%f", &grab_at[0], &grab_at[1], &grab_at[2]) == 3;
        }
    }
    if (!rally || !key || !server || (grab && !xr)) {
        fprintf(stderr, "usage: sample --rally PATH --key HEX --server IP:PORT "
                        "[--input raw|xr] [--seconds S] [--grab X,Y,Z (xr only)] "
                        "[--class NAME] [--spin-us US] [--io-thread off|on|wake] "
                        "[--calls separate|frame] [--floor FRAMES]\n");
        return 2;
    }
    printf("librally %s; %s input%s; I/O thread %s; %s\n", rally_version(),
           xr ? "XR" : "raw hand", grab ? ", grabbing" : "",
           io_thread == RALLY_IO_THREAD_OFF  ? "off"
           : io_thread == RALLY_IO_THREAD_ON ? "on"
                                             : "wake",
           one_call ? "one call a frame" : "the calls one by one");

    static uint8_t token[TOKEN_BYTES_MAX];
    size_t token_len = issue_token(rally, key, server, token);

    RallyConfig config;
    CHECK(rally_config_default(&config));
    config.io_thread = io_thread;
    RallyClient *client = NULL;
    CHECK(rally_client_create(&config, &client));
    CHECK(rally_client_connect(client, token, token_len, server));

    /* 90 Hz frames: the first part circles the hand (or takes the object), the rest holds it
     * at TARGET so that the room's newest snapshot shows it there. */
    static RallyEntity entities[ENTITIES_MAX];
    size_t count = 0;
    int frames = (int)(seconds * 90.0);
    double *late_ms = calloc(frames > 0 ? (size_t)frames : 1, sizeof *late_ms);
    double *cpu = calloc(frames > 0 ? (size_t)frames : 1, sizeof *cpu);
    if (!late_ms || !cpu) {
        fprintf(stderr, "sample: out of memory\n");
        return 1;
    }
    precise_timers();
    uint32_t me = RALLY_NONE;
    uint64_t start;
    CHECK(rally_client_now_us(client, &start));
    int first = join(client, start, &me);
    printf("joined after %d frames (%.0f ms)\n", first, first * FRAME_US / 1000.0);
    double clock_us = clock_read_us();
    printf("one read of the thread's CPU clock: %.3f us (taken out of each frame's figure)\n",
           clock_us);
    double process_from = cpu_us(CLOCK_PROCESS_CPUTIME_ID);
    for (int k = 0; k < frames; k++) {
        int n = first + k; /* frames since `start` */
        uint64_t now;
        CHECK(rally_client_now_us(client, &now));
        late_ms[k] = (double)(now - (start + (uint64_t)n * FRAME_US)) / 1000.0;
        double cpu_from = cpu_us(CLOCK_THREAD_CPUTIME_ID);
        float t = (float)k / 90.0f;
        float at[3];
        uint8_t grip = 0;
        if (grab && k < frames / 3) {
            memcpy(at, grab_at, sizeof at);
            grip = k > 20 ? 255 : 0; /* reach, then close the hand */
        } else if (k < frames / 2) {
            at[0] = TARGET[0] + 0.2f * cosf(t * 3.0f);
            at[1] = TARGET[1];
            at[2] = TARGET[2] + 0.2f * sinf(t * 3.0f);
            grip = grab ? 255 : 0;
        } else {
            memcpy(at, TARGET, sizeof at);
            grip = grab ? 255 : 0;
        }
        struct hand hand;
        make_hand(&hand, xr, at, grip);
        if (one_call) {
            count = play_frame(client, now, xr, &hand, entities, &me);
        } else {
            send_hand(client, now, xr, &hand);
            CHECK(rally_client_update(client, now));
            print_events(client, &me);
            CHECK(rally_client_entities_at(client, now, entities, ENTITIES_MAX, &count));
            /* Presented once read: with the I/O thread a state that came during the frame's
             * work is shown too, and was not there at the frame's start. */
            uint64_t shown;
            CHECK(rally_client_now_us(client, &shown));
            CHECK(rally_client_present(client, shown));
        }
        cpu[k] = cpu_us(CLOCK_THREAD_CPUTIME_ID) - cpu_from - clock_us;
        if (k % 90 == 89) {
            RallyConnectionStats stats;
            CHECK(rally_client_stats(client, &stats));
            printf("t=%.0fs: %zu entities, rtt %.2f ms, jitter %.2f ms, loss %.1f%%, "
                   "%llu snapshots\n",
                   (double)(k + 1) / 90.0, count, (double)stats.rtt_us / 1000.0,
                   (double)stats.jitter_us / 1000.0, stats.loss * 100.0,
                   (unsigned long long)stats.snapshots);
        }
        wait_until(client, start + (uint64_t)(n + 1) * FRAME_US);
    }
    double process_us = cpu_us(CLOCK_PROCESS_CPUTIME_ID) - process_from;
    print_lateness(late_ms, frames);
    RallyConnectionStats stats;
    CHECK(rally_client_stats(client, &stats));
    print_cpu(cpu, frames, process_us, &stats);
    if (floor_frames > 0) print_floor(client, floor_frames, clock_us);
    free(late_ms);
    free(cpu);

    /* The newest state: what the room last said. */
    CHECK(rally_client_entities(client, entities, ENTITIES_MAX, &count));
    /* The hand is where the sample put it; a held object keeps the offset it was grabbed at
     * (the grip takes the nearest grabbable within the scene's radius, not the one under the
     * hand's centre), so it is counted within HELD_M of the target: nothing else of the scene
     * starts that close to it. */
    int at_target = 0, held = 0;
    for (size_t i = 0; i < count; i++) {
        const RallyEntity *e = &entities[i];
        float d = distance(e->position, TARGET);
        /* Held by this client's right hand, as the room's roster says. */
        int ours = e->holder == me && e->hand == RALLY_HAND_RIGHT;
        if (d < CLOSE_M) {
            at_target++;
        } else if (grab && d < HELD_M && ours) {
            held++;
        } else {
            continue;
        }
        char class[64] = "?";
        size_t len = 0;
        if (e->class_index != RALLY_NONE) {
            CHECK(rally_client_class_name(client, e->class_index, (uint8_t *)class, sizeof class - 1,
                                          &len));
            class[len] = 0;
        }
        printf("entity %u, a %s, at (%.3f, %.3f, %.3f)%s\n", e->id, class,
               (double)e->position[0], (double)e->position[1], (double)e->position[2],
               d < CLOSE_M ? ", the hand" : ", held by this client's right hand");
        if (d >= CLOSE_M && grab && strcmp(class, grab_class) != 0) {
            fprintf(stderr, "sample: the held entity's class is %s, not %s\n", class,
                    grab_class);
            return 1;
        }
    }
    RallyLatency latency;
    CHECK(rally_client_latency(client, &latency));
    printf("latency: %llu samples, mean %.2f ms, p99 %.2f ms, %.0f%% within the model "
           "[%.2f, %.2f] ms, %.0f%% above it, %.0f%% at L_best\n",
           (unsigned long long)latency.samples, (double)latency.mean_us / 1000.0,
           (double)latency.p99_us / 1000.0, latency.within_model * 100.0,
           (double)latency.best_us / 1000.0, (double)latency.worst_us / 1000.0,
           latency.above_model * 100.0, latency.at_best * 100.0);
    CHECK(rally_client_close(client));
    RallyStatus after = rally_client_update(client, 0);
    CHECK(rally_client_destroy(client));

    printf("%d entit%s at the hand's target (%.2f, %.2f, %.2f), %d held by this client beside "
           "it (%s)\n",
           at_target, at_target == 1 ? "y" : "ies", (double)TARGET[0], (double)TARGET[1],
           (double)TARGET[2], held, grab ? "one wanted" : "none wanted");
    if (after != RALLY_STATUS_CLOSED) {
        fprintf(stderr, "sample: a call after close returned %d, not CLOSED\n", (int)after);
        return 1;
    }
    if (count == 0 || latency.samples == 0) {
        fprintf(stderr, "sample: no entities or no latency samples: the room never answered\n");
        return 1;
    }
    return at_target >= 1 && (!grab || held >= 1) ? 0 : 1;
}
