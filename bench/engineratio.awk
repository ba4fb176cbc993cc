# engineratio.awk reads `go test -bench` output of package verbs and prints
# the engine's per-core figures over the raw ceiling's of the same run
# (verbs/ceiling_test.go): 64-byte messages against 64-byte frames, 64 KiB
# WRITEs (4 KiB frames, MTU 4096) against 4 KiB frames. `make microbench`
# runs it after the benchmarks.
/^Benchmark/ {
	name = $1
	sub(/-[0-9]+$/, "", name)
	for (i = 2; i < NF; i++) {
		if ($(i + 1) == "msgs/s-per-core") msgs[name] = $i
		if ($(i + 1) == "Gb/s-per-core") gbps[name] = $i
	}
}
function ratio(engine, ceiling, unit, v) {
	v = (unit == "msgs/s-per-core") ? msgs[engine] : gbps[engine]
	c = (unit == "msgs/s-per-core") ? msgs[ceiling] : gbps[ceiling]
	if (v == "" || c == "" || c == 0) return
	printf "%-28s %14.4g %-16s %6.3f of %s (%.4g)\n", engine, v, unit, v / c, ceiling, c
}
END {
	print ""
	print "engine / raw ceiling, per second of process CPU time (same run):"
	ratio("BenchmarkWrite64B", "BenchmarkCeiling64B", "msgs/s-per-core")
	ratio("BenchmarkWrite64BList", "BenchmarkCeiling64B", "msgs/s-per-core")
	ratio("BenchmarkSmallMessageRate", "BenchmarkCeiling64B", "msgs/s-per-core")
	ratio("BenchmarkWrite64KiB", "BenchmarkCeiling4KiB", "Gb/s-per-core")
}
