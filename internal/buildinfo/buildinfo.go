// Package buildinfo reports the version a binary was built from, read from
// the module build information the Go toolchain embeds, so `--version` needs
// no linker flags: `go install …@v0.3.0` reports v0.3.0, and a build from a
// checkout reports the VCS revision it was built at.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Version returns the main module's version: the module version when the
// binary was installed from a tagged release, otherwise "devel" followed by
// the VCS revision (shortened, with "+dirty" for uncommitted changes) when
// the toolchain recorded one.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return version(bi)
}

func version(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return "devel " + rev + dirty
}

// String returns "name version (go toolchain)", the line a --version flag
// prints.
func String(name string) string {
	goVersion := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = strings.TrimPrefix(bi.GoVersion, "go")
		return name + " " + version(bi) + " (go " + goVersion + ")"
	}
	return name + " unknown (go " + goVersion + ")"
}
