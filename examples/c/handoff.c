/* The floor of handing an input from the game thread to another thread: what each way costs
 * the thread that hands it over, in thread CPU time per call, with a thread waiting on the
 * other side as an I/O thread would be.
 *
 *   eventfd   write(2) to an eventfd that the other thread waits on in poll(2)
 *   futex     FUTEX_WAKE of a thread waiting in FUTEX_WAIT
 *   cond      pthread_cond_signal (the mutex taken and let go around it) to a pthread_cond_wait
 *   udp       sendto(2) of an input-sized datagram to a loopback socket the other thread reads
 *             (on loopback the sender's call also runs the receiver's network stack)
 *   spin      a store to a slot that the other thread spins on: no syscall, but that thread
 *             burns a core the whole time
 *
 *   handoff [--calls N] [--gap-us US] [--input BYTES]
 *
 * Each call is timed alone (CLOCK_THREAD_CPUTIME_ID before and after, less the cost of that
 * pair of reads, measured first), with a gap between calls so that the other thread is back
 * waiting when the next one comes, as at a game's frame rate. Prints mean, p50, p99 and max in
 * microseconds per way. docs/ffi.md sets it beside the library's input phase. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum way { EVENTFD, FUTEX, COND, UDP, SPIN, WAYS };
static const char *names[WAYS] = {"eventfd", "futex", "cond", "udp", "spin"};

static int calls = 2000, gap_us = 500, input_bytes = 160;
static atomic_int stop, word, slot;
static int efd, rx_fd, tx_fd;
static struct sockaddr_in rx_addr;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int signalled;

static double cpu_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void sleep_us(long us) {
    struct timespec t = {us / 1000000L, (us % 1000000L) * 1000L};
    nanosleep(&t, NULL);
}

static long futex(atomic_int *at, int op, int value) {
    return syscall(SYS_futex, (int *)at, op, value, NULL, NULL, 0);
}

/* The other thread: waits for each hand-off the way `arg` names, until stopped. */
static void *consumer(void *arg) {
    enum way way = (enum way)(intptr_t)arg;
    char buf[2048];
    while (!atomic_load(&stop)) {
        switch (way) {
        case EVENTFD: {
            struct pollfd p = {efd, POLLIN, 0};
            uint64_t n;
            if (poll(&p, 1, 50) > 0 && read(efd, &n, sizeof n) < 0) perror("read");
            break;
        }
        case FUTEX:
            if (atomic_exchange(&word, 0) == 0) futex(&word, FUTEX_WAIT_PRIVATE, 0);
            break;
        case COND:
            pthread_mutex_lock(&lock);
            while (!signalled && !atomic_load(&stop)) pthread_cond_wait(&cond, &lock);
            signalled = 0;
            pthread_mutex_unlock(&lock);
            break;
        case UDP: {
            struct pollfd p = {rx_fd, POLLIN, 0};
            if (poll(&p, 1, 50) > 0) recv(rx_fd, buf, sizeof buf, MSG_DONTWAIT);
            break;
        }
        case SPIN:
            if (atomic_exchange(&slot, 0)) continue;
            break;
        default:
            break;
        }
    }
    return NULL;
}

/* One hand-off, the way `way` names. */
static void hand_off(enum way way, const char *input) {
    switch (way) {
    case EVENTFD: {
        uint64_t one = 1;
        if (write(efd, &one, sizeof one) < 0) perror("write");
        break;
    }
    case FUTEX:
        atomic_store(&word, 1);
        futex(&word, FUTEX_WAKE_PRIVATE, 1);
        break;
    case COND:
        pthread_mutex_lock(&lock);
        signalled = 1;
        pthread_cond_signal(&cond);
        pthread_mutex_unlock(&lock);
        break;
    case UDP:
        sendto(tx_fd, input, (size_t)input_bytes, 0, (struct sockaddr *)&rx_addr, sizeof rx_addr);
        break;
    case SPIN:
        atomic_store(&slot, 1);
        break;
    default:
        break;
    }
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Wakes the consumer until it stops, however it waits. */
static void stop_consumer(pthread_t thread, enum way way, const char *input) {
    atomic_store(&stop, 1);
    hand_off(way, input);
    pthread_join(thread, NULL);
    atomic_store(&stop, 0);
}

static void measure(enum way way, double clock_pair, double *cpu, const char *input) {
    pthread_t thread;
    pthread_create(&thread, NULL, consumer, (void *)(intptr_t)way);
    sleep_us(10000);
    for (int i = 0; i < calls; i++) {
        double before = cpu_us();
        hand_off(way, input);
        cpu[i] = cpu_us() - before - clock_pair;
        sleep_us(gap_us);
    }
    stop_consumer(thread, way, input);
    qsort(cpu, (size_t)calls, sizeof *cpu, by_value);
    double sum = 0;
    for (int i = 0; i < calls; i++) sum += cpu[i];
    printf("%-8s mean %6.2f us  p50 %6.2f  p99 %6.2f  max %7.2f%s\n", names[way], sum / calls,
           cpu[calls / 2], cpu[calls * 99 / 100], cpu[calls - 1],
           way == SPIN ? "  (the consumer spins: a core busy all along)" : "");
}

static void open_sockets(void) {
    rx_fd = socket(AF_INET, SOCK_DGRAM, 0);
    tx_fd = socket(AF_INET, SOCK_DGRAM, 0);
    memset(&rx_addr, 0, sizeof rx_addr);
    rx_addr.sin_family = AF_INET;
    rx_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof rx_addr;
    if (bind(rx_fd, (struct sockaddr *)&rx_addr, len) < 0 ||
        getsockname(rx_fd, (struct sockaddr *)&rx_addr, &len) < 0) {
        perror("socket");
        exit(1);
    }
    efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--calls")) calls = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gap-us")) gap_us = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--input")) input_bytes = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: handoff [--calls N] [--gap-us US] [--input BYTES]\n");
            return 2;
        }
    }
    if (calls < 1 || input_bytes < 1 || input_bytes > 2048 || gap_us < 0) {
        fprintf(stderr, "handoff: --calls >= 1, --input 1 to 2048, --gap-us >= 0\n");
        return 2;
    }
    open_sockets();
    char input[2048] = {0};
    double *cpu = calloc((size_t)calls, sizeof *cpu);
    /* The pair of clock reads around each call, measured alone: subtracted from each call. */
    double pair = 0;
    for (int i = 0; i < calls; i++) {
        double before = cpu_us();
        pair += cpu_us() - before;
    }
    pair /= calls;
    printf("handoff: %d calls each, %d us apart, %d-byte input; clock pair %.2f us subtracted\n",
           calls, gap_us, input_bytes, pair);
    for (enum way way = 0; way < WAYS; way++) measure(way, pair, cpu, input);
    free(cpu);
    return 0;
}
