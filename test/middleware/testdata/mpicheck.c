/*
 * mpicheck: rank 0 and rank 1 exchange buffers of several sizes, each way,
 * and check every byte; then, with -l N, rank 0 times N ping-pongs of 8 bytes
 * and prints the half round trip. Other ranks only take part in the barriers.
 * Exit status 0 only when every byte of every buffer was right.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const int sizes[] = {1, 8, 100, 4096, 8193, 65536, 262144, 1048576};
enum { nsizes = sizeof sizes / sizeof sizes[0], rounds = 3 };

/* pattern is the byte at offset i of the buffer of size n that rank
 * `from` sends in round r: it differs per size, direction, round and
 * offset, so a buffer landing in the wrong place or a stale one fails. */
static unsigned char pattern(int n, int from, int r, long i)
{
	uint32_t x = (uint32_t)i * 2654435761u ^ (uint32_t)n * 40503u ^ (uint32_t)(from + 1) * 977u ^ (uint32_t)r * 131u;
	return (unsigned char)(x ^ x >> 13 ^ x >> 24);
}

static void fill(unsigned char *b, int n, int from, int r)
{
	for (long i = 0; i < n; i++)
		b[i] = pattern(n, from, r, i);
}

/* check returns the number of wrong bytes, printing the first. */
static long check(const unsigned char *b, int n, int from, int r, int me)
{
	long bad = 0;
	for (long i = 0; i < n; i++) {
		if (b[i] != pattern(n, from, r, i)) {
			if (bad == 0)
				fprintf(stderr, "rank %d: size %d round %d from rank %d: byte %ld is 0x%02x, want 0x%02x\n",
					me, n, r, from, i, b[i], pattern(n, from, r, i));
			bad++;
		}
	}
	return bad;
}

int main(int argc, char **argv)
{
	int me, np, lat = 0, opt;
	char host[256];

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	MPI_Comm_size(MPI_COMM_WORLD, &np);
	while ((opt = getopt(argc, argv, "l:")) != -1) {
		if (opt == 'l') {
			lat = atoi(optarg);
		} else {
			if (me == 0)
				fprintf(stderr, "usage: mpicheck [-l ITERATIONS]\n");
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	if (np < 2) {
		fprintf(stderr, "mpicheck needs at least 2 ranks, has %d\n", np);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	gethostname(host, sizeof host);
	unsigned char *buf = malloc(sizes[nsizes - 1]);
	if (!buf) {
		perror("malloc");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	long bad = 0, checked = 0;
	MPI_Barrier(MPI_COMM_WORLD);
	if (me < 2) {
		int peer = 1 - me;
		for (int r = 0; r < rounds; r++) {
			for (int k = 0; k < nsizes; k++) {
				int n = sizes[k];
				/* rank 0 sends first, rank 1 answers with its own pattern */
				for (int turn = 0; turn < 2; turn++) {
					int from = turn;
					if (me == from) {
						fill(buf, n, from, r);
						MPI_Send(buf, n, MPI_BYTE, peer, k, MPI_COMM_WORLD);
					} else {
						MPI_Status st;
						int got;
						memset(buf, 0, n);
						MPI_Recv(buf, n, MPI_BYTE, peer, k, MPI_COMM_WORLD, &st);
						MPI_Get_count(&st, MPI_BYTE, &got);
						if (got != n) {
							fprintf(stderr, "rank %d: size %d: received %d bytes\n", me, n, got);
							bad++;
						}
						bad += check(buf, n, from, r, me);
						checked += n;
					}
				}
			}
		}
	}
	long allbad = 0, allchecked = 0;
	MPI_Reduce(&bad, &allbad, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Reduce(&checked, &allchecked, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
	if (lat > 0 && me < 2) {
		memset(buf, 0, 8);
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		for (int i = 0; i < lat; i++) {
			if (me == 0) {
				MPI_Send(buf, 8, MPI_BYTE, 1, 99, MPI_COMM_WORLD);
				MPI_Recv(buf, 8, MPI_BYTE, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(buf, 8, MPI_BYTE, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(buf, 8, MPI_BYTE, 0, 99, MPI_COMM_WORLD);
			}
		}
		double t = MPI_Wtime() - t0;
		if (me == 0)
			printf("mpicheck: latency 8 bytes %d iterations %.2f usec\n", lat, t / lat / 2 * 1e6);
	} else if (lat > 0) {
		MPI_Barrier(MPI_COMM_WORLD);
	}
	printf("mpicheck: rank %d of %d on %s done\n", me, np, host);
	if (me == 0) {
		if (allbad == 0)
			printf("mpicheck: ok: %ld bytes checked, %d sizes, %d rounds, each way\n", allchecked, nsizes, rounds);
		else
			printf("mpicheck: FAILED: %ld bad bytes of %ld\n", allbad, allchecked);
	}
	free(buf);
	MPI_Finalize();
	return allbad == 0 ? 0 : 1;
}
