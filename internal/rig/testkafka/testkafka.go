// Package testkafka starts real Apache Kafka brokers for tests and soaks.
//
// The broker comes from Maven Central through the Maven project in the
// module's testkafka/ directory: Classpath runs `mvn dependency:build-classpath`
// once and caches the result in testkafka/target, and Start formats KRaft
// storage (kafka.tools.StorageTool) and runs kafka.Kafka from that classpath
// as one JVM per node, each node both broker and controller, listening on
// 127.0.0.1 only. Nothing is installed: a JDK and Maven on PATH are all it
// needs.
//
// The JVMs are sized for a small shared machine (a 384 MiB heap, the serial
// collector, the C1 compiler only, two network and I/O threads), and the
// broker config suits tests: a group's first rebalance is not delayed,
// internal topics have few partitions, and groups may use short session
// timeouts. A Cluster can SIGKILL, SIGTERM (a controlled shutdown) and
// restart each node, so soaks can fail a partition leader or a coordinator
// over; Close stops every node and removes the nodes' directories.
package testkafka

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNoJava is returned when java or mvn is not on PATH.
var ErrNoJava = errors.New("testkafka: java and mvn are needed to run a real Kafka broker")

// Config describes a cluster to start.
type Config struct {
	// Nodes is the number of combined broker+controller nodes (default 1).
	Nodes int
	// MinInsyncReplicas is the broker default for min.insync.replicas
	// (default 1; the failover soak uses 2 with three nodes).
	MinInsyncReplicas int
	// Heap is the JVM's -Xmx (default "384m").
	Heap string
	// Java is the java binary (default "java" on PATH).
	Java string
	// Props are extra broker properties, applied last.
	Props map[string]string
	// Dir is where node directories go (default os.TempDir()).
	Dir string
	// SASLSSL adds a SASL_SSL listener to every node beside the plaintext
	// one (which brokers still use among themselves and tests still use
	// by default): TLS with a client certificate required, and SASL
	// PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER (Kafka's
	// unsecured validator). Its keys and authority are made with the
	// JDK's keytool at start, its SCRAM users through the admin API;
	// Cluster.Secure describes it.
	SASLSSL bool
}

// Cluster is a running set of Kafka nodes.
type Cluster struct {
	cfg       Config
	classpath string
	root      string
	nodes     []*node
	clusterID string

	secure      *Secure // with Config.SASLSSL
	secureFiles *secureFiles

	mu     sync.Mutex
	closed bool
}

type node struct {
	id       int
	port     int // client listener
	ctrlPort int // controller listener
	saslPort int // SASL_SSL listener, with Config.SASLSSL
	dir      string
	props    string // path of server.properties
	logPath  string
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has been waited for
	exitErr  error
}

// Start formats storage for cfg.Nodes nodes, starts them and returns once
// every node serves metadata that lists all of them. On error nothing is
// left running and the directories are gone.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg.Nodes <= 0 {
		cfg.Nodes = 1
	}
	if cfg.MinInsyncReplicas <= 0 {
		cfg.MinInsyncReplicas = 1
	}
	if cfg.MinInsyncReplicas > cfg.Nodes {
		return nil, fmt.Errorf("testkafka: min.insync.replicas %d exceeds %d nodes", cfg.MinInsyncReplicas, cfg.Nodes)
	}
	if cfg.Heap == "" {
		cfg.Heap = "384m"
	}
	if cfg.Java == "" {
		cfg.Java = "java"
	}
	if _, err := exec.LookPath(cfg.Java); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoJava, err)
	}
	cp, err := Classpath(ctx)
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp(cfg.Dir, "parsley-kafka-")
	if err != nil {
		return nil, fmt.Errorf("testkafka: %w", err)
	}
	c := &Cluster{cfg: cfg, classpath: cp, root: root, clusterID: newClusterID()}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	perNode := 2
	if cfg.SASLSSL {
		perNode = 3
	}
	ports, err := freePorts(perNode * cfg.Nodes)
	if err != nil {
		return nil, err
	}
	for i := range cfg.Nodes {
		n := &node{id: i + 1, port: ports[perNode*i], ctrlPort: ports[perNode*i+1], dir: filepath.Join(root, "node"+strconv.Itoa(i+1))}
		if cfg.SASLSSL {
			n.saslPort = ports[perNode*i+2]
		}
		n.props = filepath.Join(n.dir, "server.properties")
		n.logPath = filepath.Join(n.dir, "broker.log")
		c.nodes = append(c.nodes, n)
	}
	if err := os.WriteFile(filepath.Join(root, "log4j2.properties"), []byte(log4j2Config), 0o644); err != nil {
		return nil, fmt.Errorf("testkafka: %w", err)
	}
	if cfg.SASLSSL {
		if c.secureFiles, c.secure, err = c.makeSecure(ctx); err != nil {
			return nil, err
		}
		for _, n := range c.nodes {
			c.secure.Addrs = append(c.secure.Addrs, "127.0.0.1:"+strconv.Itoa(n.saslPort))
		}
	}
	for _, n := range c.nodes {
		if err := os.MkdirAll(filepath.Join(n.dir, "data"), 0o755); err != nil {
			return nil, fmt.Errorf("testkafka: %w", err)
		}
		if err := os.WriteFile(n.props, []byte(c.serverProperties(n)), 0o644); err != nil {
			return nil, fmt.Errorf("testkafka: %w", err)
		}
	}
	// Formatting runs one short JVM per node; they are independent, so run
	// them side by side.
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = c.format(ctx, n) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, n := range c.nodes {
		if err := c.launch(n); err != nil {
			return nil, err
		}
	}
	if err := c.WaitServing(ctx); err != nil {
		return nil, err
	}
	if cfg.SASLSSL {
		if err := c.addSCRAMUsers(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Addrs returns every node's client listener, usable as seed brokers.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.addr()
	}
	return out
}

// NodeIDs returns the nodes' broker IDs, in the order Kill and Restart
// number them (node i has ID i+1).
func (c *Cluster) NodeIDs() []int32 {
	out := make([]int32, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = int32(n.id)
	}
	return out
}

func (n *node) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

func (c *Cluster) node(id int32) (*node, error) {
	for _, n := range c.nodes {
		if int32(n.id) == id {
			return n, nil
		}
	}
	return nil, fmt.Errorf("testkafka: no node with broker ID %d", id)
}

// Kill sends SIGKILL to the node with broker ID id and waits until it is
// gone: no shutdown, no controlled leadership move, exactly a crash.
func (c *Cluster) Kill(id int32) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	return n.kill()
}

// Stop sends SIGTERM to the node with broker ID id and waits until it has
// exited: a controlled shutdown, in which the broker asks the controller to
// move its leaderships away before it closes its listeners, as in a rolling
// restart. If the node has not exited when ctx ends, Stop kills it and
// returns ctx's error.
func (c *Cluster) Stop(ctx context.Context, id int32) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	if !n.running() {
		return nil
	}
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("testkafka: stop node %d: %w", n.id, err)
	}
	select {
	case <-n.exited:
		return nil
	case <-ctx.Done():
		if err := n.kill(); err != nil {
			return err
		}
		return fmt.Errorf("testkafka: node %d did not shut down: %w", n.id, ctx.Err())
	}
}

// Restart starts the node with broker ID id again on the same ports and
// data, after Kill or Stop, and waits until the cluster lists it again.
func (c *Cluster) Restart(ctx context.Context, id int32) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	if n.running() {
		return fmt.Errorf("testkafka: node %d is running; kill it first", id)
	}
	if err := c.launch(n); err != nil {
		return err
	}
	return c.WaitServing(ctx)
}

// Running reports whether the node with broker ID id is running.
func (c *Cluster) Running(id int32) bool {
	n, err := c.node(id)
	return err == nil && n.running()
}

// WaitServing returns once every running node answers metadata requests
// and the metadata lists every running node as a broker. An error says
// which node did not come up, with the tail of its log.
func (c *Cluster) WaitServing(ctx context.Context) error {
	var want []*node
	for _, n := range c.nodes {
		if n.running() {
			want = append(want, n)
		}
	}
	if len(want) == 0 {
		return errors.New("testkafka: no node is running")
	}
	for _, n := range want {
		if err := c.waitNode(ctx, n, want); err != nil {
			return err
		}
	}
	return nil
}

// waitNode polls n until its metadata lists every node in want. It fails
// at once if any node in want exits, and on timeout names the nodes still
// missing with the tails of their logs.
func (c *Cluster) waitNode(ctx context.Context, n *node, want []*node) error {
	missing := want
	var last error
	for {
		for _, m := range want {
			if !m.running() {
				return fmt.Errorf("testkafka: node %d exited while starting: %v\n%s", m.id, m.exitErr, m.logTail())
			}
		}
		brokers, err := brokersSeenBy(ctx, n.addr())
		if err == nil {
			missing = missingBrokers(brokers, want)
			if len(missing) == 0 {
				return nil
			}
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			var b strings.Builder
			fmt.Fprintf(&b, "testkafka: node %d not serving all %d nodes: %v (last error: %v)", n.id, len(want), ctx.Err(), last)
			for _, m := range missing {
				fmt.Fprintf(&b, "\n--- node %d (missing from metadata) log tail:\n%s", m.id, m.logTail())
			}
			return errors.New(b.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// brokersSeenBy asks the node at addr which brokers it knows. Each poll
// uses a fresh client: a client whose first dial was refused (the JVM not
// yet listening) was seen to keep failing long after the node served.
func brokersSeenBy(ctx context.Context, addr string) (kadm.BrokerDetails, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RetryTimeout(time.Second))
	if err != nil {
		return nil, fmt.Errorf("testkafka: client for %s: %w", addr, err)
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).BrokerMetadata(rctx)
	return md.Brokers, err
}

func missingBrokers(have kadm.BrokerDetails, want []*node) []*node {
	seen := make(map[int32]bool, len(have))
	for _, b := range have {
		seen[b.NodeID] = true
	}
	var missing []*node
	for _, n := range want {
		if !seen[int32(n.id)] {
			missing = append(missing, n)
		}
	}
	return missing
}

// Close kills every node and removes the cluster's directories. It is safe
// to call more than once. Tests stop brokers with SIGKILL rather than a
// controlled shutdown: the data is thrown away, and a controlled shutdown
// of the last nodes waits for quorum that is already gone.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for _, n := range c.nodes {
		if err := n.kill(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(c.root); err != nil {
		errs = append(errs, fmt.Errorf("testkafka: remove %s: %w", c.root, err))
	}
	return errors.Join(errs...)
}

// LogTail returns the last lines of the log of the node with broker ID id,
// for a failure message.
func (c *Cluster) LogTail(id int32) string {
	n, err := c.node(id)
	if err != nil {
		return err.Error()
	}
	return n.logTail()
}

func (c *Cluster) serverProperties(n *node) string {
	var voters []string
	for _, m := range c.nodes {
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", m.id, m.ctrlPort))
	}
	rf := min(c.cfg.Nodes, 3)
	listeners := []string{fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", n.port), fmt.Sprintf("CONTROLLER://127.0.0.1:%d", n.ctrlPort)}
	advertised := []string{"PLAINTEXT://" + n.addr()}
	protocols := []string{"PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"}
	if c.cfg.SASLSSL {
		sasl := fmt.Sprintf("SASL_SSL://127.0.0.1:%d", n.saslPort)
		listeners, advertised, protocols = append(listeners, sasl), append(advertised, sasl), append(protocols, "SASL_SSL:SASL_SSL")
	}
	props := [][2]string{
		{"process.roles", "broker,controller"},
		{"node.id", strconv.Itoa(n.id)},
		{"controller.quorum.voters", strings.Join(voters, ",")},
		{"listeners", listenerList(listeners...)},
		{"advertised.listeners", listenerList(advertised...)},
		{"controller.listener.names", "CONTROLLER"},
		{"inter.broker.listener.name", "PLAINTEXT"},
		{"listener.security.protocol.map", listenerList(protocols...)},
		{"log.dirs", filepath.Join(n.dir, "data")},
		// kfake does not create topics on first use either; a test that
		// forgets a topic should fail the same way on both.
		{"auto.create.topics.enable", "false"},
		{"num.partitions", "1"},
		{"default.replication.factor", strconv.Itoa(rf)},
		{"min.insync.replicas", strconv.Itoa(c.cfg.MinInsyncReplicas)},
		{"offsets.topic.replication.factor", strconv.Itoa(rf)},
		{"offsets.topic.num.partitions", "5"},
		{"transaction.state.log.replication.factor", strconv.Itoa(rf)},
		{"transaction.state.log.min.isr", strconv.Itoa(min(c.cfg.MinInsyncReplicas, rf))},
		{"transaction.state.log.num.partitions", "5"},
		{"share.coordinator.state.topic.replication.factor", strconv.Itoa(rf)},
		{"share.coordinator.state.topic.min.isr", strconv.Itoa(min(c.cfg.MinInsyncReplicas, rf))},
		// A group's first join completes at once rather than after 3s,
		// and tests may use session timeouts as short as kfake's.
		{"group.initial.rebalance.delay.ms", "0"},
		{"group.min.session.timeout.ms", "100"},
		// Two shared cores: keep the thread count small.
		{"num.network.threads", "2"},
		{"num.io.threads", "2"},
		{"background.threads", "2"},
		{"num.replica.fetchers", "1"},
		{"num.recovery.threads.per.data.dir", "1"},
		{"log.cleaner.threads", "1"},
		{"log.cleaner.dedupe.buffer.size", strconv.Itoa(8 << 20)},
		// Small segments keep the disk use of a soak modest.
		{"log.segment.bytes", strconv.Itoa(16 << 20)},
	}
	if c.cfg.SASLSSL {
		props = append(props, c.secureProperties()...)
	}
	var b strings.Builder
	for _, kv := range props {
		if _, override := c.cfg.Props[kv[0]]; override {
			continue
		}
		fmt.Fprintf(&b, "%s=%s\n", kv[0], kv[1])
	}
	for k, v := range c.cfg.Props {
		fmt.Fprintf(&b, "%s=%s\n", k, v)
	}
	return b.String()
}

func (c *Cluster) jvmArgs(mainClass string, heap string, args ...string) []string {
	return append([]string{
		"-Xms64m", "-Xmx" + heap,
		"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
		"-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + filepath.Join(c.root, "log4j2.properties"),
		"-cp", c.classpath, mainClass,
	}, args...)
}

func (c *Cluster) format(ctx context.Context, n *node) error {
	cmd := exec.CommandContext(ctx, c.cfg.Java, c.jvmArgs("kafka.tools.StorageTool", "128m",
		"format", "--cluster-id", c.clusterID, "--config", n.props, "--ignore-formatted")...)
	setProcAttrs(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("testkafka: format storage of node %d: %w\n%s", n.id, err, out)
	}
	return nil
}

func (c *Cluster) launch(n *node) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("testkafka: cluster closed")
	}
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testkafka: %w", err)
	}
	cmd := exec.Command(c.cfg.Java, c.jvmArgs("kafka.Kafka", c.cfg.Heap, n.props)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	setProcAttrs(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("testkafka: start node %d: %w", n.id, err)
	}
	exited := make(chan struct{})
	n.cmd, n.exited = cmd, exited
	// The waiter owns the process: it reaps it, records why it ended and
	// closes its log, whether the node crashed or was killed.
	go func() {
		err := cmd.Wait()
		logf.Close()
		n.exitErr = err
		close(exited)
	}()
	return nil
}

func (n *node) running() bool {
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

func (n *node) kill() error {
	if n.cmd == nil {
		return nil
	}
	if n.running() {
		if err := n.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("testkafka: kill node %d: %w", n.id, err)
		}
	}
	<-n.exited
	return nil
}

func (n *node) logTail() string {
	f, err := os.Open(n.logPath)
	if err != nil {
		return "(no broker log: " + err.Error() + ")"
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 40 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// newClusterID returns a KRaft cluster ID: 16 random bytes, base64url
// without padding, as `kafka-storage random-uuid` prints. Like Kafka's
// Uuid.randomUuid it never starts with '-': kafka-storage's argument parser
// would read such an ID as an option (one run in 64 failed to format its
// storage with "argument --cluster-id/-t: expected one argument").
func newClusterID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}

// freePorts asks the kernel for n distinct free loopback ports. Holding
// every listener open until all are chosen keeps them distinct; a port can
// still be taken by another process before the broker binds it, which
// shows as a node that exits while starting.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testkafka: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// The broker logs warnings and errors, plus the lines saying it started
// and registered with the controller, to its node's broker.log.
const log4j2Config = `status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
logger.lifecycle.name = org.apache.kafka.server.BrokerLifecycleManager
logger.lifecycle.level = info
`
