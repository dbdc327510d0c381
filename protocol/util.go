package protocol

import (
	"encoding/hex"
	"strconv"
)

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func hexBytes(b []byte) string { return hex.EncodeToString(b) }
