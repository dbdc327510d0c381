//go:build parsley_sabotage

package protocol

import "context"

// Sabotage switches off rules of the protocol, deliberately, so a
// verification harness can prove that it notices. It exists only in
// builds with the parsley_sabotage tag: go test -tags parsley_sabotage.
// Each switch is a single branch on the path it breaks.
//
// Every switch breaks causal order, completeness or recovery.
type Sabotage uint16

const (
	// SabotageIgnoreClaims delivers every head at once: the gate always
	// passes.
	SabotageIgnoreClaims = Sabotage(sabIgnoreClaims)
	// SabotageDropHeldRecord loses the last held record of every queue when
	// the node is restored from its store.
	SabotageDropHeldRecord = Sabotage(sabDropHeldRecord)
	// SabotageSkipReceiveFold does not fold a received record's clock into
	// its channel's advertised clock, so stamps lose transitive claims.
	SabotageSkipReceiveFold = Sabotage(sabSkipReceiveFold)
	// SabotageUndecodableAsAbsent reads an undecodable stamp as the empty
	// stamp instead of refusing the record.
	SabotageUndecodableAsAbsent = Sabotage(sabUndecodableAsAbsent)
	// SabotageForgetDeliveredSeqs never writes delivered-sequence marks to
	// the store, so a restarted node forgets which sequence claims it has
	// resolved.
	SabotageForgetDeliveredSeqs = Sabotage(sabForgetDeliveredSeqs)
	// SabotageSkipHeadFold does not fold the skipped run behind a held head
	// into the frontier when that head's predecessor delivers.
	SabotageSkipHeadFold = Sabotage(sabSkipHeadFold)
	// SabotageSkipCarried leaves carried ancestry out of stamps.
	SabotageSkipCarried = Sabotage(sabSkipCarried)
	// SabotageAdmitReplays turns the replay guard off: a record at or
	// below what the node already accounts for is admitted again.
	SabotageAdmitReplays = Sabotage(sabAdmitReplays)
)

// sabotageSet is the verification build's switch set.
type sabotageSet = Sabotage

func (s Sabotage) has(x sabotageSwitch) bool { return s&Sabotage(x) != 0 }

// NewSabotaged is New with the switches in s set.
func NewSabotaged(ctx context.Context, cfg Config, s Sabotage) (*Node, error) {
	return newNode(ctx, cfg, s)
}

// String names the switches set in s.
func (s Sabotage) String() string {
	names := []string{"IgnoreClaims", "DropHeldRecord", "SkipReceiveFold", "UndecodableAsAbsent", "ForgetDeliveredSeqs", "SkipHeadFold", "SkipCarried", "AdmitReplays"}
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
