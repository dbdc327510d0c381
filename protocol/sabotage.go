package protocol

// sabotageSwitch names one rule of the protocol that a verification build
// can switch off, deliberately, so a harness (the simulator in package
// sim, or the protocol's own oracle tests) can prove that it notices.
//
// The switches exist only with the parsley_sabotage build tag
// (sabotage_on.go, where Sabotage and NewSabotaged are exported). In every
// other build a node's switch set is an empty struct whose has method
// returns a constant false (sabotage_off.go), so each branch on a switch
// compiles away and no production type carries a test hook.
type sabotageSwitch uint16

const (
	sabIgnoreClaims sabotageSwitch = 1 << iota
	sabDropHeldRecord
	sabSkipReceiveFold
	sabUndecodableAsAbsent
	sabForgetDeliveredSeqs
	sabSkipHeadFold
	sabSkipCarried
	sabAdmitReplays
)
