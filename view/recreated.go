package view

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrChangelogRecreated: the changelog topic the view follows was deleted,
// or deleted and created again, while Run ran. Its offsets belong to
// another topic now, so the replicas cannot follow it; Run stops with a
// *RecreatedError. See Run for what a later Run does.
var ErrChangelogRecreated = errors.New("view: the changelog was deleted or recreated while the view ran")

// RecreatedError says which changelog changed under a running view: the
// topic ID the replicas mirror, and the one the topic has now (zero when
// it is gone). It wraps ErrChangelogRecreated.
type RecreatedError struct {
	Topic    string
	Was, Now headers.TopicID
}

func (e *RecreatedError) Error() string {
	if e.Now.IsZero() {
		return fmt.Sprintf("%v: %s (topic ID %s) no longer exists", ErrChangelogRecreated, e.Topic, e.Was)
	}
	return fmt.Sprintf("%v: %s was topic ID %s, is now %s", ErrChangelogRecreated, e.Topic, e.Was, e.Now)
}

// Unwrap returns ErrChangelogRecreated.
func (e *RecreatedError) Unwrap() error { return ErrChangelogRecreated }

// incarnationCheck is how often a running view asks the brokers whether
// its changelog is still the topic it started on (View.incarnationEvery;
// tests shorten a view's own).
const incarnationCheck = 2 * time.Second

// recreated compares the changelog's incarnation now with was: a
// *RecreatedError if the topic is gone or another one, nil if it is the
// same; a failed lookup is returned as it is, for the caller to retry.
func recreated(ctx context.Context, adm *kadm.Client, topic string, was state.Incarnation) error {
	cur, err := state.CurrentIncarnation(ctx, adm, topic)
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return &RecreatedError{Topic: topic, Was: was.TopicID}
	case err != nil:
		return err
	case cur != was:
		return &RecreatedError{Topic: topic, Was: was.TopicID, Now: cur.TopicID}
	}
	return nil
}

// watchIncarnation checks the changelog's incarnation every period until
// ctx ends, and cancels ctx with the *RecreatedError when it changed.
func watchIncarnation(ctx context.Context, cancel context.CancelCauseFunc, period time.Duration, adm *kadm.Client, topic string, was state.Incarnation) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var re *RecreatedError
		if err := recreated(ctx, adm, topic, was); errors.As(err, &re) {
			cancel(re)
			return
		}
	}
}
