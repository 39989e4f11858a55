package memory

import "github.com/leasekit/lease/leaseapi"

// SetToken sets key's last token, as if that many acquisitions had been
// made, so that tests can reach the token boundary.
func SetToken(s *Store, key leaseapi.Key, t leaseapi.Token) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if e == nil {
		e = &entry{}
		s.keys[key] = e
	}
	e.token = t
}
