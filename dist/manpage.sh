#!/bin/sh
# manpage.sh SOFTNIC VERSION: softnic(1) on stdout, made of the binary's
# own help (softnic help, then softnic help CMD for each command), so the
# page says exactly what -h says.
set -eu
bin=$1 version=$2
roff() { sed -e 's/\\/\\e/g' -e 's/^\([.'"'"']\)/\\\&\1/'; }
printf '.TH SOFTNIC 1 "" "softnic %s" "User Commands"\n' "$version"
printf '.SH NAME\nsoftnic \\- a software RoCEv2 RDMA adapter and its tools\n'
printf '.SH SYNOPSIS\n.B softnic\n.I COMMAND\n[flags]\n'
printf '.SH DESCRIPTION\n.nf\n'
"$bin" help | roff
printf '.fi\n.SH COMMANDS\n'
for cmd in $("$bin" help | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p' | grep -vx help); do
	printf '.SS %s\n.nf\n' "$cmd"
	"$bin" help "$cmd" 2>&1 | roff || true
	printf '.fi\n'
done
printf '.SH FILES\n.TP\n/etc/default/softnic\nSOFTNIC_ARGS, the daemon flags softnic.service passes.\n'
printf '.TP\n/run/softnic\nthe daemons'"'"' control sockets (softnic exec --run-dir).\n'
printf '.SH SEE ALSO\n.BR ibv_devinfo (1),\n.BR ib_write_bw (1)\n'
