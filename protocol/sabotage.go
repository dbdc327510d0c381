package protocol

// Sabotage switches off one rule of the protocol, deliberately, so a
// verification harness (the simulator in package sim, or another host's
// conformance suite) can prove that it notices. Each switch is a single
// branch on the path it breaks, so it costs nothing when off.
//
// Never set Sabotage outside a test: every switch breaks causal order,
// completeness or recovery.
type Sabotage uint16

const (
	// SabotageIgnoreClaims delivers every head at once: the gate always
	// passes.
	SabotageIgnoreClaims Sabotage = 1 << iota
	// SabotageDropHeldRecord loses the last held record of every queue when
	// the node is restored from its store.
	SabotageDropHeldRecord
	// SabotageSkipReceiveFold does not fold a received record's clock into
	// its channel's advertised clock, so stamps lose transitive claims.
	SabotageSkipReceiveFold
	// SabotageUndecodableAsAbsent reads an undecodable stamp as the empty
	// stamp instead of refusing the record.
	SabotageUndecodableAsAbsent
	// SabotageForgetDeliveredSeqs never writes delivered-sequence marks to
	// the store, so a restarted node forgets which sequence claims it has
	// resolved.
	SabotageForgetDeliveredSeqs
	// SabotageSkipHeadFold does not fold the skipped run behind a held head
	// into the frontier when that head's predecessor delivers.
	SabotageSkipHeadFold
	// SabotageSkipCarried leaves carried ancestry out of stamps.
	SabotageSkipCarried
)

// String names the switches set in s.
func (s Sabotage) String() string {
	names := []string{"IgnoreClaims", "DropHeldRecord", "SkipReceiveFold", "UndecodableAsAbsent", "ForgetDeliveredSeqs", "SkipHeadFold", "SkipCarried"}
	out := ""
	for i, n := range names {
		if s&(1<<i) != 0 {
			if out != "" {
				out += "|"
			}
			out += n
		}
	}
	if out == "" {
		return "none"
	}
	return out
}
