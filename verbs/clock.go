package verbs

import "time"

// The device clock, which completion timestamps (WC.Timestamp) and
// Device.Clock read, is the host's CLOCK_REALTIME in nanoseconds: a 1 GHz
// clock (HCACoreClockKHz) whose ticks are already wall-clock time, so a
// timestamp is both ibv_wc_read_completion_ts's and
// ibv_wc_read_completion_wallclock_ns's. It is that clock and no other
// because every process on the host reads the same one: the daemon that
// stamps completions and the program that reads the clock
// (ibv_query_rt_values_ex) see one time whatever their time namespaces
// (CLOCK_MONOTONIC and its _RAW are offset per time namespace), and both
// read it without a system call (the vDSO; Go's time.Now). Unlike a
// ConnectX's free-running counter it follows steps of the system time.
const (
	// HCACoreClockKHz is the device clock's frequency
	// (ibv_device_attr_ex.hca_core_clock, in kHz).
	HCACoreClockKHz = 1_000_000
	// CompletionTimestampMask is the bits a timestamp has
	// (ibv_device_attr_ex.completion_timestamp_mask): all 64.
	CompletionTimestampMask = ^uint64(0)
)

// deviceClock reads the device clock.
func deviceClock() uint64 { return uint64(time.Now().UnixNano()) }

// Clock reads the device clock (ibv_query_rt_values_ex's raw clock):
// nanoseconds of CLOCK_REALTIME, the clock completion timestamps are of.
func (d *Device) Clock() uint64 { return deviceClock() }
