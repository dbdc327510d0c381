//go:build parsley_sabotage

package stage

// sabotageSet is the switches a verification build turned on.
type sabotageSet sabotageSwitch

func (s sabotageSet) has(x sabotageSwitch) bool { return sabotageSwitch(s)&x != 0 }
