package systest

import (
	"net/netip"
	"testing"

	"github.com/softnic/softnic/internal/netnstest"
)

// Config describes a World.
type Config struct {
	Net      netnstest.Config // the veth pair; a 1500-byte MTU unless it says
	Provider bool             // build the C provider and librdmacm beside softnic
	// Names are the devices' names, end A's and end B's (-d IFACE:NAME);
	// "" names a device softnic_IFACE.
	Names [2]string
	// Args are more flags for end A's and end B's daemon.
	Args [2][]string
	// OwnRunDirs gives each daemon a run directory of its own, as two
	// hosts have; else they share one.
	OwnRunDirs bool
	// AwaitGID returns once each daemon's GID table holds its end's IPv4
	// address (through a root session of its own on each).
	AwaitGID bool
}

// World is a softnic daemon on each end of a veth pair between two
// network namespaces, as the README runs them (socket mode 0666, every
// local user served), and the softnic binary they run, where every user
// may run it.
type World struct {
	Bin  string // softnic, its provider beside it if Config.Provider
	Pair *netnstest.Pair
	// GIDs are end A's and end B's GID tables (SettledGIDs), complete
	// before the daemons started.
	GIDs   [2][]netip.Addr
	A, B   *Daemon
	RunDir string // A's run directory, B's too unless Config.OwnRunDirs
}

// NewWorld builds softnic (and the provider), makes the pair, waits for
// its ends' GID tables to settle and starts a daemon on each end; the test's end stops them and removes the pair.
func NewWorld(t testing.TB, cfg Config) *World {
	t.Helper()
	netnstest.Integration(t)
	netnstest.RequireCommands(t, "apt-get install iproute2", "ip")
	if cfg.Provider {
		netnstest.RequireCommands(t, "apt-get install libibverbs-dev librdmacm-dev gcc make", "cc", "make")
	}
	w := &World{Bin: Softnic(t)}
	if cfg.Provider {
		w.Bin = SoftnicWithProvider(t)
	}
	if cfg.Net.MTU == 0 {
		cfg.Net.MTU = 1500
	}
	w.Pair = netnstest.NewT(t, cfg.Net)
	w.GIDs[0] = SettledGIDs(t, &w.Pair.A, 1+len(w.Pair.A.Addrs))
	w.GIDs[1] = SettledGIDs(t, &w.Pair.B, 1+len(w.Pair.B.Addrs))
	w.RunDir = RootDir(t)
	runDirB := w.RunDir
	if cfg.OwnRunDirs {
		runDirB = RootDir(t)
	}
	w.A = StartNamedDaemon(t, w.Bin, &w.Pair.A, w.RunDir, cfg.Names[0], cfg.Args[0]...)
	w.B = StartNamedDaemon(t, w.Bin, &w.Pair.B, runDirB, cfg.Names[1], cfg.Args[1]...)
	if cfg.AwaitGID {
		w.A.AwaitGID(t)
		w.B.AwaitGID(t)
	}
	return w
}
