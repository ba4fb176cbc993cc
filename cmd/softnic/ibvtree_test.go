package main

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCPUMask: local_cpus as the kernel prints a cpumask.
func TestCPUMask(t *testing.T) {
	assert.Equal(t, []bool{true, true, false, true}, parseCPUList("0-1,3\n"))
	assert.Equal(t, "3", cpuMask(parseCPUList("0-1"), 2))
	assert.Equal(t, "0f", cpuMask(parseCPUList("0-3"), 8))
	assert.Equal(t, "ffffffff,ffffffff", cpuMask(parseCPUList("0-63"), 64))
	assert.Equal(t, "01,00000001", cpuMask(parseCPUList("0,32"), 40))
	assert.Equal(t, "0", cpuMask(nil, 0))
}

func TestParseCPUs(t *testing.T) {
	for in, want := range map[string][]int{"0": {0}, "1,0": {1, 0}, "0-3": {0, 1, 2, 3}, "2,4-5": {2, 4, 5}} {
		got, err := parseCPUs(in)
		assert.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "a", "-1", "3-1", "0,,1", "1-", "99999999", "0-99999999"} {
		_, err := parseCPUs(in)
		assert.Error(t, err, in)
	}
	assert.Nil(t, parseCPUList("0-99999999"), "a malformed sysfs list is no CPUs, not a huge slice")
}

func TestEngineCPUsFlagWantsAllowedCPUs(t *testing.T) {
	var cpus []int
	f := cpuListFlag{&cpus}
	assert.NoError(t, f.Set("0"))
	assert.Equal(t, "0", f.String())
	assert.Error(t, f.Set(strconv.Itoa(maxCPU)), "a CPU outside the affinity set")
	assert.Equal(t, []int{0}, cpus, "a refused list leaves the flag as it was")
}
