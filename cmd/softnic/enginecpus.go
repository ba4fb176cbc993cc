package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// engineCPUs are the CPUs the devices' engine threads are kept on
// (roce.DeviceConfig.EngineCPUs): the daemon's --engine-cpus; nil leaves
// them where the links' interrupts arrive, or to the scheduler.
var engineCPUs []int

// cpuListFlag is --engine-cpus: a list such as 0,2 or 0-3.
type cpuListFlag struct{ cpus *[]int }

func (f cpuListFlag) String() string {
	if f.cpus == nil {
		return ""
	}
	parts := make([]string, len(*f.cpus))
	for i, c := range *f.cpus {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}

func (f cpuListFlag) Set(s string) error {
	cpus, err := parseCPUs(s)
	if err != nil {
		return err
	}
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return fmt.Errorf("engine CPUs: %w", err)
	}
	for _, c := range cpus {
		if !allowed.IsSet(c) {
			return fmt.Errorf("engine CPU %d: not one this process may run on", c)
		}
	}
	*f.cpus = cpus
	return nil
}

// maxCPU bounds the CPU numbers a list may name: those a CPUSet holds.
const maxCPU = 8*int(unsafe.Sizeof(unix.CPUSet{})) - 1

// parseCPUs parses a list of CPUs and ranges of them (0,2,4-7), as
// taskset -c and /sys/devices/system/cpu/online write them.
func parseCPUs(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseCPU(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = parseCPU(hi); err != nil {
				return nil, err
			}
		}
		if b < a {
			return nil, fmt.Errorf("CPU list %q: range %s runs backwards", s, part)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

func parseCPU(s string) (int, error) {
	c, err := strconv.Atoi(s)
	if err != nil || c < 0 || c > maxCPU {
		return 0, fmt.Errorf("CPU %q: want a number from 0 to %d", s, maxCPU)
	}
	return c, nil
}

// defineEngineCPUs defines --engine-cpus on fs.
func defineEngineCPUs(fs *flag.FlagSet) {
	fs.Var(cpuListFlag{&engineCPUs}, "engine-cpus",
		"`LIST` of CPUs (0,2 or 0-3) to keep the engine threads on, one engine to each in turn, however contested; "+
			"where engines on one host would share a CPU (a daemon at each end of a veth) give them different CPUs "+
			"(default: the CPU of the link's interrupts, else the scheduler's choice)")
}
