/*
 * tcp_source.c ADDR PORT FILE: connects a TCP socket made with a plain
 * SOCK_STREAM type (librspreload's fork support takes only those; nc adds
 * flags), sends FILE, shuts the socket down and exits 0 once the peer has
 * closed. TestRspreloadNc's fork case runs it under librspreload.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: tcp_source ADDR PORT FILE\n");
		return 2;
	}
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0 || inet_pton(AF_INET, argv[1], &a.sin_addr) != 1 || connect(s, (struct sockaddr *)&a, sizeof(a))) {
		perror("connect");
		return 1;
	}
	int in = open(argv[3], O_RDONLY);
	if (in < 0) {
		perror("open");
		return 1;
	}
	static char buf[65536];
	ssize_t n;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(s, buf + off, n - off);
			if (w <= 0) {
				perror("write");
				return 1;
			}
			off += w;
		}
	if (n < 0 || shutdown(s, SHUT_WR)) {
		perror("read");
		return 1;
	}
	while ((n = read(s, buf, sizeof(buf))) > 0)
		;
	close(s);
	return n < 0;
}
