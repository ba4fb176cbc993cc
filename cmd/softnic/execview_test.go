package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCapList(t *testing.T) {
	assert.Equal(t, "cap_ipc_lock", capList(1<<14))
	assert.Equal(t, "cap_net_raw,cap_sys_admin,cap_63", capList(1<<13|1<<21|1<<63))
	assert.Empty(t, capList(0))
}
