package observer

// Sharing the topics among observers: a group of shards.
//
// One observer reads every partition of the topics it observes and keeps
// them in one store. With Config.Group set, several observers share the
// topics as the members of one Kafka consumer group (cooperative-sticky
// balancing, static membership by Config.Instance): the group assigns
// each partition — each channel — to one member at a time, and each member
// (a shard) reads and stores only the channels assigned to it. What the
// shards need of each other they learn through a compacted Kafka topic of
// their own, the group's state topic (facts.go), never from each other:
//
//   - a channel's owner publishes what others need to judge findings about
//     several channels: the channel's consumed range and newest stamped
//     record (late-joiner windows), its holes (markers, aborted and
//     skipped offsets: unsettleable claims), its statistics runs
//     (partially stamped topics, stamp growth), and its partials
//     (partials.go);
//   - every finding has one anchor channel, and the anchor's owner records
//     it and publishes it, lifecycle and history included; every shard
//     keeps every finding as its recorder published it, so any shard's UI
//     and API list the whole group's findings;
//   - an acknowledgement taken by any shard is published, and applies
//     wherever the finding is in the same opening (epoch).
//
// Why nothing found is lost or raised twice when a channel moves (a
// rebalance, a shard killed with SIGKILL, a restart):
//
//   - Each channel is assigned to one member at a time (cooperative
//     rebalancing revokes before it assigns elsewhere), so each finding
//     has one recorder at a time, and its key is a pure function of the
//     records it names: whoever records it records the same finding.
//   - Before the new owner reads a channel it reads the state topic to
//     its end (a barrier), so it holds every finding anchored there, with
//     its lifecycle, as the former owner last published it; a former
//     owner revoked in good order publishes its final state before it
//     lets go. From then on it ignores facts about the channel from
//     anyone else, so a late one cannot overwrite its records.
//   - The new owner reads the channel itself, from where its own store
//     stopped or else from where the group first started reading it; the
//     findings about one record (a sequence gap, a regression) follow
//     from the records and the sender state they rebuild, so no gap is
//     missed, whether or not the former owner published it before it
//     died. A record at or below the highest offset already counted into
//     a finding (its hw) counts nothing, so reading a channel again counts
//     nothing twice.
//   - Until the new owner has read the channel up to the log end it had
//     when it was assigned, its store is not the truth for the channel
//     (channels.owned is 0): findings about the topic go on from the
//     former owner's published statistics, and findings anchored there are
//     neither resolved nor reopened, so a half-read channel cannot resolve
//     what holds, nor raise again what its former owner found.
//
// A shard killed with SIGKILL stays a static member until its session
// times out; then its channels move. One restarted within the session
// timeout gets its channels back, continues from its store, and nothing
// moves.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// shardEvaluateEvery is how often a shard evaluates findings (at most):
// what it records reaches the others' pages only through its evaluations.
const shardEvaluateEvery = 5 * time.Second

// touched is what an ingest batch changed that a shard publishes.
type touched struct {
	chans   map[int64]bool
	buckets map[statsKey]bool
	chunks  map[statsKey]bool // (channel, offset >> holeChunkBits)
}

func newTouched() touched {
	return touched{chans: map[int64]bool{}, buckets: map[statsKey]bool{}, chunks: map[statsKey]bool{}}
}

// holes notes that the holes of offsets from..to of channel ch changed.
func (t *touched) holes(ch, from, to int64) {
	if t.chunks == nil {
		return
	}
	for c := from >> holeChunkBits; c <= to>>holeChunkBits; c++ {
		t.chunks[statsKey{ch, c}] = true
	}
}

func (t *touched) reset() {
	clear(t.chans)
	clear(t.buckets)
	clear(t.chunks)
}

// shard is an Observer's membership in a group (Config.Group).
type shard struct {
	o     *Observer
	topic string // the state topic
	log   *slog.Logger
	facts factLog

	mu      sync.Mutex
	changed *sync.Cond
	read    int64 // the state topic is applied below this offset
	readErr error

	// Owned by the goroutine running the observer.
	published time.Time                 // when finding and partial facts were last compared
	chanNext  map[headers.Channel]int64 // the position each channel fact was published at
}

// DefaultStateTopic is the state topic of group: the facts its shards
// share. Its leading "__" keeps it out of any pattern's topics.
func DefaultStateTopic(group string) string { return "__parsley-observe-" + group }

func newShard(o *Observer) *shard {
	s := &shard{o: o, topic: o.cfg.StateTopic, log: o.log, chanNext: map[headers.Channel]int64{}}
	if s.topic == "" {
		s.topic = DefaultStateTopic(o.cfg.Group)
	}
	s.changed = sync.NewCond(&s.mu)
	s.facts = topicLog{cl: o.client, topic: s.topic, log: o.log}
	return s
}

// start creates the state topic if missing, forgets the store's last view
// of the group (it is read again from the topic) and starts reading it.
func (s *shard) start(ctx context.Context) error {
	resp, err := s.o.admin.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, s.topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("observer: create the group's state topic %q: %w", s.topic, err)
	}
	if err := s.o.store.resetMirror(ctx); err != nil {
		return err
	}
	s.o.client.AddConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: {0: kgo.NewOffset().AtStart()}})
	return nil
}

// mirror applies the state topic to the store until ctx ends.
func (s *shard) mirror(ctx context.Context) {
	for {
		fs := s.o.client.PollFetches(ctx)
		if ctx.Err() != nil {
			s.fail(ctx.Err())
			return
		}
		var batch []fact
		var next int64 = -1
		fs.EachError(func(t string, p int32, err error) {
			s.log.Warn("read the group's state topic", "topic", t, "err", err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			if r.Topic != s.topic {
				return
			}
			f := fact{key: string(r.Key), value: r.Value}
			if len(r.Value) == 0 {
				f.value = nil
			}
			for _, h := range r.Headers {
				if h.Key == factOwnerKey {
					f.owner = string(h.Value)
				}
			}
			batch = append(batch, f)
			next = r.Offset + 1
		})
		if len(batch) > 0 {
			if err := s.o.store.applyFacts(ctx, batch); err != nil {
				if ctx.Err() == nil {
					s.log.Error("apply the group's state", "err", err)
				}
				s.fail(err)
				return
			}
		}
		if next >= 0 {
			s.mu.Lock()
			s.read = next
			s.changed.Broadcast()
			s.mu.Unlock()
		}
	}
}

func (s *shard) fail(err error) {
	s.mu.Lock()
	s.readErr = err
	s.changed.Broadcast()
	s.mu.Unlock()
}

// barrier returns once the state topic is applied up to its end as of
// the call: every fact published before then is in the store.
func (s *shard) barrier(ctx context.Context) error {
	end, err := s.stateEnd(ctx)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.changed.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.read < end {
		if s.readErr != nil {
			return fmt.Errorf("observer: read the group's state topic: %w", s.readErr)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		s.changed.Wait()
	}
	return nil
}

// stateEnd returns the end offset of the state topic. Errors a broker
// gives while a topic's metadata is still spreading over the cluster (a
// state topic just created, a leader moving: retriable ones) are waited
// out until ctx ends.
func (s *shard) stateEnd(ctx context.Context) (int64, error) {
	var end int64
	err := retryRetriable(ctx, s.log, "cannot list the end of the group's state topic", func() error {
		ends, err := s.o.admin.ListEndOffsets(ctx, s.topic)
		if err == nil {
			err = ends.Error()
		}
		lo, ok := ends.Lookup(s.topic, 0)
		if err == nil && !ok {
			err = kerr.UnknownTopicOrPartition
		}
		end = lo.Offset
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("observer: end of the group's state topic: %w", err)
	}
	return end, nil
}

// retryRetriable calls try until it returns nil or an error a broker
// does not call retriable, or ctx ends, backing off from 100 ms to 5 s:
// a topic just created, or a leader moving, is waited out, not failed on.
func retryRetriable(ctx context.Context, log *slog.Logger, what string, try func() error) error {
	backoff := 100 * time.Millisecond
	for {
		err := try()
		if err == nil || !kerr.IsRetriable(err) || ctx.Err() != nil {
			return err
		}
		log.Warn(what+"; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// factLog is where a shard publishes facts: the group's state topic (a
// test's log in memory).
type factLog interface {
	// Produce writes a fact of owner, in order; a nil value deletes it.
	Produce(ctx context.Context, key, owner string, value []byte)
	// Flush returns once every fact produced is written.
	Flush(ctx context.Context) error
}

// topicLog is the group's state topic as a factLog.
type topicLog struct {
	cl    *kgo.Client
	topic string
	log   *slog.Logger
}

func (l topicLog) Produce(ctx context.Context, key, owner string, value []byte) {
	r := &kgo.Record{Topic: l.topic, Partition: 0, Key: []byte(key), Value: value,
		Headers: []kgo.RecordHeader{{Key: factOwnerKey, Value: []byte(owner)}}}
	l.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
		if err != nil && ctx.Err() == nil {
			l.log.Warn("publish to the group's state topic", "key", string(r.Key), "err", err)
		}
	})
}

func (l topicLog) Flush(ctx context.Context) error {
	if err := l.cl.Flush(ctx); err != nil {
		return fmt.Errorf("observer: publish to the group's state topic: %w", err)
	}
	return nil
}

// produce writes a fact; a nil value deletes it.
func (s *shard) produce(ctx context.Context, key string, value []byte) {
	s.facts.Produce(ctx, key, s.o.cfg.Instance, value)
}

// flush waits until every fact produced so far is written.
func (s *shard) flush(ctx context.Context) error { return s.facts.Flush(ctx) }

// announce publishes this shard's URL.
func (s *shard) announce(ctx context.Context) error {
	v, err := json.Marshal(memberFact{URL: s.o.cfg.AdvertiseURL, At: nowMilli()})
	if err != nil {
		return err
	}
	s.produce(ctx, factMember+s.o.cfg.Instance, v)
	return s.flush(ctx)
}

// publishTouched publishes what an ingest batch changed of the channels
// owned here: statistics runs, holes, small channels' record parts, and
// channel facts. A channel still catching up publishes nothing: what it
// would say is half of what its former owner said, and would make the
// others judge the channel as if it were half as long. The caller holds
// o.mu.
func (s *shard) publishTouched(ctx context.Context, w *writer) error {
	byID := map[int64]*chanState{}
	for _, cs := range w.chans {
		byID[cs.id] = cs
	}
	for k := range w.touched.buckets {
		if cs := byID[k.ch]; cs == nil || !cs.owned {
			continue
		}
		v, err := s.o.store.runFactOf(ctx, k.ch, k.bucket)
		if err != nil {
			return err
		}
		s.produce(ctx, factRun+byID[k.ch].ch.String()+"|"+strconv.FormatInt(k.bucket, 10), v)
	}
	for k := range w.touched.chunks {
		if cs := byID[k.ch]; cs == nil || !cs.owned {
			continue
		}
		v, err := s.o.store.holesFactOf(ctx, k.ch, k.bucket)
		if err != nil {
			return err
		}
		s.produce(ctx, factHoles+byID[k.ch].ch.String()+"|"+strconv.FormatInt(k.bucket, 10), v)
	}
	for id := range w.touched.chans {
		cs := byID[id]
		if cs == nil || !cs.owned {
			continue
		}
		v, err := s.o.store.fineFactOf(ctx, id)
		if err != nil {
			return err
		}
		key := factFine + cs.ch.String()
		if v != nil || s.wasPublished(ctx, key) {
			s.produce(ctx, key, v)
		}
		if err := s.publishChannel(ctx, cs.ch, false); err != nil {
			return err
		}
	}
	w.touched.reset()
	return nil
}

// publishAll publishes every fact of channel ch, which this shard has
// just come to own: its statistics runs, holes, record parts and channel
// fact. The caller holds o.mu.
func (s *shard) publishAll(ctx context.Context, ch headers.Channel) error {
	cs := s.o.w.chans[ch]
	if cs == nil {
		return nil
	}
	st := s.o.store
	buckets, err := st.int64s(ctx, `SELECT bucket FROM chan_stats WHERE ch = ?`, cs.id)
	if err != nil {
		return err
	}
	for _, b := range buckets {
		v, err := st.runFactOf(ctx, cs.id, b)
		if err != nil {
			return err
		}
		s.produce(ctx, factRun+ch.String()+"|"+strconv.FormatInt(b, 10), v)
	}
	chunks, err := st.int64s(ctx, `SELECT DISTINCT off >> `+strconv.Itoa(holeChunkBits)+` FROM records WHERE ch = ? AND kind IN `+sqlHoleKinds+`
		UNION SELECT DISTINCT from_off >> `+strconv.Itoa(holeChunkBits)+` FROM gaps WHERE ch = ?`, cs.id, cs.id)
	if err != nil {
		return err
	}
	for _, c := range chunks {
		v, err := st.holesFactOf(ctx, cs.id, c)
		if err != nil {
			return err
		}
		s.produce(ctx, factHoles+ch.String()+"|"+strconv.FormatInt(c, 10), v)
	}
	v, err := st.fineFactOf(ctx, cs.id)
	if err != nil {
		return err
	}
	if key := factFine + ch.String(); v != nil || s.wasPublished(ctx, key) {
		s.produce(ctx, key, v)
	}
	return s.publishChannel(ctx, ch, true)
}

// wasPublished reports whether the state topic holds key as this shard's.
func (s *shard) wasPublished(ctx context.Context, key string) bool {
	var owner string
	s.o.store.db.QueryRowContext(ctx, `SELECT owner FROM facts WHERE key = ?`, key).Scan(&owner)
	return owner == s.o.cfg.Instance
}

// publishChannel publishes ch's channel fact when its position moved
// since the last one, or always with force.
func (s *shard) publishChannel(ctx context.Context, ch headers.Channel, force bool) error {
	v, err := s.o.store.channelFactOf(ctx, ch)
	if err != nil {
		return err
	}
	var next int64
	if cs := s.o.w.chans[ch]; cs != nil {
		next = cs.next
	}
	if last, ok := s.chanNext[ch]; ok && last == next && !force {
		return nil
	}
	s.chanNext[ch] = next
	s.produce(ctx, factChannel+ch.String(), v)
	return nil
}

// publishFindings publishes the findings anchored at, and the partials of,
// the channels owned here that differ from what the state topic holds
// from this shard, and deletes those it holds from this shard that are
// gone (a finding past its retention). A finding's last_seen alone is
// published at most every ten minutes.
func (s *shard) publishFindings(ctx context.Context) error {
	now, err := s.o.store.ownFacts(ctx)
	if err != nil {
		return err
	}
	was, err := s.o.store.publishedFacts(ctx, s.o.cfg.Instance, factFinding, factPartial)
	if err != nil {
		return err
	}
	for k, v := range now {
		if old, ok := was[k]; !ok || !sameFact(k, old, v) {
			s.produce(ctx, k, v)
		}
	}
	owned := map[string]bool{}
	for ch, cs := range s.o.w.chans {
		if cs.owned {
			owned[ch.String()] = true
		}
	}
	for k := range was {
		if _, ok := now[k]; ok {
			continue
		}
		// Only what is still this shard's to record: a finding or partial
		// of a channel that moved is its new owner's.
		if ch := factChannelOf(ctx, s.o.store, k); owned[ch] {
			s.produce(ctx, k, nil)
		}
	}
	s.published = time.Now()
	return nil
}

// factChannelOf returns the channel a finding or partial fact belongs to:
// a partial's source, a finding's anchor.
func factChannelOf(ctx context.Context, st *Store, key string) string {
	if rest, ok := strings.CutPrefix(key, factPartial); ok {
		ch, _, _ := strings.Cut(rest, "|")
		return ch
	}
	var anchor string
	st.db.QueryRowContext(ctx, `SELECT anchor FROM findings WHERE key = ?`, key[len(factFinding):]).Scan(&anchor)
	return anchor
}

// sameFact reports whether a fact's new value says what its old one did;
// for a finding, a last_seen less than ten minutes apart is the same.
func sameFact(key string, old, v []byte) bool {
	if string(old) == string(v) {
		return true
	}
	if _, ok := strings.CutPrefix(key, factFinding); !ok {
		return false
	}
	var a, b findingFact
	if json.Unmarshal(old, &a) != nil || json.Unmarshal(v, &b) != nil {
		return false
	}
	if d := a.Last - b.Last; d > 10*60*1000 || d < -10*60*1000 {
		return false
	}
	a.Last, b.Last = 0, 0
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// publishPruned deletes the statistics runs and holes of the channels
// assigned here that pruning removed from the store.
func (s *shard) publishPruned(ctx context.Context) error {
	was, err := s.o.store.publishedFacts(ctx, s.o.cfg.Instance, factRun, factHoles)
	if err != nil {
		return err
	}
	for k := range was {
		kind, rest, _ := strings.Cut(k, "|")
		chText, sub, _ := strings.Cut(rest, "|")
		ch, err := parseChannel(chText)
		if err != nil {
			continue
		}
		cs := s.o.w.chans[ch]
		if cs == nil || !cs.assigned {
			continue
		}
		n, _ := strconv.ParseInt(sub, 10, 64)
		var v []byte
		if kind+"|" == factRun {
			v, err = s.o.store.runFactOf(ctx, cs.id, n)
		} else {
			v, err = s.o.store.holesFactOf(ctx, cs.id, n)
		}
		if err != nil {
			return err
		}
		if v == nil {
			s.produce(ctx, k, nil)
		}
	}
	return nil
}

// groupClient returns the client that consumes the observed topics as a
// member of the group.
func (o *Observer) groupClient() (*kgo.Client, error) {
	var subs []string
	for _, t := range o.cfg.Topics {
		subs = append(subs, "^"+regexp.QuoteMeta(t)+"$")
	}
	if o.cfg.Pattern != nil {
		subs = append(subs, o.cfg.Pattern.String())
	}
	iso := kgo.ReadCommitted()
	if o.cfg.ReadUncommitted {
		iso = kgo.ReadUncommitted()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.cfg.Brokers...),
		kgo.ConsumerGroup(o.cfg.Group),
		kgo.InstanceID(o.cfg.Instance),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeRegex(),
		kgo.ConsumeTopics(subs...),
		// Internal topics, the group's own state topic among them (or
		// whatever it is called), are never observed.
		kgo.ConsumeExcludeTopics("^__.*", "^"+regexp.QuoteMeta(o.shard.topic)+"$"),
		// Positions are the store's: nothing is committed.
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.AdjustFetchOffsetsFn(o.take),
		kgo.OnPartitionsRevoked(o.revoked),
		kgo.OnPartitionsLost(o.lost),
		kgo.FetchIsolationLevel(iso),
		kgo.KeepControlRecords(),
		kgo.MetadataMinAge(time.Second),
		kgo.FetchMaxWait(500 * time.Millisecond),
	}
	if o.cfg.SessionTimeout > 0 {
		// A rebalance waits for the members to rejoin for at most the
		// rebalance timeout; a shard rejoins within milliseconds (a revoke
		// waits at most for the batch being stored), so the session
		// timeout bounds it too, and a shard killed costs the others one
		// session timeout and no more than another while the group
		// settles, not franz-go's default minute.
		opts = append(opts, kgo.SessionTimeout(o.cfg.SessionTimeout), kgo.RebalanceTimeout(o.cfg.SessionTimeout),
			kgo.HeartbeatInterval(max(100*time.Millisecond, o.cfg.SessionTimeout/10)))
	}
	cl, err := kgo.NewClient(append(opts, o.cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("observer: join group %q: %w", o.cfg.Group, err)
	}
	return cl, nil
}

// take takes the channels the group assigns: after the state topic is
// read to its end, each is marked assigned and read from the store's
// position, else from where the group first read it, else from the
// configured start. It is owned once read up to its log end of now.
func (o *Observer) take(ctx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	if err := o.shard.barrier(ctx); err != nil {
		return nil, err
	}
	var takes []takeSpec
	err := retryRetriable(ctx, o.log, "cannot list the assigned partitions' offsets", func() (err error) {
		takes, err = o.takeSpecs(ctx, offs)
		return err
	})
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	pos, err := o.takeChannels(ctx, takes)
	if err != nil {
		return nil, err
	}
	out := map[string]map[int32]kgo.Offset{}
	for i, t := range takes {
		if out[t.name] == nil {
			out[t.name] = map[int32]kgo.Offset{}
		}
		out[t.name][t.ch.Partition] = kgo.NewOffset().At(pos[i])
	}
	o.healthTopics()
	return out, nil
}

// takeSpecs lists the offsets of the partitions the group assigns.
func (o *Observer) takeSpecs(ctx context.Context, offs map[string]map[int32]kgo.Offset) ([]takeSpec, error) {
	names := slices.Sorted(maps.Keys(offs))
	tds, err := o.admin.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("observer: assigned topics: %w", err)
	}
	var ends kadm.ListedOffsets
	if o.cfg.ReadUncommitted {
		ends, err = o.admin.ListEndOffsets(ctx, names...)
	} else {
		ends, err = o.admin.ListCommittedOffsets(ctx, names...)
	}
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("observer: end offsets of the assigned topics: %w", err)
	}
	logStarts, err := o.admin.ListStartOffsets(ctx, names...)
	if err == nil {
		err = logStarts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("observer: start offsets of the assigned topics: %w", err)
	}
	var firsts kadm.ListedOffsets
	if !o.cfg.StartTime.IsZero() {
		if firsts, err = o.admin.ListOffsetsAfterMilli(ctx, o.cfg.StartTime.UnixMilli(), names...); err != nil {
			return nil, fmt.Errorf("observer: start offsets of the assigned topics: %w", err)
		}
	}
	var takes []takeSpec
	for _, name := range names {
		td, ok := tds[name]
		if !ok || headers.TopicID(td.ID).IsZero() {
			return nil, fmt.Errorf("observer: assigned topic %q has no topic ID", name)
		}
		for p := range offs[name] {
			t := takeSpec{ch: headers.Channel{Topic: headers.TopicID(td.ID), Partition: p}, name: name}
			end, _ := ends.Lookup(name, p)
			logStart, _ := logStarts.Lookup(name, p)
			t.logStart, t.end = logStart.Offset, end.Offset
			switch {
			case firsts != nil:
				lo, _ := firsts.Lookup(name, p)
				t.start = lo.Offset
			case o.cfg.Start == FromEnd:
				t.start = end.Offset
			default:
				t.start = logStart.Offset
			}
			takes = append(takes, t)
		}
	}
	return takes, nil
}

// takeSpec is a channel the group assigned, with its offsets now: the
// log start, the end a read_committed reader reaches, and where the
// configuration starts a channel nobody read before.
type takeSpec struct {
	ch                   headers.Channel
	name                 string
	logStart, end, start int64
}

// takeChannels marks the channels of takes assigned here, after the state
// topic is read to its end, and returns where to read each: the store's
// position, else where the group first read it (or the log start, if
// later), else the configured start. Each is owned once read up to its
// end of now. The caller holds o.mu.
func (o *Observer) takeChannels(ctx context.Context, takes []takeSpec) ([]int64, error) {
	if err := o.ensureWriter(ctx); err != nil {
		return nil, err
	}
	pos := make([]int64, len(takes))
	for i, t := range takes {
		o.topics[t.name] = t.ch.Topic
		if cs, ok := o.w.chans[t.ch]; ok && cs.next >= 0 {
			pos[i] = cs.next
		} else if first := o.store.groupStart(ctx, t.ch); first >= 0 {
			pos[i] = max(first, t.logStart)
		} else {
			pos[i] = t.start
		}
		if err := o.w.assign(ctx, t.ch, t.name, pos[i], t.end); err != nil {
			return nil, err
		}
		o.log.Info("assigned", "topic", t.name, "partition", t.ch.Partition, "from", pos[i], "catch up to", t.end)
	}
	if err := o.w.loadPartials(ctx); err != nil {
		return nil, err
	}
	for _, t := range takes {
		if o.w.chans[t.ch].owned {
			if err := o.shard.publishAll(ctx, t.ch); err != nil {
				return nil, err
			}
		}
	}
	return pos, nil
}

// revoked lets channels go: this shard's last word on them is published
// first, so the next owner starts from it.
func (o *Observer) revoked(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	o.release(ctx, lost, true)
}

// lost lets channels go after a fatal group error, which may leave nothing
// to publish through.
func (o *Observer) lost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	o.release(ctx, lost, false)
}

func (o *Observer) release(ctx context.Context, gone map[string][]int32, publish bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.w == nil {
		return
	}
	var chs []headers.Channel
	for name, ps := range gone {
		id, ok := o.topics[name]
		if !ok {
			continue
		}
		for _, p := range ps {
			chs = append(chs, headers.Channel{Topic: id, Partition: p})
		}
	}
	if len(chs) > 0 {
		o.releaseChannels(ctx, chs, publish)
	}
}

// releaseChannels lets chs go, first publishing this shard's last word on
// those it owns when publish is set. The caller holds o.mu.
func (o *Observer) releaseChannels(ctx context.Context, chs []headers.Channel, publish bool) {
	if publish {
		ctx := context.WithoutCancel(ctx) // a close revokes too, with its context ended
		for _, ch := range chs {
			if cs := o.w.chans[ch]; cs == nil || !cs.owned {
				continue // still catching up: its former owner's word stands
			}
			if err := o.shard.publishChannel(ctx, ch, true); err != nil {
				o.log.Warn("publish a revoked channel", "channel", ch, "err", err)
			}
		}
		if err := o.shard.publishFindings(ctx); err != nil {
			o.log.Warn("publish findings before a revoke", "err", err)
		}
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := o.shard.flush(fctx); err != nil {
			o.log.Warn("publish before a revoke", "err", err)
		}
		cancel()
	}
	if err := o.w.release(context.WithoutCancel(ctx), chs); err != nil {
		o.log.Error("release channels", "err", err)
	}
	if err := o.store.remirror(context.WithoutCancel(ctx), chs); err != nil {
		o.log.Error("release channels", "err", err)
	}
	for _, ch := range chs {
		delete(o.shard.chanNext, ch)
		o.metrics.lag.DeletePartialMatch(map[string]string{"partition": strconv.Itoa(int(ch.Partition)), "topic": o.nameOf(ch.Topic)})
		o.log.Info("revoked", "topic", o.nameOf(ch.Topic), "partition", ch.Partition)
	}
	o.healthTopics()
}

// nameOf returns an observed topic's name. The caller holds o.mu.
func (o *Observer) nameOf(id headers.TopicID) string {
	for name, t := range o.topics {
		if t == id {
			return name
		}
	}
	return id.String()
}

// healthTopics makes Health list the topics with a channel assigned here:
// a shard vouches for what it reads. The caller holds o.mu.
func (o *Observer) healthTopics() {
	seen := map[string]bool{}
	for ch, cs := range o.w.chans {
		if cs.assigned {
			seen[o.nameOf(ch.Topic)] = true
		}
	}
	o.health.setTopics(slices.Sorted(maps.Keys(seen)), o.health.get().Missing)
}

// groupStart returns the offset the group first read ch from, as its
// owners published it, or -1.
func (s *Store) groupStart(ctx context.Context, ch headers.Channel) int64 {
	var start int64 = -1
	s.db.QueryRowContext(ctx, `SELECT rc.start_off FROM remote_channels rc JOIN channels c ON c.id = rc.ch WHERE c.topic = ? AND c.part = ?`,
		ch.Topic[:], ch.Partition).Scan(&start)
	return start
}

// assign marks ch assigned here, reading from pos, and owned once read to
// target; a channel without a position starts at pos.
func (w *writer) assign(ctx context.Context, ch headers.Channel, name string, pos, target int64) (err error) {
	if err := w.markConsumed(ctx, ch, name, pos); err != nil {
		return err
	}
	cs := w.chans[ch]
	cs.assigned = true
	w.targets[ch] = target
	cs.owned = cs.next >= target
	if _, err := w.c.ExecContext(ctx, `UPDATE channels SET assigned = 1, owned = ? WHERE id = ?`, cs.owned, cs.id); err != nil {
		return fmt.Errorf("observer: assign %s: %w", ch, err)
	}
	return nil
}

// release marks channels neither assigned nor owned here.
func (w *writer) release(ctx context.Context, chs []headers.Channel) error {
	for _, ch := range chs {
		cs := w.chans[ch]
		if cs == nil {
			continue
		}
		cs.assigned, cs.owned = false, false
		delete(w.targets, ch)
		if _, err := w.c.ExecContext(ctx, `UPDATE channels SET assigned = 0, owned = 0 WHERE id = ?`, cs.id); err != nil {
			return fmt.Errorf("observer: release %s: %w", ch, err)
		}
	}
	return nil
}

// promote marks owned the assigned channels read up to their target, and
// returns them.
func (w *writer) promote(ctx context.Context) ([]headers.Channel, error) {
	var out []headers.Channel
	for ch, cs := range w.chans {
		if !cs.assigned || cs.owned || cs.next < w.targets[ch] {
			continue
		}
		if _, err := w.c.ExecContext(ctx, `UPDATE channels SET owned = 1 WHERE id = ?`, cs.id); err != nil {
			return out, fmt.Errorf("observer: own %s: %w", ch, err)
		}
		cs.owned = true
		out = append(out, ch)
	}
	return out, nil
}

// runShard is Run for a member of a group: it reads the state topic,
// joins the group, and tails the channels the group assigns, publishing
// what others need of them.
func (o *Observer) runShard(ctx context.Context) error {
	refresh := cmp.Or(o.cfg.Refresh, 10*time.Second)
	const minBackoff = time.Second
	backoff := min(minBackoff, refresh)
	// Until the state topic can be made and read, nothing else can be.
	for {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := o.shard.start(pctx)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if o.health.set(time.Now(), err) {
			o.log.Warn("cannot read the cluster", "err", err)
		}
		o.log.Warn("cannot reach the group's state topic; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, max(refresh, minBackoff))
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Go(func() { o.shard.mirror(mctx) })
	if err := o.shard.barrier(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := o.shard.announce(ctx); err != nil {
		o.log.Warn("announce this shard", "err", err)
	}
	gcl, err := o.groupClient()
	if err != nil {
		return err
	}
	o.mu.Lock()
	o.group = gcl
	o.mu.Unlock()
	o.log.Info("joined group", "group", o.cfg.Group, "instance", o.cfg.Instance, "state topic", o.shard.topic)
	return o.tail(ctx)
}

// publishWith runs publish under o.mu once the writer exists, logging why
// it failed.
func (s *shard) publishWith(ctx context.Context, what string, publish func(context.Context) error) {
	s.o.mu.Lock()
	defer s.o.mu.Unlock()
	if s.o.w == nil {
		return
	}
	if err := publish(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn(what, "err", err)
	}
}

// probeShard is probeOnce for a member of a group: the topics and their
// partition counts, names, and the lag of the channels assigned here.
func (o *Observer) probeShard(ctx context.Context, sel kadm.TopicDetails, missing []string) error {
	parts := map[headers.TopicID]int32{}
	for _, td := range sel {
		parts[headers.TopicID(td.ID)] = int32(len(td.Partitions))
	}
	o.mu.Lock()
	if err := o.ensureWriter(ctx); err != nil {
		o.mu.Unlock()
		return err
	}
	// Placement judges a record against its topic's partition count,
	// which a shard reading a few partitions cannot count itself.
	o.w.place.meta = parts
	var names []string
	for ch, cs := range o.w.chans {
		if cs.assigned {
			names = append(names, o.nameOf(ch.Topic))
		}
	}
	o.healthTopics()
	o.mu.Unlock()
	o.health.setTopics(o.health.get().Topics, missing)
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	if len(names) == 0 {
		return nil
	}
	ends, err := o.endOffsets(ctx, names)
	if err != nil {
		return err
	}
	// Only the assigned partitions' lag is this shard's to report.
	mine := kadm.ListedOffsets{}
	o.mu.Lock()
	ends.Each(func(lo kadm.ListedOffset) {
		if cs := o.w.chans[headers.Channel{Topic: o.topics[lo.Topic], Partition: lo.Partition}]; cs != nil && cs.assigned {
			if mine[lo.Topic] == nil {
				mine[lo.Topic] = map[int32]kadm.ListedOffset{}
			}
			mine[lo.Topic][lo.Partition] = lo
		}
	})
	o.mu.Unlock()
	o.progress(mine)
	return nil
}

// recorded returns the findings this shard records: those anchored at the
// channels assigned to it. Each finding is counted by one shard, so the
// group's metrics add up. It also publishes how many partitions are
// assigned here.
func (o *Observer) recorded(fs []Finding) []Finding {
	o.mu.Lock()
	assigned := map[string]bool{}
	var reading, catching int
	if o.w != nil {
		for ch, cs := range o.w.chans {
			if !cs.assigned {
				continue
			}
			assigned[ch.String()] = true
			if cs.owned {
				reading++
			} else {
				catching++
			}
		}
	}
	o.mu.Unlock()
	o.metrics.partitions.WithLabelValues("reading").Set(float64(reading))
	o.metrics.partitions.WithLabelValues("catching_up").Set(float64(catching))
	var out []Finding
	for _, f := range fs {
		if assigned[f.anchor] {
			out = append(out, f)
		}
	}
	return out
}

// Acknowledge records that by knows about finding id, and why, as
// Store.Acknowledge does; a shard of a group also publishes it to the
// group, so the shard recording the finding and every other shard apply
// it. It returns the finding as it is now.
func (o *Observer) Acknowledge(ctx context.Context, id int64, by, reason string) (Finding, error) {
	f, err := o.store.Acknowledge(ctx, id, by, reason)
	if err != nil || o.shard == nil {
		return f, err
	}
	var epoch int64
	if err := o.store.db.QueryRowContext(ctx, `SELECT epoch FROM findings WHERE id = ?`, id).Scan(&epoch); err != nil {
		return f, fmt.Errorf("observer: acknowledge finding %d: %w", id, err)
	}
	v, err := json.Marshal(ackFact{By: f.Ack.By, Reason: f.Ack.Reason, At: f.Ack.At.UnixMilli(), Epoch: epoch})
	if err != nil {
		return f, err
	}
	o.shard.produce(ctx, factAck+f.Key, v)
	if err := o.shard.flush(ctx); err != nil {
		return f, fmt.Errorf("observer: acknowledge finding %d: publish to the group: %w", id, err)
	}
	return f, nil
}

// Shard is one member of an observer's group, as the group's state topic
// and the cluster's group coordinator describe it.
type Shard struct {
	// Instance is the shard's static member name; URL where its web UI
	// answers, as it announced it.
	Instance string `json:"instance"`
	URL      string `json:"url,omitempty"`
	// Self marks the shard answering.
	Self bool `json:"self,omitempty"`
	// Live: the group coordinator lists the shard as a member now. A shard
	// killed is listed until its session times out; its partitions then
	// move to the others.
	Live bool `json:"live"`
	// Partitions are the partitions the shard last said it reads, as
	// "topic/partition".
	Partitions []string `json:"partitions"`
}

// Shards describes the members of the observer's group: from the state
// topic, what each announced and the partitions it publishes for (this
// shard's own: what it is assigned now), and from the group coordinator
// which are members now. Without a group it returns nil.
func (o *Observer) Shards(ctx context.Context) ([]Shard, error) {
	if o.shard == nil {
		return nil, nil
	}
	members, err := o.store.members(ctx)
	if err != nil {
		return nil, err
	}
	byInstance := map[string]*Shard{}
	get := func(i string) *Shard {
		s, ok := byInstance[i]
		if !ok {
			s = &Shard{Instance: i, URL: members[i], Self: i == o.cfg.Instance, Partitions: []string{}}
			byInstance[i] = s
		}
		return s
	}
	for i := range members {
		get(i)
	}
	rows, err := o.store.db.QueryContext(ctx, `SELECT CASE WHEN c.assigned THEN ? ELSE rc.owner END, c.name, c.part
		FROM channels c LEFT JOIN remote_channels rc ON rc.ch = c.id WHERE c.assigned OR rc.owner IS NOT NULL ORDER BY c.name, c.part`, o.cfg.Instance)
	if err != nil {
		return nil, fmt.Errorf("observer: shards: %w", err)
	}
	for rows.Next() {
		var owner, name string
		var part int32
		if err := rows.Scan(&owner, &name, &part); err != nil {
			rows.Close()
			return nil, fmt.Errorf("observer: shards: %w", err)
		}
		s := get(owner)
		s.Partitions = append(s.Partitions, name+"/"+strconv.Itoa(int(part)))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("observer: shards: %w", err)
	}
	// A shard that owns nothing now publishes no channel, but is still
	// listed; one that owned channels is no longer after another owner
	// took every one of them and it left the group.
	if groups, err := o.admin.DescribeGroups(ctx, o.cfg.Group); err == nil {
		if g, ok := groups[o.cfg.Group]; ok && g.Err == nil {
			for _, m := range g.Members {
				if m.InstanceID != nil {
					get(*m.InstanceID).Live = true
				}
			}
		}
	}
	get(o.cfg.Instance).Live = true
	out := make([]Shard, 0, len(byInstance))
	for _, s := range byInstance {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Shard) int { return strings.Compare(a.Instance, b.Instance) })
	return out, nil
}

// Locate says where the records of channel ch are served: here (an
// observer without a group, or the shard reading ch), or at the URL of the
// shard that reads it; "" and false when no shard is known to.
func (o *Observer) Locate(ctx context.Context, ch headers.Channel) (url string, here bool) {
	if o.shard == nil {
		return "", true
	}
	o.mu.Lock()
	assigned := o.w != nil && o.w.chans[ch] != nil && o.w.chans[ch].assigned
	o.mu.Unlock()
	if assigned {
		return "", true
	}
	owner := o.store.ownerOf(ctx, ch)
	if owner == "" || owner == o.cfg.Instance {
		// Nobody else said it reads ch (or this shard did last): what the
		// store holds is the best answer.
		return "", owner == o.cfg.Instance
	}
	members, err := o.store.members(ctx)
	if err != nil {
		return "", false
	}
	return members[owner], false
}
