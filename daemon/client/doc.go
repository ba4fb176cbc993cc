// Package client is the Go client of a softnic daemon: the daemon's
// backends of the verbs and rdma_cm APIs. DialDevice and OpenDevice give
// a verbs.Device whose objects live in the daemon (verbs*.go), and
// rdmacm.New over such a device runs its IDs in the daemon through the
// same session (rdmacm*.go), the device's backend being the CM's
// rdmacm.BackendProvider. The in-process backends are those packages'
// own; the session itself, at the host interface's level, is package
// daemon/client/session.
//
//	dev, err := client.OpenDevice("softnic_eth0")
//	if err != nil {
//		return err
//	}
//	defer dev.Close()
//	pd := dev.AllocPD()
package client
