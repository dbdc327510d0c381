package testkafka

import (
	"os/exec"
	"syscall"
)

// setProcAttrs makes the kernel kill a JVM whose parent dies, so a test
// binary that crashes or is killed by `go test -timeout` leaves no broker
// behind.
func setProcAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
