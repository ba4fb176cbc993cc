package client

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/softnic/softnic/verbs"
)

// DefaultRunDir is where softnic daemons put their control sockets when
// $SOFTNIC_RUN_DIR names no other directory.
const DefaultRunDir = "/run/softnic"

// ErrNoDevice is the error of OpenDevice when no daemon serves a device of
// that name: its control socket is not there, or nobody listens on it
// (the socket a killed daemon left).
var ErrNoDevice = errors.New("verbs: no softnic daemon serves the device")

// RunDir returns the directory of the daemons' control sockets:
// $SOFTNIC_RUN_DIR, else DefaultRunDir.
func RunDir() string {
	if dir := os.Getenv("SOFTNIC_RUN_DIR"); dir != "" {
		return dir
	}
	return DefaultRunDir
}

// DeviceSocket returns the path of the control socket of the daemon that
// serves the device named name: RunDir()/name.sock.
func DeviceSocket(name string) string { return filepath.Join(RunDir(), name+".sock") }

// OpenDevice opens the device named name (softnic_IFACE, as `softnic
// daemon -d IFACE` names it, or NAME, as -d IFACE:NAME does) through the daemon that serves it
// (ibv_open_device on a device of ibv_get_device_list): Dial on its
// control socket in RunDir. Without such a daemon the error is
// ErrNoDevice; a program that wants the interface to itself opens it
// in-process with Open instead.
func OpenDevice(name string) (*verbs.Device, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return nil, fmt.Errorf("open device %q: not a device name: %w", name, verbs.ErrInvalidArgument)
	}
	sock := DeviceSocket(name)
	if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("open device %s: %w (no socket %s)", name, ErrNoDevice, sock)
	}
	d, err := DialDevice(sock)
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return nil, fmt.Errorf("open device %s: %w (nobody listens on %s)", name, ErrNoDevice, sock)
	}
	if err != nil {
		return nil, fmt.Errorf("open device %s: %w", name, err)
	}
	return d, nil
}

// DeviceNames returns the names of the devices daemons serve, sorted: the
// control sockets (NAME.sock) in RunDir (ibv_get_device_list). A run
// directory that does not exist holds none.
func DeviceNames() ([]string, error) { return DeviceNamesIn(RunDir()) }

// DeviceNamesIn is DeviceNames for the daemons whose run directory is dir.
func DeviceNamesIn(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("softnic devices: %w", err)
	}
	var names []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".sock")
		if ok && name != "" && e.Type()&os.ModeSocket != 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}
