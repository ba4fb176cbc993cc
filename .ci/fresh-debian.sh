#!/usr/bin/env bash
# Runs the README's two commands (the first sh block: the demo, then the
# tests), as root, in a Debian system that debootstrap made with only its
# base packages, so that a package the commands do not install for
# themselves fails here as it would on a fresh machine. The host's Go
# toolchain (/usr/local/go) is bind-mounted read-only; /proc, /sys, /dev and
# a fresh /run are the host's kernel's, as the tests need (namespaces, XDP,
# AF_XDP, qemu). SOFTNIC_FRESH_SUITE and SOFTNIC_FRESH_MIRROR choose the
# release (bookworm) and the mirror; SOFTNIC_FRESH_FIRST=1 runs only the
# first command (the demo).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
suite=${SOFTNIC_FRESH_SUITE:-bookworm}
mirror=${SOFTNIC_FRESH_MIRROR:-http://deb.debian.org/debian}
goroot=${GOROOT:-/usr/local/go}

# The README's commands: the lines of its first ```sh block, comments cut.
mapfile -t cmds < <(awk '/^```sh$/ {inblock=1; next} inblock && /^```/ {exit} inblock' "$repo/README.md" |
	sed 's/[[:space:]]*#.*$//' | grep -v '^[[:space:]]*$')
[ ${#cmds[@]} -eq 2 ] || { echo "fresh-debian: README's first sh block has ${#cmds[@]} commands, want 2" >&2; exit 1; }
[ "${SOFTNIC_FRESH_FIRST:-}" = 1 ] && cmds=("${cmds[0]}")

root=$(mktemp -d /var/tmp/softnic-fresh.XXXXXX)
chmod 755 "$root" # the chroot's /: apt's _apt and the demo's nobody walk it
cleanup() {
	# Lazy: a daemon a failed test left may still hold a mount.
	mountpoint -q "$root" && umount -lR "$root"
	rm -rf --one-file-system "$root"
}
trap cleanup EXIT

if ! command -v debootstrap >/dev/null; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
echo "fresh-debian: debootstrap $suite (base packages only) into $root"
debootstrap "$suite" "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
	{ tail -20 "$root.debootstrap.log" >&2; exit 1; }
rm -f "$root.debootstrap.log"

# The chroot's / is a mount point of its own, as a machine's is: ip netns
# exec remounts / as a slave, which fails on a plain directory.
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"
mount -t tmpfs -o mode=755 tmpfs "$root/run"
mkdir -p "$root/usr/local/go"
mount --bind "$goroot" "$root/usr/local/go" && mount -o remount,bind,ro "$root/usr/local/go"
# The site's network setup, as on any machine there: its resolver, its
# name in /etc/hosts (Open MPI looks itself up), and the CAs it adds (a TLS-inspecting proxy's), which ca-certificates takes in
# when the commands install it.
cp /etc/resolv.conf /etc/hosts /etc/hostname "$root/etc/"
if [ -d /usr/local/share/ca-certificates ]; then
	mkdir -p "$root/usr/local/share/ca-certificates"
	cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
cp -a "$repo" "$root/root/softnic"

# Each command runs in a mount namespace whose root is the new system's
# (pivot_root, not chroot: the kernel refuses user namespaces, which the
# isolation tests make, to a chrooted process), shared as systemd makes a
# machine's /: an unmount (ip netns delete) then reaches the copies that
# mount namespaces made since (softnic exec's /sys/class view).
for cmd in "${cmds[@]}"; do
	echo "fresh-debian: $cmd"
	unshare --mount --propagation private /bin/sh -ec '
		cd "$1"
		mkdir -p .oldroot
		pivot_root . .oldroot
		cd /
		umount -l /.oldroot
		rmdir /.oldroot
		mount --make-rshared /
		exec /usr/bin/env -i HOME=/root TERM=dumb CI="$2" \
			PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			bash -c "cd /root/softnic && $3"' sh "$root" "${CI:-}" "$cmd"
done
