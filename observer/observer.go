package observer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNoTopics is wrapped when the configured names and pattern match no
// topic on the cluster.
var ErrNoTopics = errors.New("no topics to observe")

// ErrClusterUnavailable is wrapped when the brokers' offsets cannot be
// read, so findings that depend on them cannot be judged now. The store
// alone still answers Store.Findings with nil offsets.
var ErrClusterUnavailable = errors.New("cluster unavailable")

// StartAt says where to begin consuming a channel the store has no
// position for.
type StartAt int

const (
	// FromStart consumes from the log start.
	FromStart StartAt = iota
	// FromEnd consumes only records appended after the observer starts.
	FromEnd
)

// Config configures an Observer.
type Config struct {
	// Brokers are the seed brokers to bootstrap from, host:port.
	Brokers []string
	// Topics are topic names to observe.
	Topics []string
	// Pattern, if set, observes every topic whose name it matches, in
	// addition to Topics. Internal topics (a leading "__") are never
	// matched.
	Pattern *regexp.Regexp
	// Start says where to begin on a channel without a stored position.
	Start StartAt
	// StartTime, if set, overrides Start: begin at the first record with
	// a timestamp at or after it (the log end if there is none).
	StartTime time.Time
	// ReadUncommitted fetches records of open and aborted transactions too,
	// so aborted stamps are stored and analysed. The default is
	// read_committed, which is what Parsley consumers see.
	ReadUncommitted bool
	// MaxAge and MaxRecords bound the stored graph; zero means unbounded.
	// Findings detected at ingest outlive the records they name.
	MaxAge     time.Duration
	MaxRecords int64
	// ClosedRetention is how long resolved findings are kept, with their
	// history, before they are deleted; zero keeps them.
	ClosedRetention time.Duration
	// Refresh is how often Run probes the cluster — topic metadata, new
	// matching topics and partitions, end offsets — (default 10s), which
	// bounds how long a lost cluster goes unreported; while the cluster
	// cannot be read Run retries with backoff from a second up to
	// Refresh. PruneEvery is how often it prunes the store and
	// re-evaluates findings for the metrics (default 1m).
	Refresh, PruneEvery time.Duration
	// ClientOpts are extra franz-go options (TLS, SASL, …).
	ClientOpts []kgo.Opt
	// Logger receives progress and errors; nil means slog.Default().
	Logger *slog.Logger

	// Group, when set, makes this observer one shard of a group that
	// shares the topics through a Kafka consumer group of that name: each
	// partition is read and judged by one shard, and the shards share what
	// they find through the group's state topic (see shard.go). Run is the
	// only way to run a shard; Scan refuses.
	Group string
	// Instance is this shard's static member ID in the group, stable
	// across restarts (a host or pod name): required with Group.
	Instance string
	// AdvertiseURL is where this shard's web UI answers, published to the
	// group so that the others can send a reader there.
	AdvertiseURL string
	// StateTopic is the group's state topic; "" means DefaultStateTopic.
	StateTopic string
	// SessionTimeout is how long the group waits for a shard that stopped
	// heartbeating before its partitions move (franz-go's default, 45s,
	// when zero).
	SessionTimeout time.Duration
}

// ErrNoInstance is wrapped when Config.Group is set without an instance.
var ErrNoInstance = errors.New("a group member needs an instance name")

// Observer tails topics into a Store and derives findings.
type Observer struct {
	cfg     Config
	store   *Store
	client  *kgo.Client
	admin   *kadm.Client
	log     *slog.Logger
	metrics *metrics
	health  *healthState

	// changelogs are the changelog topics (name → partitions) whose sender
	// names are stored; only the goroutine probing the cluster (Run or
	// Scan) touches it.
	changelogs map[string]int32
	lagLog     lagLog

	mu       sync.Mutex // guards w, topics, assigned and the ingest path
	w        *writer
	topics   map[string]headers.TopicID // observed topic name → ID
	assigned map[headers.Channel]bool   // channels being consumed (without a group)

	// With Config.Group: the membership, and the client consuming the
	// observed topics as a member (client then reads the state topic and
	// publishes to it).
	shard *shard
	group *kgo.Client
}

// New returns an observer writing to store. It connects to the brokers
// lazily; Close releases the client (not the store).
func New(cfg Config, store *Store) (*Observer, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("observer: no brokers: set --brokers or PARSLEY_BROKERS")
	}
	if len(cfg.Topics) == 0 && cfg.Pattern == nil {
		return nil, fmt.Errorf("observer: no topics or pattern configured: %w", ErrNoTopics)
	}
	if cfg.Group != "" && cfg.Instance == "" {
		return nil, fmt.Errorf("observer: group %q: %w", cfg.Group, ErrNoInstance)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	iso := kgo.ReadCommitted()
	if cfg.ReadUncommitted {
		iso = kgo.ReadUncommitted()
	}
	// No consumer group and no producer: the observer reads partitions
	// directly and never commits or writes anything to the cluster.
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.FetchIsolationLevel(iso),
		kgo.KeepControlRecords(),
		kgo.MetadataMinAge(time.Second),
		kgo.FetchMaxWait(500 * time.Millisecond),
	}, cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("observer: connect to %v: %w", cfg.Brokers, err)
	}
	h := newHealthState(time.Now())
	o := &Observer{cfg: cfg, store: store, client: cl, admin: kadm.NewClient(cl), log: log, metrics: newMetrics(h, cfg.Instance), health: h,
		topics: map[string]headers.TopicID{}, assigned: map[headers.Channel]bool{}}
	if cfg.Group != "" {
		if store != nil {
			store.sharded = true
		}
		o.shard = newShard(o)
	}
	return o, nil
}

// Close closes the observer's Kafka clients. A shard stays a member of
// its group until its session times out, so a restart within it moves
// nothing.
func (o *Observer) Close() {
	o.mu.Lock()
	group := o.group
	o.mu.Unlock()
	if group != nil {
		group.CloseAllowingRebalance()
	}
	o.client.Close()
	o.mu.Lock()
	if o.w != nil {
		o.w.close()
	}
	o.mu.Unlock()
}

// Store returns the observer's store.
func (o *Observer) Store() *Store { return o.store }

// Collector returns the observer's Prometheus metrics, for the caller to
// register.
func (o *Observer) Collector() prometheus.Collector { return o.metrics }

// Health reports whether the observer can read the cluster, what it
// observes and how fresh its view of each topic is.
func (o *Observer) Health() Health { return o.health.get() }

// selectTopics lists the cluster's topics and returns those to observe.
// Configured names that do not exist, and a pattern that matches nothing,
// are an error wrapping ErrNoTopics; sel still holds what was found.
func (o *Observer) selectTopics(ctx context.Context) (sel kadm.TopicDetails, missing []string, err error) {
	all, err := o.admin.ListTopics(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("observer: list topics: %w", err)
	}
	if err := o.nameSenders(ctx, all); err != nil {
		return nil, nil, err
	}
	sel = kadm.TopicDetails{}
	for name, td := range all {
		if td.IsInternal || strings.HasPrefix(name, "__") {
			continue
		}
		if slices.Contains(o.cfg.Topics, name) || (o.cfg.Pattern != nil && o.cfg.Pattern.MatchString(name)) {
			if td.Err != nil {
				return nil, nil, fmt.Errorf("observer: topic %q: %w", name, td.Err)
			}
			sel[name] = td
		}
	}
	for _, name := range o.cfg.Topics {
		if _, ok := sel[name]; !ok {
			missing = append(missing, name)
			err = errors.Join(err, fmt.Errorf("observer: topic %q does not exist: %w", name, ErrNoTopics))
		}
	}
	if o.cfg.Pattern != nil && !slices.ContainsFunc(sel.Names(), o.cfg.Pattern.MatchString) {
		missing = append(missing, "pattern "+o.cfg.Pattern.String())
		err = errors.Join(err, fmt.Errorf("observer: pattern %q matches no topic: %w", o.cfg.Pattern, ErrNoTopics))
	}
	return sel, missing, err
}

// nameSenders stores the sender names the cluster's changelog topics
// imply (see senders.go) when they changed since the last listing.
func (o *Observer) nameSenders(ctx context.Context, all kadm.TopicDetails) error {
	cls := map[string]int32{}
	for name, td := range all {
		if strings.HasSuffix(name, changelogSuffix) && td.Err == nil {
			cls[name] = int32(len(td.Partitions))
		}
	}
	if maps.Equal(cls, o.changelogs) {
		return nil
	}
	if err := o.store.AddSenderNames(ctx, SenderNamesOf(cls)); err != nil {
		return err
	}
	o.changelogs = cls
	return nil
}

// assign starts consuming every partition of the selected topics not yet
// consumed, from its stored position or the configured start.
func (o *Observer) assign(ctx context.Context, sel kadm.TopicDetails) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.ensureWriter(ctx); err != nil {
		return err
	}
	var starts kadm.ListedOffsets
	add := map[string]map[int32]kgo.Offset{}
	for name, td := range sel {
		id := headers.TopicID(td.ID)
		if id.IsZero() {
			return fmt.Errorf("observer: topic %q has no topic ID (brokers older than Kafka 2.8 cannot carry causal claims)", name)
		}
		if old, ok := o.topics[name]; ok && old != id {
			// Deleted and recreated: a new incarnation, new channels. The
			// client forgets the old one so it consumes the new from the
			// start rather than from the old position.
			o.client.PurgeTopicsFromConsuming(name)
			o.log.Info("topic recreated", "topic", name, "old", old, "new", id)
		} else if !ok {
			o.log.Info("observing topic", "topic", name, "id", id, "partitions", len(td.Partitions))
		}
		o.topics[name] = id
		for p := range td.Partitions {
			ch := headers.Channel{Topic: id, Partition: p}
			if o.assigned[ch] {
				continue
			}
			o.assigned[ch] = true
			if cs, ok := o.w.chans[ch]; ok && cs.next >= 0 {
				if add[name] == nil {
					add[name] = map[int32]kgo.Offset{}
				}
				add[name][p] = kgo.NewOffset().At(cs.next)
				continue
			}
			if starts == nil {
				var err error
				switch {
				case !o.cfg.StartTime.IsZero():
					starts, err = o.admin.ListOffsetsAfterMilli(ctx, o.cfg.StartTime.UnixMilli(), sel.Names()...)
				case o.cfg.Start == FromEnd:
					starts, err = o.admin.ListEndOffsets(ctx, sel.Names()...)
				default:
					starts, err = o.admin.ListStartOffsets(ctx, sel.Names()...)
				}
				if err == nil {
					err = starts.Error()
				}
				if err != nil {
					return fmt.Errorf("observer: list start offsets: %w", err)
				}
			}
			lo, ok := starts.Lookup(name, p)
			if !ok {
				return fmt.Errorf("observer: no start offset for %q partition %d", name, p)
			}
			if err := o.w.markConsumed(ctx, ch, name, lo.Offset); err != nil {
				return err
			}
			if add[name] == nil {
				add[name] = map[int32]kgo.Offset{}
			}
			add[name][p] = kgo.NewOffset().At(lo.Offset)
		}
	}
	if len(add) > 0 {
		o.client.AddConsumePartitions(add)
	}
	return nil
}

// ensureWriter makes the store's writer. The caller holds o.mu.
func (o *Observer) ensureWriter(ctx context.Context) error {
	if o.w != nil {
		return nil
	}
	w, err := newWriter(ctx, o.store)
	if err != nil {
		return err
	}
	w.uncommitted, w.sharded = o.cfg.ReadUncommitted, o.shard != nil
	o.w = w
	return nil
}

// Poll fetches once and ingests what came back. It returns the number of
// records (markers included) stored.
func (o *Observer) poll(ctx context.Context) (int, error) {
	consumer := o.client
	if o.group != nil {
		consumer = o.group
		// A rebalance waits for the batch to be stored, so no record of a
		// channel is stored after the channel is let go.
		defer consumer.AllowRebalance()
	}
	// Wait at most a second for data, so the caller's loop keeps turning
	// (new topics, pruning) on a quiet cluster.
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	fs := consumer.PollRecords(pctx, 10000)
	cancel()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var batch []incoming
	var ferr, gerr error
	fs.EachError(func(t string, p int32, err error) {
		switch {
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		case t == "" && o.group != nil:
			// Not a partition's: the group's (joining it, or its session).
			gerr = err
		default:
			ferr = errors.Join(ferr, fmt.Errorf("observer: fetch %q partition %d: %w", t, p, err))
		}
	})
	if o.group != nil {
		if gerr != nil {
			gerr = fmt.Errorf("observer: group %q: %w", o.cfg.Group, gerr)
		}
		if o.health.setGroup(gerr) {
			if gerr != nil {
				o.log.Warn("cannot take part in the group", "err", gerr)
			} else {
				o.log.Info("taking part in the group", "group", o.cfg.Group)
			}
		}
	}
	if ferr != nil {
		// Health follows the probe, not single fetch errors: a partition's
		// error is logged here, and a cluster out of reach fails the next
		// probe.
		o.log.Warn("fetch error", "err", ferr)
	}
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	fs.EachTopic(func(t kgo.FetchTopic) {
		id, ok := o.topics[t.Topic]
		if tid := headers.TopicID(t.TopicID); !tid.IsZero() && tid != id {
			// A recreated topic: these records belong to the new incarnation.
			id, ok = tid, true
		}
		if !ok {
			return
		}
		for _, p := range t.Partitions {
			ch := headers.Channel{Topic: id, Partition: p.Partition}
			if p.Err == nil {
				o.health.fetched(now, t.Topic)
			}
			if len(p.Records) > 0 {
				o.metrics.lag.WithLabelValues(t.Topic, itoa(int64(p.Partition))).Set(float64(max(0, p.HighWatermark-lastOffset(p.Records)-1)))
			}
			for _, r := range p.Records {
				in := incoming{Channel: ch, Topic: r.Topic, Offset: r.Offset, Key: r.Key, Timestamp: r.Timestamp.UnixMilli(), Control: r.Attrs.IsControl(),
					Transactional: r.Attrs.IsTransactional(), ProducerID: r.ProducerID}
				if in.Control {
					// The key of a control record is version (int16), type (int16):
					// type 1 commits, 0 aborts.
					in.Commit = len(r.Key) >= 4 && r.Key[2] == 0 && r.Key[3] == 1
				}
				in.Headers = make([]headers.Header, len(r.Headers))
				for i, h := range r.Headers {
					in.Headers[i] = headers.Header(h)
				}
				batch = append(batch, in)
			}
		}
	})
	if len(batch) == 0 {
		return 0, nil
	}
	if err := o.ingest(ctx, batch); err != nil {
		if !errors.Is(err, errWriterFailed) {
			// The batch is not stored, and the client has moved past it:
			// fetch it again from the store's positions.
			o.rewind(consumer, batch)
		}
		return 0, err
	}
	return len(batch), nil
}

// rewind sets the fetch positions of the channels of a batch that was not
// stored back to the store's. The caller holds o.mu.
func (o *Observer) rewind(cl *kgo.Client, batch []incoming) {
	at := map[string]map[int32]kgo.EpochOffset{}
	for _, in := range batch {
		if at[in.Topic] == nil {
			at[in.Topic] = map[int32]kgo.EpochOffset{}
		}
		p := in.Channel.Partition
		if _, ok := at[in.Topic][p]; ok {
			continue
		}
		off := in.Offset // the batch's first record of the channel
		if cs, ok := o.w.chans[in.Channel]; ok && cs.next >= 0 {
			off = cs.next
		}
		at[in.Topic][p] = kgo.EpochOffset{Epoch: -1, Offset: off}
	}
	cl.SetOffsets(at)
}

// ingest stores a batch; a shard then owns the channels it has read up to
// their targets and publishes what the batch changed. The caller holds
// o.mu.
func (o *Observer) ingest(ctx context.Context, batch []incoming) error {
	if err := o.w.ingest(ctx, batch); err != nil {
		return err
	}
	o.metrics.ingested.Add(float64(len(batch)))
	if o.shard == nil {
		return nil
	}
	owned, err := o.w.promote(ctx)
	if err != nil {
		return err
	}
	for _, ch := range owned {
		o.log.Info("caught up", "topic", o.nameOf(ch.Topic), "partition", ch.Partition)
		if err := o.shard.publishAll(ctx, ch); err != nil {
			return err
		}
	}
	return o.shard.publishTouched(ctx, o.w)
}

func lastOffset(rs []*kgo.Record) int64 {
	if len(rs) == 0 {
		return -1
	}
	return rs[len(rs)-1].Offset
}

// Scan consumes every selected topic once, up to the last stable offsets
// (or high watermarks with ReadUncommitted) listed when it starts, and
// returns. It is what `parsley-observe scan` runs.
func (o *Observer) Scan(ctx context.Context) error {
	if o.shard != nil {
		return fmt.Errorf("observer: group %q: a shard only runs; scan reads every topic itself", o.cfg.Group)
	}
	sel, _, err := o.selectTopics(ctx)
	if err != nil {
		return err
	}
	var ends kadm.ListedOffsets
	if o.cfg.ReadUncommitted {
		ends, err = o.admin.ListEndOffsets(ctx, sel.Names()...)
	} else {
		ends, err = o.admin.ListCommittedOffsets(ctx, sel.Names()...)
	}
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("observer: list end offsets: %w", err)
	}
	if err := o.assign(ctx, sel); err != nil {
		return err
	}
	names := sel.Names()
	slices.Sort(names)
	o.health.setTopics(names, nil)
	o.health.set(time.Now(), nil)
	for !o.caughtUp(ends) {
		if _, err := o.poll(ctx); err != nil {
			return fmt.Errorf("observer: scan: %w", err)
		}
	}
	o.progress(ends)
	return nil
}

func (o *Observer) caughtUp(ends kadm.ListedOffsets) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	done := true
	ends.Each(func(lo kadm.ListedOffset) {
		id := o.topics[lo.Topic]
		cs, ok := o.w.chans[headers.Channel{Topic: id, Partition: lo.Partition}]
		if !ok || cs.next < lo.Offset {
			done = false
		}
	})
	return done
}

// Run tails the selected topics until ctx ends, probing the cluster every
// Refresh (new matching topics and partitions, end offsets, health) and
// pruning the store to its bounds every PruneEvery. While the cluster
// cannot be read, or no topic matches yet, it keeps retrying with backoff
// and says so in Health, the metrics and the log. It returns nil when ctx
// ends, and an error only when the store can no longer be written.
func (o *Observer) Run(ctx context.Context) error {
	if o.shard != nil {
		return o.runShard(ctx)
	}
	return o.tail(ctx)
}

// tail is Run's loop: it probes the cluster every Refresh, with backoff
// while it cannot be read; prunes and evaluates every PruneEvery; for a
// shard publishes its findings every second; and polls in between.
func (o *Observer) tail(ctx context.Context) error {
	refresh := cmp.Or(o.cfg.Refresh, 10*time.Second)
	prune := time.NewTicker(cmp.Or(o.cfg.PruneEvery, time.Minute))
	defer prune.Stop()
	var publish, evaluate <-chan time.Time
	if o.shard != nil {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		publish = t.C
		// The group's findings are only as fresh as the evaluations of the
		// shards recording them: a shard evaluates more often than it
		// prunes.
		e := time.NewTicker(min(shardEvaluateEvery, cmp.Or(o.cfg.PruneEvery, time.Minute)))
		defer e.Stop()
		evaluate = e.C
	}
	const minBackoff = time.Second
	backoff := min(minBackoff, refresh)
	var nextProbe time.Time
	for {
		if ctx.Err() != nil {
			return nil
		}
		if now := time.Now(); !now.Before(nextProbe) {
			err := o.probe(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, errWriterFailed):
				return err
			case err != nil:
				o.log.Warn("cannot read the cluster; retrying", "err", err, "in", backoff)
				nextProbe = time.Now().Add(backoff)
				backoff = min(2*backoff, max(refresh, minBackoff))
			default:
				backoff = min(minBackoff, refresh)
				nextProbe = time.Now().Add(refresh)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-prune.C:
			o.prune(ctx)
			if _, err := o.Findings(ctx); err != nil && ctx.Err() == nil {
				o.log.Warn("evaluate findings", "err", err)
			}
			if o.shard != nil {
				o.shard.publishWith(ctx, "publish pruned statistics", o.shard.publishPruned)
			}
		case <-publish:
			o.shard.publishWith(ctx, "publish findings", o.shard.publishFindings)
		case <-evaluate:
			if _, err := o.Findings(ctx); err != nil && ctx.Err() == nil {
				o.log.Warn("evaluate findings", "err", err)
			}
		default:
		}
		if !o.consuming() {
			// Nothing to fetch yet: wait for the next probe.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Until(nextProbe)):
			}
			continue
		}
		if _, err := o.poll(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, errWriterFailed) {
				return err
			}
			o.log.Error("ingest", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
}

// probeTimeout bounds one probe of the cluster.
const probeTimeout = 5 * time.Second

// probe reads the cluster's topics, starts consuming new ones, lists the
// end offsets of the observed ones and records the outcome in Health. A
// missing topic is logged, not an error: the observer waits for it.
func (o *Observer) probe(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err := o.probeOnce(pctx)
	if errors.Is(err, errWriterFailed) {
		return err
	}
	if o.health.set(time.Now(), err) {
		if err == nil {
			o.log.Info("reading the cluster", "topics", o.health.get().Topics)
		} else {
			o.log.Warn("cannot read the cluster", "err", err)
		}
	}
	return err
}

func (o *Observer) probeOnce(ctx context.Context) error {
	sel, missing, err := o.selectTopics(ctx)
	if err != nil && !errors.Is(err, ErrNoTopics) {
		return err
	}
	before := o.health.get().Missing
	if !slices.Equal(before, missing) && len(missing) > 0 {
		o.log.Warn("waiting for topics", "missing", missing)
	}
	if o.shard != nil {
		return o.probeShard(ctx, sel, missing)
	}
	names := sel.Names()
	slices.Sort(names)
	o.health.setTopics(names, missing)
	if len(sel) == 0 {
		return nil
	}
	if err := o.assign(ctx, sel); err != nil {
		return err
	}
	ends, err := o.endOffsets(ctx, names)
	if err != nil {
		return err
	}
	o.progress(ends)
	return nil
}

// endOffsets lists the log end offsets of topics.
func (o *Observer) endOffsets(ctx context.Context, topics []string) (kadm.ListedOffsets, error) {
	ends, err := o.admin.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("observer: list end offsets: %w", err)
	}
	return ends, nil
}

// progress publishes each partition's lag behind ends, marks topics read
// to their end as fresh, and logs how far behind the observer is.
func (o *Observer) progress(ends kadm.ListedOffsets) {
	now := time.Now()
	caughtUp := map[string]bool{}
	lagOf := map[string]int64{}
	var behind int64
	o.mu.Lock()
	ends.Each(func(lo kadm.ListedOffset) {
		if _, ok := caughtUp[lo.Topic]; !ok {
			caughtUp[lo.Topic] = true
		}
		cs, ok := o.w.chans[headers.Channel{Topic: o.topics[lo.Topic], Partition: lo.Partition}]
		if !ok || cs.next < 0 {
			caughtUp[lo.Topic] = false
			return
		}
		lag := max(0, lo.Offset-cs.next)
		o.metrics.lag.WithLabelValues(lo.Topic, itoa(int64(lo.Partition))).Set(float64(lag))
		behind += lag
		lagOf[lo.Topic] += lag
		if lag > 0 {
			caughtUp[lo.Topic] = false
		}
	})
	o.mu.Unlock()
	o.health.setLag(lagOf)
	for t, ok := range caughtUp {
		if ok {
			o.health.fetched(now, t)
		}
	}
	if msg, ok := o.lagLog.observe(behind); ok {
		o.log.Info(msg, "records behind", behind)
	}
}

// Lag logging: a live cluster always has a record or two in flight, so a
// lag is logged only when it is sustained — at least lagLogMin records
// behind at lagLogProbes probes in a row — and then again only when it
// has doubled or when the observer has caught up.
const (
	lagLogMin    = 1000
	lagLogProbes = 3
)

// lagLog decides which lag observations are worth a log line. Only the
// goroutine probing the cluster uses it.
type lagLog struct {
	streak int   // consecutive probes at or above lagLogMin
	logged int64 // the lag last logged; 0: none since caught up
}

// observe takes the lag at one probe and returns the line to log, if any.
func (l *lagLog) observe(behind int64) (string, bool) {
	if behind < lagLogMin {
		l.streak = 0
		if l.logged > 0 {
			l.logged = 0
			return "caught up", true
		}
		return "", false
	}
	l.streak++
	if l.streak < lagLogProbes || (l.logged > 0 && behind < 2*l.logged) {
		return "", false
	}
	msg := "catching up"
	if l.logged > 0 {
		msg = "falling behind"
	}
	l.logged = behind
	return msg, true
}

// consuming reports whether any partition is assigned; a shard's group
// assigns them while it polls.
func (o *Observer) consuming() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.assigned) > 0 || o.group != nil
}

func (o *Observer) prune(ctx context.Context) {
	if o.cfg.MaxAge <= 0 && o.cfg.MaxRecords <= 0 {
		return
	}
	var minTS int64
	if o.cfg.MaxAge > 0 {
		minTS = time.Now().Add(-o.cfg.MaxAge).UnixMilli()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if n, err := o.store.Prune(ctx, minTS, o.cfg.MaxRecords); err != nil {
		o.log.Warn("prune", "err", err)
	} else if n > 0 {
		o.log.Info("pruned records", "n", n)
	}
}

// Offsets returns the brokers' current log start, last stable and end
// offsets of every channel the store knows whose topic still exists.
func (o *Observer) Offsets(ctx context.Context) (map[headers.Channel]ChannelOffsets, error) {
	return ListOffsets(ctx, o.admin)
}

// ListOffsets asks the cluster for the log start, last stable and end
// offsets of every topic. A partition of a listed topic whose offsets the
// brokers did not give (a leader moving, say) is in the map as Unknown.
func ListOffsets(ctx context.Context, admin *kadm.Client) (map[headers.Channel]ChannelOffsets, error) {
	tds, err := admin.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("observer: list topics: %w", err)
	}
	names := tds.Names()
	out := map[headers.Channel]ChannelOffsets{}
	if len(names) == 0 {
		return out, nil
	}
	starts, err := admin.ListStartOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("observer: list start offsets: %w", err)
	}
	lsos, err := admin.ListCommittedOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("observer: list last stable offsets: %w", err)
	}
	hwms, err := admin.ListEndOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("observer: list end offsets: %w", err)
	}
	add := func(topic string, p int32) {
		td := tds[topic]
		if headers.TopicID(td.ID).IsZero() {
			return
		}
		ch := headers.Channel{Topic: headers.TopicID(td.ID), Partition: p}
		if _, ok := out[ch]; ok {
			return
		}
		end, ok1 := hwms.Lookup(topic, p)
		start, ok2 := starts.Lookup(topic, p)
		stable, ok3 := lsos.Lookup(topic, p)
		if !ok1 || !ok2 || !ok3 || end.Err != nil || start.Err != nil || stable.Err != nil {
			out[ch] = ChannelOffsets{Name: topic, Unknown: true}
			return
		}
		out[ch] = ChannelOffsets{Name: topic, Start: start.Offset, Stable: stable.Offset, End: end.Offset}
	}
	for _, td := range tds {
		for p := range td.Partitions {
			add(td.Topic, p)
		}
	}
	hwms.Each(func(lo kadm.ListedOffset) { add(lo.Topic, lo.Partition) })
	return out, nil
}

// Findings evaluates every finding against the brokers' current offsets,
// records the evaluation (new findings open, gone ones resolved, resolved
// ones past Config.ClosedRetention dropped) and publishes the counts of
// open findings as metrics. It is the one path that
// does both: Run's periodic evaluation and the web server call it.
func (o *Observer) Findings(ctx context.Context) ([]Finding, error) {
	offs, err := o.Offsets(ctx)
	if err != nil {
		if ctx.Err() == nil && o.health.set(time.Now(), err) {
			o.log.Warn("cannot read the cluster", "err", err)
		}
		return nil, fmt.Errorf("%w: %w", ErrClusterUnavailable, err)
	}
	if u := unknownChannels(offs); len(u) > 0 {
		o.log.Debug("offsets not listed; findings naming these channels are not judged now", "channels", u)
	}
	fs, err := o.store.evaluate(ctx, offs, time.Now(), o.cfg.ClosedRetention)
	if err != nil {
		return nil, err
	}
	if o.shard == nil {
		o.metrics.setFindings(fs)
	} else {
		o.metrics.setFindings(o.recorded(fs))
	}
	return fs, nil
}
