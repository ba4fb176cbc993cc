package main

import (
	"flag"
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/softnic/softnic/roce"
)

// enginePriority is how the devices the binary opens raise their engine
// threads (roce.DeviceConfig.Priority): the daemon's --engine-priority;
// the tools leave it off.
var enginePriority roce.Priority

// priorityFlag is --engine-priority.
type priorityFlag struct{ p *roce.Priority }

func (f priorityFlag) String() string {
	if f.p == nil {
		return ""
	}
	return f.p.String()
}

func (f priorityFlag) Set(s string) error {
	p, err := roce.ParsePriority(s)
	if err == nil {
		*f.p = p
	}
	return err
}

// definePriority defines --engine-priority on fs, default auto.
func definePriority(fs *flag.FlagSet) {
	enginePriority = roce.PriorityAuto
	fs.Var(priorityFlag{&enginePriority}, "engine-priority",
		"`HOW` the engine threads are raised while they sleep and work where applications take every CPU: "+
			"rt (SCHED_FIFO), nice, auto (rt where permitted, else nice, else off) or off (spin and sleep at normal priority)")
}

// allowSchedLimits raises RLIMIT_RTPRIO and RLIMIT_NICE to what a raised
// engine thread needs, where the process may (CAP_SYS_RESOURCE): the
// engines raise and lower their threads all along, after the daemon gave
// up CAP_SYS_NICE (dropPrivileges), which these limits stand in for.
func allowSchedLimits() {
	raise := func(res int, v uint64) {
		var lim unix.Rlimit
		if unix.Getrlimit(res, &lim) == nil && lim.Max < v {
			unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v})
		} else if lim.Cur < v {
			unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: lim.Max})
		}
	}
	raise(unix.RLIMIT_RTPRIO, roce.RTPriority)
	raise(unix.RLIMIT_NICE, uint64(20-roce.RaisedNice))
}

// logPriority says how a served device's engine threads are raised.
func logPriority(log *slog.Logger, ifname string, p roce.Priority) {
	if p == roce.PriorityOff && enginePriority != roce.PriorityOff {
		log.Warn("engine priority: neither SCHED_FIFO nor a raised nice permitted; engines spin and sleep at normal priority",
			"interface", ifname, "asked", enginePriority.String())
		return
	}
	log.Info("engine priority", "interface", ifname, "priority", p.String(), "how", p.Describe())
}
