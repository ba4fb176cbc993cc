package cpupin

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// allowed returns the calling thread's CPU set.
func allowed(t *testing.T) unix.CPUSet {
	var s unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &s))
	return s
}

func needCPUs(t *testing.T) {
	var s unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &s))
	if s.Count() < 2 {
		t.Skip("missing: a second CPU in this process's affinity mask (a thread allowed on one CPU is never pinned)")
	}
}

func TestStartOnKeepsThreadOnItsCPU(t *testing.T) {
	needCPUs(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		before := allowed(t)
		pin := StartOn(-1)
		assert.True(t, pin.locked)
		cpu := pin.CPU()
		require.GreaterOrEqual(t, cpu, 0)
		set := allowed(t)
		assert.Equal(t, 1, set.Count())
		assert.True(t, set.IsSet(cpu))
		for range 1000 {
			now, ok := currentCPU()
			require.True(t, ok)
			require.Equal(t, cpu, now)
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
		pin.Stop()
		assert.Equal(t, -1, pin.CPU())
		assert.Equal(t, before, allowed(t), "Stop restores the CPU set")
		assert.False(t, pin.Released())
	}()
	<-done
}

func TestStartOnLeavesSingleCPUAlone(t *testing.T) {
	needCPUs(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pin := StartOn(-1) // locks the thread: the affinity set below stays with it
		defer pin.Stop()
		var one unix.CPUSet
		one.Set(0)
		require.NoError(t, unix.SchedSetaffinity(0, &one))
		inner := StartOn(-1)
		assert.Equal(t, -1, inner.CPU(), "a thread that may run on one CPU only is not pinned")
		assert.False(t, inner.locked, "nor locked to its goroutine")
		inner.Check()
		inner.Stop()
		assert.Equal(t, one, allowed(t))
	}()
	<-done
}

// Two pollers pinned to one CPU each wait for it about half the time: both
// give their CPU set back.
func TestContestedPinIsReleased(t *testing.T) {
	needCPUs(t)
	var wg sync.WaitGroup
	released := make([]bool, 2)
	for i := range released {
		wg.Add(1)
		go func() {
			defer wg.Done()
			before := allowed(t)
			pin := StartOn(0)
			defer pin.Stop()
			require.Equal(t, 0, pin.CPU())
			for n := 0; n < 1e8 && !pin.Released(); n++ {
				pin.Check()
				unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			}
			released[i] = pin.Released()
			assert.Equal(t, -1, pin.CPU())
			assert.Equal(t, before, allowed(t))
		}()
	}
	wg.Wait()
	assert.Equal(t, []bool{true, true}, released)
}

func TestNilPin(t *testing.T) {
	var p *Pin
	p.Check()
	p.Stop()
	assert.Equal(t, -1, p.CPU())
	assert.False(t, p.Released())
}

func TestParseSchedStat(t *testing.T) {
	for _, c := range []struct {
		in   string
		want schedStat
		ok   bool
	}{
		{"123 456 7\n", schedStat{123, 456}, true},
		{"0 0 0\n", schedStat{}, true},
		{"18446744073709551 1 2\n", schedStat{18446744073709551, 1}, true},
		{"123\n", schedStat{123, 0}, false},
		{"", schedStat{}, false},
		{"x 1 2", schedStat{}, false},
		{"1 -2 3", schedStat{1, 0}, false},
		{"123456789012345678901 1 1", schedStat{}, false},
	} {
		got, ok := parseSchedStat([]byte(c.in))
		assert.Equal(t, c.ok, ok, "%q", c.in)
		if c.ok {
			assert.Equal(t, c.want, got, "%q", c.in)
		}
	}
}

func TestReadSchedStatOfThisThread(t *testing.T) {
	fd, err := unix.Open("/proc/thread-self/schedstat", unix.O_RDONLY, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	s, ok := readSchedStat(fd)
	require.True(t, ok)
	assert.Positive(t, s.ran)
}

func FuzzParseSchedStat(f *testing.F) {
	f.Add([]byte("123 456 7\n"))
	f.Add([]byte(""))
	f.Add([]byte("   99999999999999999999 1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, ok := parseSchedStat(b)
		if !ok {
			return
		}
		// What parsed reads the same from its decimal rendering.
		again, ok := parseSchedStat(fmt.Appendf(nil, "%d %d 0\n", s.ran, s.waited))
		if !ok || again != s {
			t.Fatalf("%q parsed as %v, its rendering as %v", b, s, again)
		}
	})
}

// Two held pins on one CPU wait for it as the released ones above do, and
// keep it: both poll until each has waited through several windows (one
// that got there polls on, so that the other keeps waiting too).
func TestHeldPinIsKept(t *testing.T) {
	needCPUs(t)
	var wg sync.WaitGroup
	var reached atomic.Int32
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			before := allowed(t)
			pin := StartHeld(0)
			require.Equal(t, 0, pin.CPU())
			start, ok := readSchedStat(pin.stat)
			require.True(t, ok)
			mine := false
			for {
				for range checkEvery {
					pin.Check()
					unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
				}
				now, ok := readSchedStat(pin.stat)
				if !assert.True(t, ok) {
					reached.Add(2) // the other stops too
					break
				}
				if !mine && now.waited-start.waited >= 4*minWindow {
					mine = true
					reached.Add(1)
				}
				if reached.Load() == 2 {
					break
				}
			}
			assert.False(t, pin.Released())
			assert.Equal(t, 0, pin.CPU())
			set := allowed(t)
			assert.Equal(t, 1, set.Count())
			assert.True(t, set.IsSet(0))
			pin.Stop()
			assert.Equal(t, before, allowed(t), "Stop restores the CPU set")
		}()
	}
	wg.Wait()
}

func TestStartHeldOutsideTheSetPinsNothing(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, cpu := range []int{-1, 8 * int(unsafe.Sizeof(unix.CPUSet{}))} {
			pin := StartHeld(cpu)
			assert.Equal(t, -1, pin.CPU())
			assert.False(t, pin.locked)
			pin.Check()
			pin.Stop()
		}
	}()
	<-done
}
