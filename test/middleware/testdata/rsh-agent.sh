#!/bin/sh
# rsh-agent.sh HOST COMMAND...: Open MPI's launcher agent (plm_rsh_agent)
# for hosts that are network namespaces of one machine. As ssh would run
# COMMAND on HOST, it runs it by sh in HOST's namespace, through `softnic
# exec` on HOST's device (as root, for its /sys/class view), as user
# nobody (or MW_UID) with CAP_IPC_LOCK.
# mpirun runs it as root (entering a namespace needs root) with, in its
# environment:
#   MW_HOSTS    "HOST=NAMESPACE:INTERFACE ..." for every host
#   MW_SOFTNIC  the softnic binary
#   MW_RUN_DIR  the daemons' run directory
#   MW_UID      the user the orted runs as, if not 65534 (bench/suite: 0)
#   MW_TMP      if set, a directory the user may write: each host's orted
#               keeps its session directory in MW_TMP/HOST, as on hosts of
#               their own (here both share /tmp and the host name, and
#               one orted's cleanup raced the other's mkdir)
set -eu
uid=${MW_UID:-65534}
host=$1
shift
for entry in $MW_HOSTS; do
	name=${entry%%=*}
	place=${entry#*=}
	if [ "$name" = "$host" ]; then
		cmd=$*
		if [ -n "${MW_TMP:-}" ]; then
			cmd="mkdir -p '$MW_TMP/$host' && TMPDIR='$MW_TMP/$host' && export TMPDIR && $cmd"
		fi
		exec ip netns exec "${place%%:*}" "$MW_SOFTNIC" exec --run-dir "$MW_RUN_DIR" -d "${place#*:}" -- \
			setpriv --reuid="$uid" --regid="$uid" --clear-groups \
			--inh-caps=+ipc_lock --ambient-caps=+ipc_lock --pdeathsig=KILL /bin/sh -c "$cmd"
	fi
done
echo "rsh-agent.sh: no host $host in MW_HOSTS ($MW_HOSTS)" >&2
exit 1
