//go:build !parsley_sabotage

package stage

// sabotageSet is the production build's switch set: empty, every switch
// off. has is a constant false the compiler folds, dropping the branches.
type sabotageSet struct{}

func (sabotageSet) has(sabotageSwitch) bool { return false }
