/*
 * checks.h: what the C test programs here share: a check says "ok  " or
 * "FAIL" and what it checked, one line each, and counts the failures for
 * the exit status; wait_line says a stop's name and waits for the test to
 * write a line to stdin (cProgram in cprogram_test.go).
 */
#include <stdio.h>
#include <stdlib.h>

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
