/* The kernel's floor under a client frame: what the syscalls of one frame cost with no library
 * around them. A "server" thread sends a snapshot-sized datagram to the client socket at the
 * room's tick rate and drains what the client sends; the main thread plays the client at 90 Hz:
 * each frame it sends one input-sized datagram (sendmmsg, as the driver does) and drains every
 * datagram waiting (recvmmsg, 64 at a time), and its thread CPU time around that work is the
 * frame's cost. On loopback the sender's syscall also runs the receiver's network stack, as it
 * does for the library.
 *
 *   floor [--frames N] [--input BYTES] [--snapshot BYTES] [--tick-hz HZ]
 *
 * Prints the mean, p50, p99 and max of the per-frame CPU in microseconds (and JSON with
 * --json). docs/ffi.md sets it beside the library's frame. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define BYTES_MAX 2048

static int client_fd, server_fd;
static struct sockaddr_in client_addr, server_addr;
static int snapshot_bytes = 1100, tick_hz = 120;
static volatile int running = 1;

static double cpu_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void sleep_ns(long ns) {
    struct timespec t = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&t, NULL);
}

/* Drains every datagram waiting on `fd`, BATCH per recvmmsg; returns how many. */
static int drain(int fd) {
    static __thread char bufs[BATCH][BYTES_MAX];
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    int total = 0;
    for (;;) {
        memset(msgs, 0, sizeof msgs);
        for (int i = 0; i < BATCH; i++) {
            iov[i].iov_base = bufs[i];
            iov[i].iov_len = BYTES_MAX;
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        int n = recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
        if (n <= 0) return total;
        total += n;
        if (n < BATCH) return total;
    }
}

static void send_one(int fd, const struct sockaddr_in *to, int bytes) {
    static __thread char payload[BYTES_MAX];
    struct iovec iov = {payload, (size_t)bytes};
    struct mmsghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_hdr.msg_name = (void *)to;
    msg.msg_hdr.msg_namelen = sizeof *to;
    msg.msg_hdr.msg_iov = &iov;
    msg.msg_hdr.msg_iovlen = 1;
    if (sendmmsg(fd, &msg, 1, 0) != 1) perror("sendmmsg");
}

static void *server(void *arg) {
    (void)arg;
    long tick_ns = 1000000000L / tick_hz;
    while (running) {
        send_one(server_fd, &client_addr, snapshot_bytes);
        drain(server_fd);
        sleep_ns(tick_ns);
    }
    return NULL;
}

static int bound_socket(struct sockaddr_in *addr) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    memset(addr, 0, sizeof *addr);
    addr->sin_family = AF_INET;
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof *addr;
    if (fd < 0 || bind(fd, (struct sockaddr *)addr, len) != 0 ||
        getsockname(fd, (struct sockaddr *)addr, &len) != 0) {
        perror("socket");
        exit(1);
    }
    return fd;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int frames = 900, input_bytes = 160;
    const char *json = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--frames")) frames = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--input")) input_bytes = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--snapshot")) snapshot_bytes = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tick-hz")) tick_hz = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--json")) json = argv[i + 1];
    }
    if (frames < 1 || input_bytes < 1 || input_bytes > BYTES_MAX || snapshot_bytes < 1 ||
        snapshot_bytes > BYTES_MAX || tick_hz < 1) {
        fprintf(stderr, "floor: --frames >= 1, sizes 1 to %d, --tick-hz >= 1\n", BYTES_MAX);
        return 2;
    }
    client_fd = bound_socket(&client_addr);
    server_fd = bound_socket(&server_addr);
    pthread_t thread;
    pthread_create(&thread, NULL, server, NULL);
    double *cpu = malloc(sizeof(double) * (size_t)frames);
    long received = 0;
    for (int n = -10; n < frames; n++) { /* ten frames to warm up */
        double before = cpu_us();
        send_one(client_fd, &server_addr, input_bytes);
        int got = drain(client_fd);
        double spent = cpu_us() - before;
        if (n >= 0) {
            cpu[n] = spent;
            received += got;
        }
        sleep_ns(1000000000L / 90);
    }
    running = 0;
    pthread_join(thread, NULL);
    double sum = 0;
    for (int i = 0; i < frames; i++) sum += cpu[i];
    qsort(cpu, (size_t)frames, sizeof(double), by_value);
    double p99 = cpu[(frames * 99) / 100 < frames ? (frames * 99) / 100 : frames - 1];
    printf("kernel floor: %d frames, one %d-byte datagram out and %.2f of %d bytes in a frame: "
           "CPU per frame mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us\n",
           frames, input_bytes, (double)received / frames, snapshot_bytes, sum / frames,
           cpu[frames / 2], p99, cpu[frames - 1]);
    if (json) {
        FILE *out = fopen(json, "w");
        if (!out) return 1;
        fprintf(out, "{\"frames\": %d, \"input_bytes\": %d, \"snapshot_bytes\": %d, "
                     "\"datagrams_in_per_frame\": %.3f, \"cpu_us\": {\"mean\": %.2f, "
                     "\"p50\": %.2f, \"p99\": %.2f, \"max\": %.2f}}\n",
                frames, input_bytes, snapshot_bytes, (double)received / frames, sum / frames,
                cpu[frames / 2], p99, cpu[frames - 1]);
        fclose(out);
    }
    free(cpu);
    return 0;
}
