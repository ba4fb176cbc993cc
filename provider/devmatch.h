/*
 * devmatch.h: how the provider and softnic's librdmacm tell a softnic
 * device among those libibverbs lists, whatever its name (softnic_IFACE,
 * or the NAME of `softnic daemon -d IFACE:NAME`): the daemon writes
 * "softnic" in the device's class/infiniband/NAME/device/modalias, as a
 * kernel device's modalias names its bus and kind (libibverbs reads that
 * file to match providers by their tables). Names beginning "softnic_"
 * are softnic's too, from a tree written before the modalias was.
 */
#ifndef SOFTNIC_DEVMATCH_H
#define SOFTNIC_DEVMATCH_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define SN_NAME_PREFIX "softnic_"
#define SN_MODALIAS "softnic"

/* sn_devmatch reports whether the device named ibdev_name, whose
 * class/infiniband entry is ibdev_path, is a softnic device. */
static inline bool sn_devmatch(const char *ibdev_name, const char *ibdev_path)
{
	if (strncmp(ibdev_name, SN_NAME_PREFIX, strlen(SN_NAME_PREFIX)) == 0)
		return true;
	char path[4200];
	int n = snprintf(path, sizeof(path), "%s/device/modalias", ibdev_path);
	if (n < 0 || (size_t)n >= sizeof(path))
		return false;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	char buf[32];
	ssize_t got = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (got <= 0)
		return false;
	buf[got] = 0;
	buf[strcspn(buf, "\n")] = 0;
	return strcmp(buf, SN_MODALIAS) == 0;
}

#endif
