// Package depcheck holds the tests that keep Parsley's layers where they
// belong, by package path: headers and protocol import only the standard
// library, and clock adds only franz-go; the runtime (the public packages
// and internal/state, wait, kclient, kafkahash, kafkasec and buildinfo)
// imports only the runtime, so nothing of it reaches internal/rig or any
// other package for tests, examples and soaks; the runtime's internals
// import nothing above them; and every package stands on one floor or the
// other.
package depcheck
