package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The program's /sys/class. libibverbs finds softnic's devices through
// SYSFS_PATH, but UCX (its GID types and netdevs), NCCL (the device's
// path) and rdma-core's tests (DEV/device/net) read /sys/class/infiniband
// themselves. So softnic exec runs the program in a private mount
// namespace whose /sys/class is a tmpfs holding what the original held
// (each entry bind-mounted back), with infiniband and infiniband_verbs
// made of the kernel's entries, if any, and links to the devices softnic
// shows the program; nothing else changes. As root (CAP_SYS_ADMIN) that
// is a mount namespace; any other user needs a user namespace too, which
// maps the user's uid and gid to themselves: the program keeps its ids,
// but has no capability in the caller's namespace (it had none, or
// softnic exec keeps them and makes no namespace, saying so), and
// set-user-ID programs it runs do not gain root's. Where user namespaces
// are off (kernel.unprivileged_userns_clone=0, user.max_user_namespaces=0,
// a seccomp filter, AppArmor's restriction of their capabilities), the
// program runs without one, and softnic exec says so on one line: it
// finds the devices through SYSFS_PATH only.
//
// softnic exec starts itself (viewChildCommand) in the namespaces; that
// child makes the mounts and then execs the program, in place, after
// telling the parent through a pipe whether the mounts were made.

const (
	sysfsAuto  = "auto"
	sysfsMount = "mount"
	sysfsEnv   = "env"

	// viewChildCommand is the child's subcommand, not one to type.
	viewChildCommand = "__exec-in-view"
	// classDir is what the private mount namespace covers.
	classDir = "/sys/class"
	// capSysAdmin is CAP_SYS_ADMIN's bit: what mounting needs.
	capSysAdmin = 21
)

// viewLinks are the child's -l arguments for devs: REL=TARGET, a link in
// /sys/class to each device's entries in the run directory's tree.
func viewLinks(runDir string, devs []servedDevice) []string {
	class := filepath.Join(runDir, sysfsDir, "class")
	var links []string
	for _, d := range devs {
		links = append(links,
			"infiniband/"+d.name+"="+filepath.Join(class, "infiniband", d.name),
			"infiniband_verbs/"+d.cdev+"="+filepath.Join(class, "infiniband_verbs", d.cdev))
	}
	return links
}

// procCaps are this process's capability sets, from /proc/self/status.
type procCaps struct{ eff, prm, amb uint64 }

func readCaps() (procCaps, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return procCaps{}, err
	}
	defer f.Close()
	var c procCaps
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			continue
		}
		switch k {
		case "CapEff":
			c.eff = n
		case "CapPrm":
			c.prm = n
		case "CapAmb":
			c.amb = n
		}
	}
	return c, sc.Err()
}

// capNames are the capabilities' names by bit (linux/capability.h).
var capNames = []string{"chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid",
	"setpcap", "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw", "ipc_lock",
	"ipc_owner", "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct", "sys_admin", "sys_boot",
	"sys_nice", "sys_resource", "sys_time", "sys_tty_config", "mknod", "lease", "audit_write", "audit_control",
	"setfcap", "mac_override", "mac_admin", "syslog", "wake_alarm", "block_suspend", "audit_read", "perfmon",
	"bpf", "checkpoint_restore"}

// capList names the capabilities of set: "cap_ipc_lock,cap_net_raw".
func capList(set uint64) string {
	var names []string
	for bit := 0; bit < 64; bit++ {
		if set&(1<<bit) == 0 {
			continue
		}
		if bit < len(capNames) {
			names = append(names, "cap_"+capNames[bit])
		} else {
			names = append(names, fmt.Sprintf("cap_%d", bit))
		}
	}
	return strings.Join(names, ",")
}

// noViewError is why the program runs without a private /sys/class.
type noViewError struct{ why string }

func (e noViewError) Error() string {
	return "no private /sys/class for the program (" + e.why + "): it finds softnic's devices through SYSFS_PATH " +
		"only, and what reads /sys/class/infiniband itself (UCX's GID types, NCCL, rdma-core's tests) finds none"
}

// userNamespaceRefusal says why making a user namespace failed.
func userNamespaceRefusal(err error) string {
	switch {
	case errors.Is(err, unix.ENOSPC):
		return "user namespaces are off here: user.max_user_namespaces is reached (" + err.Error() + ")"
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return "unprivileged user namespaces are off here: kernel.unprivileged_userns_clone, or a seccomp filter (" +
			err.Error() + ")"
	case errors.Is(err, unix.EINVAL):
		return "this kernel makes no user namespace (" + err.Error() + ")"
	}
	return "no user namespace: " + err.Error()
}

// runInView runs the program (path, argv, env) in a private mount
// namespace with links in its /sys/class, passing it the signals sig
// receives. ran is whether the program started (then status is its exit
// status); if not, err says why (a noViewError: the caller may run it
// without the view). required (--sysfs mount) makes the user namespace
// even where it costs the program capabilities.
func runInView(path string, argv, env, links []string, required bool, sig chan os.Signal, stdout, stderr io.Writer) (status int, ran bool, err error) {
	caps, err := readCaps()
	if err != nil {
		return 0, false, noViewError{"capabilities: " + err.Error()}
	}
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	userns := caps.eff&(1<<capSysAdmin) == 0
	if userns {
		// In a user namespace the program has no capability in this
		// one: keep those it would have (ambient ones, root's) rather
		// than the view, unless told otherwise.
		lost := caps.amb
		if os.Geteuid() == 0 {
			lost |= caps.prm
		}
		if lost != 0 && !required {
			return 0, false, noViewError{"the program keeps its capabilities " + capList(lost) +
				", which a user namespace would take away; run softnic exec as root and drop privileges " +
				"after it (softnic exec -- setpriv ...), or give --sysfs mount to do without them"}
		}
		uid, gid := os.Geteuid(), os.Getegid()
		attr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		// The child must keep CAP_SYS_ADMIN (in the new namespace)
		// across its own exec to mount; it drops it before the
		// program's.
		attr.AmbientCaps = []uintptr{capSysAdmin}
	} else {
		attr.Cloneflags = syscall.CLONE_NEWNS
	}
	report, w, err := os.Pipe()
	if err != nil {
		return 0, false, noViewError{err.Error()}
	}
	defer report.Close()
	args := []string{"softnic", viewChildCommand, "--ppid", strconv.Itoa(os.Getpid())}
	if userns {
		args = append(args, "--drop-ambient")
	}
	for _, l := range links {
		args = append(args, "-l", l)
	}
	args = append(append(args, "--", path), argv...)
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: args, Env: env, Stdin: os.Stdin, Stdout: stdout, Stderr: stderr,
		ExtraFiles: []*os.File{w}, SysProcAttr: attr}
	err = cmd.Start()
	w.Close()
	if err != nil {
		if userns {
			return 0, false, noViewError{userNamespaceRefusal(err)}
		}
		return 0, false, noViewError{"no mount namespace: " + err.Error()}
	}
	// The child writes a line if it fails before the program's exec,
	// and nothing if the exec succeeds (the pipe closes on exec).
	line, _ := bufio.NewReader(report).ReadString('\n')
	if line == "" {
		return waitChild(cmd, sig, failer(stderr, "exec")), true, nil
	}
	cmd.Wait()
	what, msg, _ := strings.Cut(strings.TrimSpace(line), " ")
	if what == "exec" {
		return failer(stderr, "exec")("%s", msg), true, nil
	}
	if userns && errors.Is(viewErrno(msg), unix.EPERM) {
		msg = "mounting in a user namespace is refused here: kernel.apparmor_restrict_unprivileged_userns, " +
			"or a security module (" + msg + ")"
	}
	return 0, false, noViewError{msg}
}

// viewErrno finds the errno a child's message ends with.
func viewErrno(msg string) error {
	for _, e := range []unix.Errno{unix.EPERM, unix.EACCES} {
		if strings.HasSuffix(msg, e.Error()) {
			return e
		}
	}
	return nil
}

// runViewChild is the child: softnic __exec-in-view [--drop-ambient]
// [-l REL=TARGET ...] -- PATH ARGV..., in its new namespaces, with the
// parent's report pipe as descriptor 3. It makes /sys/class and execs
// PATH with ARGV and its own environment; it never returns when that
// works.
func runViewChild(args []string, stderr io.Writer) int {
	report := os.NewFile(3, "report")
	unix.CloseOnExec(3)
	tell := func(what string, err error) int {
		fmt.Fprintf(report, "%s %v\n", what, err)
		return 125
	}
	var links []string
	dropAmbient := false
	ppid := -1
	for len(args) > 0 && args[0] != "--" {
		switch {
		case args[0] == "--drop-ambient":
			dropAmbient = true
			args = args[1:]
		case args[0] == "--ppid" && len(args) > 1:
			ppid, _ = strconv.Atoi(args[1])
			args = args[2:]
		case args[0] == "-l" && len(args) > 1:
			links = append(links, args[1])
			args = args[2:]
		default:
			fmt.Fprintf(stderr, "softnic: %s is softnic exec's, not a command to run\n", viewChildCommand)
			return 2
		}
	}
	if len(args) < 3 {
		fmt.Fprintf(stderr, "softnic: %s is softnic exec's, not a command to run\n", viewChildCommand)
		return 2
	}
	path, argv := args[1], args[2:]
	if err := buildClassView(links); err != nil {
		return tell("view", err)
	}
	if dropAmbient {
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
			return tell("view", fmt.Errorf("clearing the ambient capabilities: %w", err))
		}
	}
	// The program dies with softnic exec, as without the view.
	unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	if os.Getppid() != ppid {
		return tell("exec", errors.New("softnic exec ended before the program started"))
	}
	err := unix.Exec(path, argv, os.Environ())
	return tell("exec", fmt.Errorf("exec %s: %w", path, err))
}

// buildClassView covers /sys/class with a tmpfs that holds its entries
// (bind mounts of the originals) and infiniband and infiniband_verbs
// directories of the kernel's entries and the links (REL=TARGET: a link
// at /sys/class/REL to TARGET; softnic's win over a kernel device's of
// the same name), then makes the tmpfs read-only. Mounts made here do not
// propagate out of the namespace.
func buildClassView(links []string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making / a slave mount: %w", err)
	}
	fd, err := unix.Open(classDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", classDir, err)
	}
	defer unix.Close(fd)
	orig := fmt.Sprintf("/proc/self/fd/%d", fd)
	ents, err := os.ReadDir(orig)
	if err != nil {
		return err
	}
	// The kernel's own devices, kept (their entries are relative links
	// into /sys/devices, which still resolve).
	kernel := map[string]map[string]string{"infiniband": {}, "infiniband_verbs": {}}
	for sub, m := range kernel {
		subEnts, _ := os.ReadDir(filepath.Join(orig, sub))
		for _, e := range subEnts {
			if t, err := os.Readlink(filepath.Join(orig, sub, e.Name())); err == nil {
				m[e.Name()] = t
			}
		}
	}
	if err := unix.Mount("tmpfs", classDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", classDir, err)
	}
	for _, e := range ents {
		name := e.Name()
		if _, ours := kernel[name]; ours {
			continue
		}
		dst := filepath.Join(classDir, name)
		switch {
		case e.Type()&os.ModeSymlink != 0:
			t, err := os.Readlink(filepath.Join(orig, name))
			if err == nil {
				err = os.Symlink(t, dst)
			}
			if err != nil {
				return err
			}
		case e.IsDir():
			if err := os.Mkdir(dst, 0o755); err != nil {
				return err
			}
			if err := unix.Mount(filepath.Join(orig, name), dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("bind %s/%s: %w", classDir, name, err)
			}
		}
	}
	for sub := range kernel {
		if err := os.Mkdir(filepath.Join(classDir, sub), 0o755); err != nil {
			return err
		}
	}
	for _, l := range links {
		rel, target, ok := strings.Cut(l, "=")
		sub, name, _ := strings.Cut(rel, "/")
		if _, known := kernel[sub]; !ok || !known || name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("bad link %q", l)
		}
		kernel[sub][name] = target
	}
	for sub, m := range kernel {
		for name, target := range m {
			if sub == "infiniband_verbs" && name == "abi_version" {
				continue
			}
			if err := os.Symlink(target, filepath.Join(classDir, sub, name)); err != nil {
				return err
			}
		}
	}
	if len(kernel["infiniband_verbs"]) > 0 {
		abi := filepath.Join(classDir, "infiniband_verbs", "abi_version")
		if err := os.WriteFile(abi, []byte(kernelABI+"\n"), 0o444); err != nil {
			return err
		}
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if err := unix.Mount("", classDir, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s read-only: %w", classDir, err)
	}
	return nil
}
