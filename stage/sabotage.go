package stage

// sabotageSwitch names one rule of the stage host that a verification
// build can switch off, deliberately, so the host simulator can prove it
// notices (hostsim_sabotage_test.go). The switches exist only with the
// parsley_sabotage build tag (sabotage_on.go); in every other build the
// switch set is an empty struct whose has method returns a constant false
// (sabotage_off.go), so each branch on a switch compiles away.
type sabotageSwitch uint8

const (
	// sabRevokesFromCallbacks takes partitions out of the holding only when
	// franz-go's revoke or lost callback says so, not at the sync that took
	// them: the second revoke of one busy step is never heard (#49's second
	// defect).
	sabRevokesFromCallbacks sabotageSwitch = 1 << iota
	// sabAbsorbLateChanges gives the tasks a reconcile keeps the holding as
	// it is when the reconcile ends, not as it read it: a partition that
	// left and came back while the reconcile closed and opened stores is
	// taken for held throughout (#49's first defect, the mark forget
	// erased).
	sabAbsorbLateChanges
	// sabIgnoreMembership continues a holding from one sync to the next
	// whatever member ID they name: a member that was out of the group
	// meanwhile (removed, and back under a new ID) keeps its tasks.
	sabIgnoreMembership
	// sabFeedAcrossMoves feeds a step's records although the holding
	// changed while one of its polls waited: the client may have fetched a
	// partition again from its committed offset, and the node is fed
	// records it already took (#49's third find).
	sabFeedAcrossMoves
	// sabCommitUnheld commits a step whatever the group did to its tasks
	// meanwhile, and an offsetless one without asking the coordinator
	// whether the member is still in the group: a member that lost a task
	// commits the task's writes after its new owner restored (#49's
	// fourth find).
	sabCommitUnheld
)
