package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// interrupted is the cause of a tool's context when a signal ended it:
// Ctrl-C (SIGINT) or SIGTERM. Whatever error the run then returns (an
// accept on a closed listener, a poll cut short) is the signal's doing,
// so the tool says it was interrupted rather than that error.
type interrupted struct{ sig syscall.Signal }

func (i interrupted) Error() string {
	if i.sig == syscall.SIGINT {
		return "interrupted"
	}
	return "terminated (" + i.sig.String() + ")"
}

// status is the shell's status of a process the signal killed: 128 + its
// number, 130 for Ctrl-C, as scripts that tell an interrupted run from a
// failed one expect.
func (i interrupted) status() int { return 128 + int(i.sig) }

// signalContext returns a context that SIGINT or SIGTERM cancels with an
// interrupted cause, and the function that stops watching. After the first
// signal the default action is back, so a second Ctrl-C kills a tool whose
// cleanup hangs.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			signal.Stop(ch)
			cancel(interrupted{s.(syscall.Signal)})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// endStatus is a tool's exit status after its run returned err: 0; a
// signal's status, saying the tool was interrupted, when one ended it;
// else 1 with "softnic CMD: err".
func endStatus(ctx context.Context, err error, stderr io.Writer, cmd string) int {
	if err == nil {
		return 0
	}
	var intr interrupted
	if errors.As(context.Cause(ctx), &intr) {
		fmt.Fprintf(stderr, "softnic %s: %v\n", cmd, intr)
		return intr.status()
	}
	fmt.Fprintf(stderr, "softnic %s: %v\n", cmd, err)
	return 1
}
