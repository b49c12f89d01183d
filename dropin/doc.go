// Package dropin holds the tests that run netpoll under other people's
// code: x/net/nettest's net.Conn conformance suite and gRPC. They live in
// the root module, not in netpoll's, so that netpoll's go.mod requires
// golang.org/x/sys alone and a program importing netpoll inherits nothing
// else. The package has no code of its own.
package dropin
