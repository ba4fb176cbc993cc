package ibtransport

// NewEngine returns a device's only engine (a Group of one), sending
// through port; wake must make the engine goroutine run Process soon.
func NewEngine(port Port, wake func()) *Engine {
	return NewGroup([]Port{port}, []func(){wake}).engines[0]
}

// CreateQP creates an RC queue pair in e's group. It starts in RESET.
func (e *Engine) CreateQP(init *QPConfig) (*QP, error) { return e.g.CreateQP(init) }
