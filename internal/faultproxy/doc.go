// Package faultproxy is an in-process TCP proxy that injects network faults
// between a client under test and a real server (Valkey, PostgreSQL): delay,
// a blackhole (a partition), a reply lost after the request committed,
// refused and reset connections, and a client that vanishes without the
// server noticing (Detach). It knows no protocol: it forwards chunks of
// bytes as they are read. Only tests import it.
//
// # Use
//
//	p, err := faultproxy.New(serverAddr)
//	if err != nil { ... }
//	defer p.Close()
//	// point the client at p.Addr()
//	p.Blackhole()            // partition: nothing gets through, both ways
//	p.Pass()                 // heal
//	done := p.CutAfterRequest()
//	// the next request commits on the server; its reply is lost and the
//	// client connection is reset
//	<-done
//	// the same, for the next request that carries these bytes (a lease's
//	// owner id): a client library's pings pass
//	done = p.CutAfterRequestContaining([]byte(owner))
//
// # Modes
//
// A mode applies to every open connection and every future one, from the
// next chunk on, until another mode is set: Pass (the default), Delay,
// Blackhole, Refuse, Detach. Detach also acts once on the open connections:
// it resets their client sides and keeps their server sides open, draining
// whatever the server sends later, so a request the server held back (a
// paused Valkey, a PostgreSQL statement waiting for a row lock) still runs,
// with no client left to hear it. CutAfterRequest is not a mode but a one-shot arm that
// fires on top of the mode (in Blackhole or Refuse nothing is forwarded, so
// an armed cut waits). ResetAll acts once on the open connections.
//
// Teardown propagates in every mode (except on a detached connection, whose
// whole point is that the client's end never reaches the server): when one side closes its write half
// the proxy closes the other side's write half, and a connection ends when
// both directions have ended, so a client that closes never leaks a server
// connection.
//
// # Observing
//
// Stats counts connections and bytes; WaitFor blocks until a condition on
// them holds and CutAfterRequest returns a channel closed when the cut has
// fired, so tests order events without sleeping.
//
// # Goroutines
//
// New starts one accept goroutine; every proxied connection has two, one per
// direction (the client-to-server one also dials the server). Close stops
// them all and waits for them, so a test that closes its proxies is
// goleak-clean.
package faultproxy
