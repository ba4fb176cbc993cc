/*
 * checks.h: what the C test programs here share: a check says "ok  " or
 * "FAIL" and what it checked, one line each, and counts the failures for
 * the exit status; wait_line says a stop's name and waits for the test to
 * write a line to stdin (cProgram in cprogram_test.go); memfd_backed
 * tells memory the provider shares with the daemon (provider/sharemem.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		failed++;
}

static void wait_line(const char *say)
{
	char line[64];
	printf("%s\n", say);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		exit(100);
}

/* memfd_backed says whether the mapping that holds p is the provider's
 * memfd. */
static int memfd_backed(const void *p)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int found = 0;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= (uintptr_t)p && (uintptr_t)p < hi) {
			found = strstr(line, "memfd:softnic-mr") != NULL;
			break;
		}
	}
	if (f)
		fclose(f);
	return found;
}
