package protocol

import (
	"crypto/md5"
	"strconv"

	"github.com/parsley-go/parsley/headers"
)

// SenderIDFor returns the stable sender identity of the task (applicationID,
// stage, partition): the name-based UUID, version 3, of the UTF-8 string
// "<applicationID>/<stage>/<partition>", computed exactly as Java's
// UUID.nameUUIDFromBytes does (MD5 of the bytes, version and IETF variant
// bits set). It is the same on every restart and on every instance the task
// migrates to, and the same as a Java 0.2 stage of that name would use.
func SenderIDFor(applicationID, stage string, partition int32) headers.SenderID {
	name := applicationID + "/" + stage + "/" + strconv.FormatInt(int64(partition), 10)
	sum := md5.Sum([]byte(name))
	sum[6] = sum[6]&0x0f | 0x30 // version 3
	sum[8] = sum[8]&0x3f | 0x80 // IETF variant
	return headers.SenderID(sum)
}
