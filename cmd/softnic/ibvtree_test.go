package main

import (
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
