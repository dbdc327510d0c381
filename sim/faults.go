package sim

import (
	"errors"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// errStoreFault is the store failure the scheduler injects mid-step.
var errStoreFault = errors.New("sim: injected store failure")

// faultStore is the store a SimNode hands its protocol: its step's batch,
// failing the storeFault-th operation when the scheduler armed it.
type faultStore struct {
	*protocol.Batch
	n *SimNode
}

func (s faultStore) fail() bool {
	if s.n.storeFault <= 0 {
		return false
	}
	s.n.storeFault--
	return s.n.storeFault == 0
}

func (s faultStore) Get(key string) ([]byte, bool, error) {
	if s.fail() {
		return nil, false, errStoreFault
	}
	return s.Batch.Get(key)
}

func (s faultStore) Put(key string, value []byte) error {
	if s.fail() {
		return errStoreFault
	}
	return s.Batch.Put(key, value)
}

func (s faultStore) Delete(key string) error {
	if s.fail() {
		return errStoreFault
	}
	return s.Batch.Delete(key)
}

func (s faultStore) Scan(prefix string, fn func(key string, value []byte) error) error {
	if s.fail() {
		return errStoreFault
	}
	return s.Batch.Scan(prefix, fn)
}

// faultyFetch is a fetch step on ch whose store fails after one to four
// operations. The protocol must report the failure, wrapped, and the host
// discards the node and rebuilds it from committed state (H3): the step
// aborts like a crash. A step that ends before the fault fires commits.
func (n *SimNode) faultyFetch(ch headers.Channel) error {
	w := n.w
	w.storeFaults--
	n.storeFault = 1 + w.rng.IntN(4)
	defer func() { n.storeFault = 0 }()
	n.begin()
	err := n.fetch(ch)
	if err == nil {
		err = n.proto.Flush()
	}
	if err == nil {
		n.storeFault = 0
		n.checkInvariants("Flush")
		return n.commitFlushed()
	}
	if !errors.Is(err, errStoreFault) {
		return err
	}
	if p, ok := n.proto.(*protocol.Node); ok {
		// Once failed, the node refuses every call until rebuilt.
		if _, e := p.OnRecord(&protocol.Record{Coordinate: headers.Coordinate{Channel: ch}}); !errors.Is(e, protocol.ErrNodeFailed) {
			n.w.Oracle.violate(HostError, n.spec.Name, "a node whose store failed accepted a call: "+errString(e))
		}
	}
	w.stats.StoreFaults++
	w.trace("store-fault %s", n.spec.Name)
	n.abort()
	return nil
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// openTxnOn reports whether a transaction is open on some partition of
// topic t: its last stable offset sits below its log end.
func (w *World) openTxnOn(t headers.TopicID) bool {
	top := w.Broker.TopicByID(t)
	if top == nil {
		return false
	}
	for p := range top.Partitions() {
		if ch := top.Channel(int32(p)); w.Broker.StableEnd(ch) < w.Broker.End(ch) {
			return true
		}
	}
	return false
}
