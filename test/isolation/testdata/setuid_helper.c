/*
 * setuid_helper.c stands for a setuid-root program that waits on its
 * standard input, as passwd does (TestExecOfSetuidProgramEndsAccess
 * installs it root-owned, mode 4755). It keeps two secrets an unprivileged
 * user must not reach: a page of random bytes mapped at the address its
 * argument names (where the attacker, before it exec'd this program,
 * registered a page of its own), and a page of random bytes on its stack.
 * It says where they are, then reads its input to the end.
 *
 * usage: setuid_helper ADDR
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#define PAGE 4096

static void fill(unsigned char *p)
{
	for (size_t n = 0; n < PAGE;) {
		ssize_t k = getrandom(p + n, PAGE - n, 0);
		if (k <= 0) {
			perror("getrandom");
			exit(1);
		}
		n += (size_t)k;
	}
}

int main(int argc, char **argv)
{
	unsigned char stack_secret[PAGE] __attribute__((aligned(PAGE)));
	if (argc != 2) {
		fprintf(stderr, "usage: setuid_helper ADDR\n");
		return 2;
	}
	uintptr_t addr = strtoull(argv[1], NULL, 0);
	unsigned char *page = mmap((void *)addr, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
				   -1, 0);
	if (page != (void *)addr) {
		perror("helper: mmap at the fixed address");
		return 1;
	}
	fill(page);
	fill(stack_secret);
	printf("helper pid=%d uid=%d euid=%d page=%#lx stack=%#lx\n", getpid(), getuid(), geteuid(), (unsigned long)page,
	       (unsigned long)stack_secret);
	fflush(stdout);
	char c;
	while (read(0, &c, 1) == 1)
		;
	/* The secrets are in use until here. */
	return (page[0] ^ stack_secret[0]) & 0;
}
