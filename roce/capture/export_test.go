package capture

// Out says how the capture writes its file: "direct" or "rings".
func (c *Capture) Out() string {
	if c.file == nil {
		return "rings"
	}
	return "direct"
}
