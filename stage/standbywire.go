package stage

// The standby wire format: what a member's join and its assignment carry
// in their user data for standby placement (balancer.go). Other members,
// possibly of other releases, read and write it: decoding refuses, with
// errStandbyUserData, whatever it cannot read, and never panics
// (FuzzStandbyUserData).

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// standbyUserDataVersion versions the join and assignment user data.
const standbyUserDataVersion = 1

// errStandbyUserData: a join or an assignment carries user data this
// build cannot read. The balancer then treats the member as keeping no
// copies and asking for none; a member treats its assignment as giving it
// no standbys.
var errStandbyUserData = errors.New("stage: unreadable standby user data")

// appendJoinUserData encodes a member's join: its standby count and the
// partition numbers it keeps warm copies of.
func appendJoinUserData(b []byte, count int, warm []int32) []byte {
	b = append(b, standbyUserDataVersion)
	b = binary.AppendUvarint(b, uint64(count))
	return appendPartitions(b, warm)
}

// readJoinUserData decodes a member's join; a member of an earlier release
// sends none, and any it does not know is read as none.
func readJoinUserData(b []byte) (standbys int, warm map[int32]bool) {
	if len(b) == 0 || b[0] != standbyUserDataVersion {
		return 0, nil
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > 1<<16 {
		return 0, nil
	}
	ps, err := readPartitions(b[k:])
	if err != nil {
		return 0, nil
	}
	warm = make(map[int32]bool, len(ps))
	for _, p := range ps {
		warm[p] = true
	}
	return int(n), warm
}

func appendPartitions(b []byte, ps []int32) []byte {
	b = binary.AppendUvarint(b, uint64(len(ps)))
	for _, p := range ps {
		b = binary.AppendUvarint(b, uint64(p))
	}
	return b
}

func readPartitions(b []byte) ([]int32, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: partition count", errStandbyUserData)
	}
	b = b[k:]
	ps := make([]int32, 0, n)
	for range n {
		p, k := binary.Uvarint(b)
		if k <= 0 || p > 1<<31-1 {
			return nil, fmt.Errorf("%w: partition number", errStandbyUserData)
		}
		ps = append(ps, int32(p))
		b = b[k:]
	}
	if len(b) > 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errStandbyUserData, len(b))
	}
	return ps, nil
}

// syncPlan is a balance plan whose assignments carry each member's standby
// partition numbers in their user data.
type syncPlan []kmsg.SyncGroupRequestGroupAssignment

func (s syncPlan) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment { return s }

// syncAssignments encodes, per member, its topic partitions and standby
// partition numbers. Every member gets an assignment, if empty.
func syncAssignments(members []*kmsg.JoinGroupResponseMember, assigned []map[string][]int32, standbys [][]int32) syncPlan {
	out := make(syncPlan, 0, len(members))
	for i, m := range members {
		var ca kmsg.ConsumerMemberAssignment
		for _, t := range slices.Sorted(maps.Keys(assigned[i])) {
			at := kmsg.NewConsumerMemberAssignmentTopic()
			at.Topic = t
			at.Partitions = slices.Sorted(slices.Values(assigned[i][t]))
			ca.Topics = append(ca.Topics, at)
		}
		if len(standbys[i]) > 0 {
			ca.UserData = appendPartitions([]byte{standbyUserDataVersion}, standbys[i])
		}
		sa := kmsg.NewSyncGroupRequestGroupAssignment()
		sa.MemberID = m.MemberID
		sa.MemberAssignment = ca.AppendTo(nil)
		out = append(out, sa)
	}
	slices.SortFunc(out, func(x, y kmsg.SyncGroupRequestGroupAssignment) int { return cmp.Compare(x.MemberID, y.MemberID) })
	return out
}
