package rping

import (
	"context"
	"io"
	"sync"

	"github.com/softnic/softnic/rdmacm"
)

// Run is rping's main after option parsing: the server or the client, over
// cm. It prints rping's lines to cfg.Stdout and cfg.Stderr; its error says
// what failed and carries rping's exit status (ExitStatus).
func Run(ctx context.Context, cm *rdmacm.CM, cfg Config) error {
	if err := CheckSize(cfg.Size); err != nil {
		return &Failure{Status: 22, Reason: err.Error()}
	}
	if err := CheckCount(cfg.Count); err != nil {
		return &Failure{Status: 22, Reason: err.Error()}
	}
	// The connections of a -P server and the CM thread print
	// concurrently, a line per write.
	cfg.Stdout, cfg.Stderr = lockWriter(cfg.Stdout), lockWriter(cfg.Stderr)
	log := &logger{debug: cfg.Debug, stdout: cfg.Stdout, stderr: cfg.Stderr}
	if cfg.Server {
		return runServer(ctx, cm, &cfg, log)
	}
	return runClient(ctx, cm, &cfg, log)
}

// lockedWriter serialises the writes of several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func lockWriter(w io.Writer) io.Writer {
	if w == nil {
		w = io.Discard
	}
	return &lockedWriter{w: w}
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
