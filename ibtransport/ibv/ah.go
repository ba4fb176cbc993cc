package ibv

import (
	"fmt"
	"sync/atomic"
)

// GRHLen is the size of the Global Route Header a UD receive buffer starts
// with.
const GRHLen = 40

// AH is an address handle (ibv_ah): where the UD sends that name it go
// (SendWR.AH). As ibv_ah holds its provider's handle, an AH holds what the
// backend that made it sends with (Backend): the engine's transmit paths
// (ibtransport.Group.CreateAH). The zero AH has no backend: no backend
// sends to it.
type AH struct {
	av        AddressVector
	backend   any
	destroyed atomic.Bool
}

// NewAH returns an address handle for av whose backend state is backend;
// it is for backends (the engine's CreateAH), not for programs.
func NewAH(av AddressVector, backend any) *AH { return &AH{av: av, backend: backend} }

// AV returns the address vector the AH was created with.
func (ah *AH) AV() AddressVector { return ah.av }

// Backend returns the state NewAH was given.
func (ah *AH) Backend() any { return ah.backend }

// Destroy destroys the AH (ibv_destroy_ah): later posts naming it fail.
// Sends already posted still go out.
func (ah *AH) Destroy() error {
	if ah.destroyed.Swap(true) {
		return fmt.Errorf("destroy AH: already destroyed: %w", ErrInvalidArgument)
	}
	return nil
}

// Destroyed reports whether Destroy was called.
func (ah *AH) Destroyed() bool { return ah.destroyed.Load() }
