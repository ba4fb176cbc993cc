package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"time"

	"github.com/softnic/softnic/tools/oob"
	"github.com/softnic/softnic/tools/perftest"
)

// Config holds ibv_rc_pingpong's options (rc_pingpong.c main).
type Config struct {
	// Host is the server to connect to; empty: be the server.
	Host    string
	Port    int
	Size    int
	MTU     int // bytes
	RxDepth int
	Iters   int
	SL      int // accepted; a service level means nothing on RoCE
	// GIDIndex is the local GID index; -1 picks the first IPv4 GID.
	GIDIndex int
	// Validate is rc_pingpong's -c: the client marks the first byte of
	// every page, the server checks the marks arrived.
	Validate bool
	// Events is rc_pingpong's -e: sleep until a completion event instead
	// of busy-polling the CQ (the default).
	Events bool
	// Timestamps is rc_pingpong's -t: a CQ whose completions carry the
	// device clock's time, and the ticks between receive completions
	// printed at the end.
	Timestamps bool
	// ConnectWait is how long the client retries connecting.
	ConnectWait time.Duration
	// UD runs ibv_ud_pingpong instead: UD QPs, an address handle to the
	// peer, and messages of at most the port's active MTU (ud.go).
	UD bool
	// UC runs ibv_uc_pingpong instead: rc_pingpong's exchange over UC
	// QPs, connected with UC's attributes (no READ resources, no retry
	// counts).
	UC bool
}

// DefaultConfig returns ibv_rc_pingpong's defaults.
func DefaultConfig() Config {
	return Config{Port: oob.DefaultPort, Size: 4096, MTU: 1024, RxDepth: 500, Iters: 1000, GIDIndex: -1}
}

// Check returns an error worded for the user when the options cannot run.
func (c *Config) Check() error {
	switch {
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("port %d out of range", c.Port)
	case oob.MTUEnum(c.MTU) == 0:
		return fmt.Errorf("MTU %d is not one of 256, 512, 1024, 2048, 4096", c.MTU)
	case c.Size < 1 || c.RxDepth < 2 || c.Iters < 1:
		return errors.New("size, rx-depth (at least 2) and iters must be positive")
	case c.UD && c.UC:
		return errors.New("UD and UC: choose one")
	}
	return nil
}

// Work request IDs of rc_pingpong.c.
const (
	recvWRID = 1
	sendWRID = 2
)

// fill is the byte rc_pingpong fills its buffer with.
const fill = 0x7b

// Run is rc_pingpong.c's main after option parsing, on dev: it prints
// the tool's address and result lines to out.
func Run(ctx context.Context, dev perftest.Device, cfg Config, out io.Writer) error {
	c := &pingpong{dev: dev, cfg: cfg, gidx: cfg.GIDIndex}
	defer c.close()
	if err := c.init(); err != nil {
		return err
	}
	gid, err := dev.Verbs.GID(c.gidx)
	if err != nil {
		return perftest.CheckGIDIndex(dev, dev.Name, c.gidx)
	}
	my := oob.PingpongDest{QPN: c.qp.QPN(), PSN: rand.Uint32() & 0xffffff, GID: gid}
	sep := "," // ud_pingpong prints a colon before its own GID
	if cfg.UD {
		sep = ":"
	}
	fmt.Fprintf(out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", my.LID, my.QPN, my.PSN, sep, oob.GIDText(my.GID))
	rem, err := c.exchange(ctx, my)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", rem.LID, rem.QPN, rem.PSN, oob.GIDText(rem.GID))
	if cfg.Host != "" {
		if err := c.connect(my.PSN, rem); err != nil {
			return err
		}
	}
	pending, err := c.firstSend(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := c.loop(ctx, pending); err != nil {
		return err
	}
	c.report(out, time.Since(start))
	if cfg.Timestamps {
		c.gaps.report(out)
	}
	if cfg.Host == "" && cfg.Validate {
		return c.validate(out, c.buf[c.dataOff():])
	}
	return nil
}

// exchange swaps addresses with the peer (pp_client_exch_dest or
// pp_server_exch_dest); the server connects its QP before it answers. The
// end of ctx (a signal) closes the connection, so that a peer that
// accepted and fell silent does not hold the exchange for its time limit.
func (c *pingpong) exchange(ctx context.Context, my oob.PingpongDest) (oob.PingpongDest, error) {
	if c.cfg.Host != "" {
		conn, err := oob.Dial(ctx, "tcp", c.cfg.Host, c.cfg.Port, c.cfg.ConnectWait)
		if err != nil {
			return oob.PingpongDest{}, err
		}
		defer context.AfterFunc(ctx, func() { conn.Close() })()
		rem, err := oob.PingpongClient(conn, my, 0)
		conn.Close()
		if err != nil {
			return rem, fmt.Errorf("Couldn't read/write remote address: %w", err)
		}
		return rem, nil
	}
	conn, err := oob.Accept(ctx, "tcp", c.cfg.Port, "accept() failed")
	if err != nil {
		return oob.PingpongDest{}, err
	}
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	rem, err := oob.PingpongServer(conn, my, func(r oob.PingpongDest) error { return c.connect(my.PSN, r) }, 0)
	conn.Close()
	if err != nil {
		return rem, fmt.Errorf("Couldn't connect to remote QP: %w", err)
	}
	return rem, nil
}

// report prints rc_pingpong's two result lines; it computes in float
// microseconds, as the tool does.
func (c *pingpong) report(out io.Writer, elapsed time.Duration) {
	usec := float32(elapsed.Microseconds())
	bytes := int64(c.cfg.Size) * int64(c.cfg.Iters) * 2
	fmt.Fprintf(out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/float64(usec))
	fmt.Fprintf(out, "%d iters in %.2f seconds = %.2f usec/iter\n", c.cfg.Iters, usec/1e6, usec/float32(c.cfg.Iters))
}

// validate is the server's -c check of the client's page marks.
func (c *pingpong) validate(out io.Writer, data []byte) error {
	bad := invalidPages(data)
	if len(bad) == 0 {
		return nil
	}
	for _, page := range bad {
		fmt.Fprintf(out, "invalid data in page %d\n", page)
	}
	return fmt.Errorf("received data failed validation in %d of %d pages", len(bad), (len(data)+os.Getpagesize()-1)/os.Getpagesize())
}

// markPages writes the client's -c marks: as rdma-core 44, the first byte
// of each page becomes 0 (i / page_size % sizeof(char)) in a buffer of
// 0x7b.
func markPages(buf []byte) {
	for i := 0; i < len(buf); i += os.Getpagesize() {
		buf[i] = 0
	}
}

// invalidPages returns the pages of buf whose first byte is not the 0 the
// client of a -c run writes there (rc_pingpong's check).
func invalidPages(buf []byte) []int {
	var bad []int
	for i := 0; i < len(buf); i += os.Getpagesize() {
		if buf[i] != 0 {
			bad = append(bad, i/os.Getpagesize())
		}
	}
	return bad
}
