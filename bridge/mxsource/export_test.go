package mxsource

// Abandon stops s as a killed process would: its gateway sessions stay
// open and its state file as it was last written.
func Abandon(s *Source) {
	s.abandoned.Store(true)
	if s.ho != nil {
		s.ho.stop()
	}
	s.Close()
}
