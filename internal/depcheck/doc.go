// Package depcheck holds the test that keeps Parsley's light layers light:
// headers and protocol import only the standard library, and clock adds only
// franz-go.
package depcheck
