package xdplink

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// The IRQ state file (Config.IRQState) lists the vectors a link moved,
// one "IRQ CPULIST" line each, with the CPU list to give back: a process
// killed before Close leaves it, and the next Open with the same file puts
// the vectors back first. A root process keeps it in a directory only root
// can write (softnic daemon's checked run directory); even so it follows
// no link at either name: a link is a stale entry, unlinked, whose target
// is neither read nor written.

// saveIRQState writes the moved vectors to path (atomically: a temporary
// file renamed), or removes it when there are none.
func saveIRQState(path string, moved []irqAffinity) error {
	if len(moved) == 0 {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	var b bytes.Buffer
	for _, m := range moved {
		fmt.Fprintf(&b, "%d %s\n", m.irq, m.prev)
	}
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !os.IsNotExist(err) {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// restoreIRQState puts back the vectors a killed process recorded in path
// and removes it. A missing file is nothing to do.
func restoreIRQState(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if os.IsNotExist(err) {
		return nil
	}
	if errors.Is(err, syscall.ELOOP) {
		return os.Remove(path) // a link: not ours
	}
	if err != nil {
		return err
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return err
	}
	moved, err := parseIRQState(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	restoreIRQs(moved)
	return os.Remove(path)
}

// parseIRQState parses the file's lines. A CPU list is digits, commas and
// dashes, as smp_affinity_list reads.
func parseIRQState(data []byte) ([]irqAffinity, error) {
	var moved []irqAffinity
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		irq, cpus, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		n, err := strconv.Atoi(irq)
		if !ok || err != nil || n < 0 || cpus == "" || strings.Trim(cpus, "0123456789,-") != "" {
			return nil, fmt.Errorf("bad IRQ state line %q", sc.Text())
		}
		moved = append(moved, irqAffinity{irq: n, prev: cpus})
	}
	return moved, sc.Err()
}
