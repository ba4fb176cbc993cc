/*
 * tcp_sink.c [-f] ADDR PORT FILE: accepts one TCP connection with
 * accept(2) (which librspreload carries, where netcat-openbsd's accept4 it
 * does not), writes what it reads into FILE until the peer shuts down, and
 * exits 0. With -f a forked child reads and writes, as a forking server's
 * does, and the parent exits with its status. TestRspreloadNc runs it
 * under librspreload for nc to send to.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int forking = argc == 5 && !strcmp(argv[1], "-f");
	if (forking)
		argv++, argc--;
	if (argc != 4) {
		fprintf(stderr, "usage: tcp_sink [-f] ADDR PORT FILE\n");
		return 2;
	}
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || inet_pton(AF_INET, argv[1], &a.sin_addr) != 1 ||
	    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) || bind(l, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(l, 1)) {
		perror("listen");
		return 1;
	}
	int c = accept(l, NULL, NULL);
	int out = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (c < 0 || out < 0) {
		perror("accept");
		return 1;
	}
	if (forking) {
		pid_t child = fork();
		if (child < 0) {
			perror("fork");
			return 1;
		}
		if (child > 0) {
			close(c);
			int st;
			if (waitpid(child, &st, 0) != child) {
				perror("waitpid");
				return 1;
			}
			return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
		}
	}
	static char buf[65536];
	ssize_t n;
	while ((n = read(c, buf, sizeof(buf))) > 0)
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(out, buf + off, n - off);
			if (w <= 0) {
				perror("write");
				return 1;
			}
			off += w;
		}
	if (n < 0) {
		perror("read");
		return 1;
	}
	close(out);
	close(c);
	close(l);
	return 0;
}
