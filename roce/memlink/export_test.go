package memlink

import "github.com/softnic/softnic/roce"

func errClosedForTest() error { return roce.ErrLinkClosed }
