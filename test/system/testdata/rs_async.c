/*
 * rs_async.c server ADDR PORT | client ADDR PORT: non-blocking rsockets
 * and keepalive, step by step, each step a line on stdout, driven by
 * lines on stdin (TestRsocketAsyncKeepalive).
 *
 * server: a non-blocking listener's raccept before any request is EAGAIN;
 * "listening"; on the line "accept": rpoll for the request, raccept, rpoll
 * for POLLOUT, "accepted"; then blocking, SO_KEEPALIVE with TCP_KEEPIDLE
 * 1 s, "keepalive"; then a blocking rrecv, whose end it prints.
 *
 * client: a non-blocking rconnect to a server that has not accepted is
 * EINPROGRESS, so are a second rconnect and (EAGAIN) an rsend;
 * "connecting"; rpoll for POLLOUT, SO_ERROR 0, "connected"; then it
 * waits for its stdin to end.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rsocket.h>

static void die(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	exit(1);
}

static void expect_err(const char *what, long ret, int want)
{
	if (ret != -1 || errno != want) {
		printf("FAIL %s: got %ld (%s), want -1 with %s\n", what, ret, strerror(errno), strerror(want));
		exit(1);
	}
	printf("%s: %s\n", what, strerror(want));
}

static void await(int fd, short events)
{
	struct pollfd p = {.fd = fd, .events = events};
	int n = rpoll(&p, 1, 60000);
	if (n != 1 || !(p.revents & events)) {
		printf("FAIL rpoll: %d revents %#x (%s)\n", n, p.revents, strerror(errno));
		exit(1);
	}
}

static void line(const char *want)
{
	char buf[64];
	if (!fgets(buf, sizeof(buf), stdin) || strncmp(buf, want, strlen(want))) {
		printf("FAIL stdin: want %s\n", want);
		exit(1);
	}
}

static int server(struct sockaddr_in *a)
{
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || rbind(l, (struct sockaddr *)a, sizeof(*a)) || rlisten(l, 1) || rfcntl(l, F_SETFL, O_NONBLOCK))
		die("listen");
	expect_err("raccept before a request", raccept(l, NULL, NULL), EAGAIN);
	printf("listening\n");
	line("accept");
	await(l, POLLIN);
	struct sockaddr_in peer;
	socklen_t len = sizeof(peer);
	int s = raccept(l, (struct sockaddr *)&peer, &len);
	if (s < 0)
		die("raccept");
	await(s, POLLOUT);
	printf("accepted %s\n", inet_ntoa(peer.sin_addr));
	int one = 1, v = 0;
	socklen_t vl = sizeof(v);
	if (rfcntl(s, F_SETFL, 0) || rsetsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) ||
	    rsetsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof(one)) ||
	    rgetsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &v, &vl) || v != 1)
		die("keepalive");
	printf("keepalive\n");
	fflush(stdout);
	char c;
	ssize_t n = rrecv(s, &c, 1, 0);
	printf("rrecv: %zd %s\n", n, n < 0 ? strerror(errno) : "");
	return 0;
}

static int client(struct sockaddr_in *a)
{
	int s = rsocket(AF_INET, SOCK_STREAM, 0);
	if (s < 0 || rfcntl(s, F_SETFL, O_NONBLOCK))
		die("rsocket");
	expect_err("rconnect", rconnect(s, (struct sockaddr *)a, sizeof(*a)), EINPROGRESS);
	expect_err("rconnect again", rconnect(s, (struct sockaddr *)a, sizeof(*a)), EINPROGRESS);
	expect_err("rsend while connecting", rsend(s, "x", 1, 0), EAGAIN);
	printf("connecting\n");
	fflush(stdout);
	await(s, POLLOUT);
	int err = -1;
	socklen_t len = sizeof(err);
	if (rgetsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) || err)
		die("SO_ERROR");
	printf("connected\n");
	fflush(stdout);
	char buf[64];
	while (fgets(buf, sizeof(buf), stdin))
		;
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	if (argc != 4 || inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) {
		fprintf(stderr, "usage: rs_async server|client ADDR PORT\n");
		return 2;
	}
	a.sin_port = htons(atoi(argv[3]));
	return strcmp(argv[1], "server") ? client(&a) : server(&a);
}
