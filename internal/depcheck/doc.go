// Package depcheck holds the test that keeps Parsley's light layers light:
// headers and protocol import only the standard library, and clock adds only
// franz-go; the runtime's internal packages import nothing above them; and
// no production package imports a test hook or a test rig (internal/rig).
package depcheck
