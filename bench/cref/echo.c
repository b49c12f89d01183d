//go:build ignore

// The constraint above keeps the go tool from taking this file for a cgo
// source of package cref, which embeds it and compiles it with cc instead.

/*
 * echo.c: the reference echo server in C for edgepoll's cross-process
 * benchmarks, the floor the Go servers are measured against: one thread,
 * one epoll instance, edge-triggered, no allocation on the echo path once
 * a connection's pending buffer has grown.
 *
 *	cc -O2 -Wall -Wextra -o echo echo.c
 *	taskset -c 0 ./echo -addr 127.0.0.1:0 -lifetime 30s
 *
 * It keeps cmd/echoserver's contract, so that the same scripts drive it:
 *   -addr host:port    address to listen on (default 127.0.0.1:0)
 *   -lifetime D        exit after D, a Go duration (30s, 500ms, 1m30s) or
 *                      a number of seconds; 0 (the default) runs until
 *                      SIGINT or SIGTERM
 * and the first line on stdout is
 *   echoserver listening on IP:PORT (impl=c-epoll-et)
 * On exit it prints its counters as one line on stderr.
 *
 * Every socket is registered once, EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET, and
 * never modified. Edge-triggered means an event says only that something
 * changed, so each handler works until EAGAIN: the listener accepts until
 * EAGAIN; a connection reads until EAGAIN (or EOF) and writes each chunk
 * straight back. What the socket does not take goes to the connection's
 * pending buffer, and while that holds bytes, new input is appended behind
 * them to keep the order; EPOLLOUT flushes it. Input is always read, so
 * the pending buffer is not bounded: a peer that writes without reading
 * makes it grow, as it makes gnet's and nbio's outbound buffers grow.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define READ_SIZE (64 << 10) /* bytes read at a time, as the Go servers do */
#define MAX_EVENTS 256

/* A conn is one accepted connection. epoll_event.data.ptr points to it. */
struct conn {
	int fd;
	bool eof;    /* the peer has shut its side: close once out drains */
	char *out;   /* pending output, out[off:len]: read, not yet written */
	size_t off;
	size_t len;
	size_t cap;
};

/*
 * The other sockets' epoll_event.data.ptr is the address of one of these
 * tags, which no conn can have.
 */
static char listener_tag, timer_tag, signal_tag;

/* Counters printed on exit. */
static struct {
	unsigned long long accepted;
	unsigned long long bytes;   /* bytes read, and so echoed */
	unsigned long long partial; /* writes the socket did not take whole */
} stats;

static char rbuf[READ_SIZE];

static void die(const char *what)
{
	fprintf(stderr, "echo: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: echo [-addr host:port] [-lifetime duration]\n"
		   "  -addr host:port\n"
		   "    \taddress to listen on (default \"127.0.0.1:0\")\n"
		   "  -lifetime duration\n"
		   "    \texit after this long, e.g. 30s or 500ms (0: run until SIGINT or SIGTERM)\n");
}

/*
 * parse_duration returns the nanoseconds of s, a Go duration ("1.5s",
 * "300ms", "1m30s") or a plain number of seconds ("30", "0.5"), or -1 if s
 * is neither.
 */
static long long parse_duration(const char *s)
{
	static const struct {
		const char *name;
		double ns;
	} units[] = {
		/* "ms" before "m", or "5ms" would read as 5 minutes and an "s" */
		{"ns", 1}, {"us", 1e3}, {"\xc2\xb5s", 1e3}, {"\xce\xbcs", 1e3},
		{"ms", 1e6}, {"s", 1e9}, {"m", 60e9}, {"h", 3600e9},
	};
	const char *p = s;
	double total = 0;

	if (*p == '\0')
		return -1;
	while (*p != '\0') {
		const char *num = p;
		bool digits = false;
		double v = 0, scale = 1;
		size_t i;

		for (; *p >= '0' && *p <= '9'; p++, digits = true)
			v = v * 10 + (*p - '0');
		if (*p == '.')
			for (p++; *p >= '0' && *p <= '9'; p++, digits = true)
				v += (*p - '0') * (scale /= 10);
		if (!digits)
			return -1;
		if (*p == '\0') {
			if (num != s) /* "1m5": a number without its unit */
				return -1;
			total = v * 1e9; /* a plain number: seconds */
			break;
		}
		for (i = 0; i < sizeof units / sizeof units[0]; i++) {
			size_t n = strlen(units[i].name);

			if (strncmp(p, units[i].name, n) == 0) {
				total += v * units[i].ns;
				p += n;
				break;
			}
		}
		if (i == sizeof units / sizeof units[0])
			return -1;
	}
	return total > (double)LLONG_MAX ? -1 : (long long)total;
}

/*
 * flag_value returns the value of flag name (given without dashes) if
 * argv[*i] is it, as -name v, -name=v, --name v or --name=v, advancing *i
 * past a separate value; NULL if argv[*i] is another flag.
 */
static const char *flag_value(int argc, char **argv, int *i, const char *name)
{
	const char *a = argv[*i];
	size_t n = strlen(name);

	a += a[1] == '-' ? 2 : 1;
	if (strncmp(a, name, n) != 0)
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n] != '\0')
		return NULL;
	if (*i + 1 >= argc) {
		fprintf(stderr, "flag needs an argument: -%s\n", name);
		usage(stderr);
		exit(2);
	}
	return argv[++*i];
}

static int listen_on(const char *addr)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	size_t hlen;
	struct addrinfo hints = {0}, *res, *ai;
	int fd = -1, err, one = 1;

	if (colon == NULL || (hlen = colon - addr) >= sizeof host) {
		fprintf(stderr, "echo: bad -addr %s: want host:port\n", addr);
		exit(2);
	}
	memcpy(host, addr, hlen);
	host[hlen] = '\0';
	if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') { /* [::1] */
		memmove(host, host + 1, hlen - 2);
		host[hlen - 2] = '\0';
	}
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	err = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &res);
	if (err != 0) {
		fprintf(stderr, "echo: bad -addr %s: %s\n", addr, gai_strerror(err));
		exit(2);
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		/* As Go's net.Listen: SO_REUSEADDR, and the kernel's somaxconn
		 * as the backlog (listen caps larger values to it). */
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
		    bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, INT_MAX) == 0)
			break;
		err = errno;
		close(fd);
		errno = err;
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		die(addr);
	return fd;
}

/* announce prints the line scripts wait for as the first line of stdout. */
static void announce(int lfd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	char ip[INET6_ADDRSTRLEN];

	if (getsockname(lfd, (struct sockaddr *)&ss, &sl) < 0)
		die("getsockname");
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
		printf("echoserver listening on [%s]:%u (impl=c-epoll-et)\n", ip, ntohs(s6->sin6_port));
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
		printf("echoserver listening on %s:%u (impl=c-epoll-et)\n", ip, ntohs(s4->sin_port));
	}
	if (fflush(stdout) != 0)
		die("stdout");
}

static void watch(int ep, int fd, uint32_t events, void *ptr)
{
	struct epoll_event ev = {.events = events, .data.ptr = ptr};

	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
		die("epoll_ctl");
}

/*
 * conn_close closes c and frees it. Safe while the rest of an epoll_wait
 * batch is handled: epoll reports a file once per call, and c is closed
 * only while its own event is handled, so no later event of the batch
 * points to it. Closing the fd removes it from the epoll set.
 */
static void conn_close(struct conn *c)
{
	close(c->fd);
	free(c->out);
	free(c);
}

/* pend appends p[:n] to c's pending output; -1 if out of memory. */
static int pend(struct conn *c, const char *p, size_t n)
{
	if (c->off > 0 && c->len + n > c->cap) { /* reuse the flushed front */
		memmove(c->out, c->out + c->off, c->len - c->off);
		c->len -= c->off;
		c->off = 0;
	}
	if (c->len + n > c->cap) {
		size_t cap = c->cap ? c->cap : READ_SIZE;
		char *out;

		while (cap < c->len + n)
			cap *= 2;
		if ((out = realloc(c->out, cap)) == NULL)
			return -1;
		c->out = out;
		c->cap = cap;
	}
	memcpy(c->out + c->len, p, n);
	c->len += n;
	return 0;
}

/*
 * flush writes pending output until it is all out (0) or the socket is
 * full (0: EPOLLOUT will call again); -1 if the connection is broken.
 */
static int flush(struct conn *c)
{
	while (c->off < c->len) {
		ssize_t w = send(c->fd, c->out + c->off, c->len - c->off, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? 0 : -1;
		}
		c->off += w;
	}
	c->off = c->len = 0;
	return 0;
}

/* echo writes p[:n] back, or pends what the socket does not take. */
static int echo(struct conn *c, const char *p, size_t n)
{
	if (c->off == c->len) { /* nothing pending: straight back */
		ssize_t w;

		do
			w = send(c->fd, p, n, MSG_NOSIGNAL);
		while (w < 0 && errno == EINTR);
		if (w < 0) {
			if (errno != EAGAIN)
				return -1;
			w = 0;
		}
		if ((size_t)w == n)
			return 0;
		stats.partial++;
		p += w;
		n -= w;
	}
	return pend(c, p, n);
}

/* drain reads until EAGAIN or EOF, echoing each chunk; -1 on error. */
static int drain(struct conn *c)
{
	for (;;) {
		ssize_t r = read(c->fd, rbuf, sizeof rbuf);

		if (r > 0) {
			stats.bytes += r;
			if (echo(c, rbuf, r) < 0)
				return -1;
			continue;
		}
		if (r == 0) {
			c->eof = true;
			return 0;
		}
		if (errno == EINTR)
			continue;
		return errno == EAGAIN ? 0 : -1;
	}
}

static void conn_event(struct conn *c, uint32_t events)
{
	if (events & (EPOLLERR | EPOLLHUP)) { /* reset, or both sides shut */
		conn_close(c);
		return;
	}
	if ((events & (EPOLLIN | EPOLLRDHUP)) && !c->eof && drain(c) < 0) {
		conn_close(c);
		return;
	}
	if ((events & EPOLLOUT) && flush(c) < 0) {
		conn_close(c);
		return;
	}
	if (c->eof && c->off == c->len)
		conn_close(c);
}

/* accept_all accepts until EAGAIN, as the edge-triggered listener needs. */
static void accept_all(int ep, int lfd)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET};
	int one = 1;

	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct conn *c;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN)
				/* EMFILE and the like: what waits is taken on
				 * the next edge, when another connection comes */
				fprintf(stderr, "echo: accept4: %s\n", strerror(errno));
			return;
		}
		stats.accepted++;
		if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
			die("setsockopt TCP_NODELAY");
		if ((c = calloc(1, sizeof *c)) == NULL) {
			fprintf(stderr, "echo: out of memory: connection dropped\n");
			close(fd);
			continue;
		}
		c->fd = fd;
		ev.data.ptr = c;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
			fprintf(stderr, "echo: epoll_ctl: %s: connection dropped\n", strerror(errno));
			conn_close(c);
		}
	}
}

int main(int argc, char **argv)
{
	const char *addr = "127.0.0.1:0", *v;
	long long lifetime = 0;
	struct epoll_event events[MAX_EVENTS];
	sigset_t sigs;
	int ep, lfd, sfd, i;

	for (i = 1; i < argc; i++) {
		if (argv[i][0] != '-' || argv[i][1] == '\0') {
			fprintf(stderr, "echo: unexpected arguments starting at %s\n", argv[i]);
			return 2;
		}
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "-help") == 0 ||
		    strcmp(argv[i], "--help") == 0) {
			usage(stderr);
			return 0;
		}
		if ((v = flag_value(argc, argv, &i, "addr")) != NULL) {
			addr = v;
		} else if ((v = flag_value(argc, argv, &i, "lifetime")) != NULL) {
			if ((lifetime = parse_duration(v)) < 0) {
				fprintf(stderr, "invalid value \"%s\" for flag -lifetime: want a duration such as 30s or 500ms\n", v);
				return 2;
			}
		} else {
			fprintf(stderr, "flag provided but not defined: %s\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}

	/* SIGINT and SIGTERM arrive through signalfd; a write to a closed
	 * connection fails with EPIPE rather than raising SIGPIPE. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	if (sigprocmask(SIG_BLOCK, &sigs, NULL) < 0)
		die("sigprocmask");
	signal(SIGPIPE, SIG_IGN);

	if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
		die("epoll_create1");
	if ((sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC)) < 0)
		die("signalfd");
	watch(ep, sfd, EPOLLIN, &signal_tag);
	if (lifetime > 0) {
		struct itimerspec its = {
			.it_value = {.tv_sec = lifetime / 1000000000, .tv_nsec = lifetime % 1000000000},
		};
		int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);

		if (tfd < 0 || timerfd_settime(tfd, 0, &its, NULL) < 0)
			die("timerfd");
		watch(ep, tfd, EPOLLIN, &timer_tag);
	}
	lfd = listen_on(addr);
	watch(ep, lfd, EPOLLIN | EPOLLET, &listener_tag);
	announce(lfd);

	for (;;) {
		int n = epoll_wait(ep, events, MAX_EVENTS, -1);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait");
		}
		for (i = 0; i < n; i++) {
			void *p = events[i].data.ptr;

			if (p == &listener_tag)
				accept_all(ep, lfd);
			else if (p == &timer_tag || p == &signal_tag)
				goto out;
			else
				conn_event(p, events[i].events);
		}
	}
out:
	/* exit closes every socket */
	fprintf(stderr, "echo: accepted=%llu bytes=%llu partial_writes=%llu\n",
		stats.accepted, stats.bytes, stats.partial);
	return 0;
}
