package stage

// Startup checks that the cluster matches the declared stages.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// topology is what the App knows of the cluster's topics and the admin
// clients it asks: New fills in which stages read which topic and their
// tick topics; Run's startup checks resolve the topics and set the
// clients. Read-only once the checks have passed, so every part reads it
// without a lock.
type topology struct {
	appID    string
	stages   []*Stage
	bySource map[string][]int // source topic -> stage indexes
	// Per stage index: the stage's tick topic and its binding, "" and nil
	// when the stage does not tick (ticks.go).
	tickTopic []string
	tickBind  []*binding

	topics map[string]topicMeta
	idName map[headers.TopicID]string
	admin  *kadm.Client
	boot   *kgo.Client // the admin's client, for requests kadm lacks (fence.go)
}

// checkTopology resolves every declared topic and checks the cluster
// matches the stages: every source, sink and changelog exists; a stage's
// sources agree on the partition count; its changelog has that many
// partitions. It reports every problem at once.
func (tp *topology) checkTopology(ctx context.Context) error {
	var names []string
	seen := make(map[string]bool)
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, s := range tp.stages {
		for _, b := range s.sources {
			add(b.topic)
		}
		for _, k := range s.sinks {
			add(k.topicName())
		}
		add(ChangelogTopic(tp.appID, s.name))
	}
	md, err := tp.admin.Metadata(ctx, names...)
	if err != nil {
		return fmt.Errorf("stage: metadata: %w", err)
	}
	tp.topics = make(map[string]topicMeta)
	tp.idName = make(map[headers.TopicID]string)
	var errs []error
	var missing []string
	for _, n := range names {
		td, ok := md.Topics[n]
		if !ok || td.Err != nil || len(td.Partitions) == 0 {
			missing = append(missing, n)
			continue
		}
		id := headers.TopicID(td.ID)
		tp.topics[n] = topicMeta{id: id, partitions: int32(len(td.Partitions))}
		tp.idName[id] = n
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("%w: missing topics %q", ErrTopology, missing))
	}
	for _, s := range tp.stages {
		var parts int32 = -1
		var first string
		counts := ""
		agree := true
		for _, b := range s.sources {
			m, ok := tp.topics[b.topic]
			if !ok {
				continue
			}
			counts += fmt.Sprintf(" %s=%d", b.topic, m.partitions)
			if parts < 0 {
				parts, first = m.partitions, b.topic
			} else if m.partitions != parts {
				agree = false
			}
		}
		if !agree {
			errs = append(errs, fmt.Errorf("%w: stage %q: sources must have equal partition counts to be co-partitioned; have%s", ErrTopology, s.name, counts))
			continue
		}
		cl := ChangelogTopic(tp.appID, s.name)
		if m, ok := tp.topics[cl]; ok && parts > 0 && m.partitions != parts {
			errs = append(errs, fmt.Errorf("%w: stage %q: changelog %q has %d partitions, sources (%s) have %d", ErrTopology, s.name, cl, m.partitions, first, parts))
		}
	}
	errs = append(errs, tp.checkCompacted(ctx)...)
	return errors.Join(errs...)
}

// checkCompacted refuses changelogs whose cleanup policy is not exactly
// compaction. Under the delete policy, or compaction with deletion
// ("compact,delete"), time- or size-based retention silently drops state a
// full restore needs.
func (tp *topology) checkCompacted(ctx context.Context) []error {
	var names []string
	for _, s := range tp.stages {
		if n := ChangelogTopic(tp.appID, s.name); tp.topics[n].partitions > 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil
	}
	rcs, err := tp.admin.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return []error{fmt.Errorf("stage: describe changelog configs: %w", err)}
	}
	var errs []error
	for _, rc := range rcs {
		if rc.Err != nil {
			errs = append(errs, fmt.Errorf("stage: describe configs of %q: %w", rc.Name, rc.Err))
			continue
		}
		policy := "delete"
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil {
				policy = *c.Value
			}
		}
		if !compactOnly(policy) {
			errs = append(errs, fmt.Errorf("%w: changelog %q has cleanup.policy=%s; retention would delete state a restore needs: set the topic's cleanup.policy to compact (no delete)", ErrTopology, rc.Name, policy))
		}
	}
	return errs
}

// compactOnly reports whether a cleanup.policy value (a comma-separated
// list) is compaction and nothing else.
func compactOnly(policy string) bool {
	seen := false
	for p := range strings.SplitSeq(policy, ",") {
		if strings.TrimSpace(p) != "compact" {
			return false
		}
		seen = true
	}
	return seen
}
