package testkafka

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// needJVM skips a test that starts brokers unless PARSLEY_TESTKAFKA=1:
// JVMs are slow to start on a small machine, so the default `go test
// ./...` leaves them to the real-Kafka tier in .ci/run.
func needJVM(t *testing.T) {
	t.Helper()
	if os.Getenv("PARSLEY_TESTKAFKA") != "1" {
		t.Skip("starts Kafka JVMs; set PARSLEY_TESTKAFKA=1 (the real-Kafka tier of .ci/run does)")
	}
	for _, bin := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("PARSLEY_TESTKAFKA=1 but %s is missing: %v", bin, err)
		}
	}
}

func TestConfigRejectsMoreInsyncReplicasThanNodes(t *testing.T) {
	_, err := Start(context.Background(), Config{Nodes: 1, MinInsyncReplicas: 2})
	if err == nil || !strings.Contains(err.Error(), "min.insync.replicas 2 exceeds 1 nodes") {
		t.Fatalf("err = %v, want min.insync.replicas rejected", err)
	}
}

func TestNoJavaIsATypedError(t *testing.T) {
	_, err := Start(context.Background(), Config{Java: "/nonexistent/java"})
	if !errors.Is(err, ErrNoJava) {
		t.Fatalf("err = %v, want ErrNoJava", err)
	}
}

func TestServerPropertiesNameEveryVoterAndOverride(t *testing.T) {
	c := &Cluster{cfg: Config{Nodes: 3, MinInsyncReplicas: 2, Props: map[string]string{"num.io.threads": "3"}}}
	for i := range 3 {
		c.nodes = append(c.nodes, &node{id: i + 1, port: 9000 + i, ctrlPort: 9100 + i, dir: "/d"})
	}
	p := c.serverProperties(c.nodes[1])
	for _, want := range []string{
		"node.id=2\n",
		"controller.quorum.voters=1@127.0.0.1:9100,2@127.0.0.1:9101,3@127.0.0.1:9102\n",
		"advertised.listeners=PLAINTEXT://127.0.0.1:9001\n",
		"offsets.topic.replication.factor=3\n",
		"transaction.state.log.min.isr=2\n",
		"min.insync.replicas=2\n",
		"group.initial.rebalance.delay.ms=0\n",
		"num.io.threads=3\n",
	} {
		if !strings.Contains(p, want) {
			t.Errorf("server.properties lacks %q:\n%s", want, p)
		}
	}
	if strings.Count(p, "num.io.threads=") != 1 {
		t.Errorf("override of num.io.threads written next to the default:\n%s", p)
	}
}

func TestFreePortsAreDistinct(t *testing.T) {
	ps, err := freePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ps {
		if seen[p] || p == 0 {
			t.Fatalf("ports %v repeat or are zero", ps)
		}
		seen[p] = true
	}
}

// TestKillLeaderThenRestart runs three nodes, kills the leader of a
// replicated partition, checks that acks=all writes continue on the new
// leader and that the killed node rejoins, and that Close removes the
// nodes' directories.
func TestKillLeaderThenRestart(t *testing.T) {
	needJVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Nodes: 3, MinInsyncReplicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	checkLauncher(ctx, t, c) // the vocabulary it shares with the embedded broker
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if r, err := adm.CreateTopic(ctx, 1, 3, nil, "t"); err != nil || r.Err != nil {
		t.Fatalf("create topic: %v %v", err, r.Err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	leader := partitionLeader(ctx, t, adm, "t")
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	if c.Running(leader) {
		t.Fatalf("node %d still running after Kill", leader)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("during")}).FirstErr(); err != nil {
		t.Fatalf("produce with the leader killed: %v", err)
	}
	if now := partitionLeader(ctx, t, adm, "t"); now == leader {
		t.Fatalf("leader still %d after it was killed", now)
	}
	if err := c.Restart(ctx, leader); err != nil {
		t.Fatal(err)
	}
	if !c.Running(leader) {
		t.Fatalf("node %d not running after Restart", leader)
	}
	root := c.root
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s left behind after Close: %v", root, err)
	}
	for _, id := range c.NodeIDs() {
		if c.Running(id) {
			t.Errorf("node %d running after Close", id)
		}
	}
}

func partitionLeader(ctx context.Context, t *testing.T, adm *kadm.Client, topic string) int32 {
	t.Helper()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := md.Topics[topic].Partitions[0]
	if !ok {
		t.Fatalf("no partition 0 of %s in metadata", topic)
	}
	return p.Leader
}

// TestServerPropertiesWithSASLSSL: the option adds the SASL_SSL listener
// beside the plaintext one, which brokers keep among themselves, requires
// client certificates and enables every mechanism; without the option
// nothing of it appears.
func TestServerPropertiesWithSASLSSL(t *testing.T) {
	n := &node{id: 1, port: 9000, ctrlPort: 9100, saslPort: 9200, dir: "/d"}
	c := &Cluster{cfg: Config{Nodes: 1, MinInsyncReplicas: 1, SASLSSL: true}, nodes: []*node{n},
		secureFiles: &secureFiles{keystore: "/s/broker.p12", truststore: "/s/trust.p12", storePass: "pw"},
		secure:      &Secure{Users: map[string]User{"PLAIN": {Name: "p", Password: "q"}}}}
	p := c.serverProperties(n)
	for _, want := range []string{
		"listeners=PLAINTEXT://127.0.0.1:9000,CONTROLLER://127.0.0.1:9100,SASL_SSL://127.0.0.1:9200\n",
		"advertised.listeners=PLAINTEXT://127.0.0.1:9000,SASL_SSL://127.0.0.1:9200\n",
		"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL\n",
		"inter.broker.listener.name=PLAINTEXT\n",
		"sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER\n",
		"listener.name.sasl_ssl.ssl.client.auth=required\n",
		"listener.name.sasl_ssl.ssl.keystore.location=/s/broker.p12\n",
		`listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_p="q";` + "\n",
	} {
		if !strings.Contains(p, want) {
			t.Errorf("server.properties lacks %q:\n%s", want, p)
		}
	}
	c.cfg.SASLSSL = false
	if p := c.serverProperties(n); strings.Contains(p, "SASL") || strings.Contains(p, "ssl.") {
		t.Errorf("without SASLSSL, server.properties mentions SASL or SSL:\n%s", p)
	}
}

// TestUnsecuredJWT: the OAUTHBEARER token is an unsigned JWT with the
// claims Kafka's unsecured validator requires.
func TestUnsecuredJWT(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	parts := strings.Split(unsecuredJWT("parsley", now), ".")
	if len(parts) != 3 || parts[2] != "" {
		t.Fatalf("token %q: want header.claims. with an empty signature", parts)
	}
	for i, want := range []string{`{"alg":"none"}`, `{"exp":1700172800,"iat":1700000000,"sub":"parsley"}`} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil || string(b) != want {
			t.Errorf("part %d = %q (%v), want %s", i, b, err, want)
		}
	}
}

// A cluster ID starting with '-' is read by kafka-storage as an option, so
// the node fails to format. One random ID in 64 starts so; 2,000 of them
// without the guard would hold one with near certainty.
func TestClusterIDNeverLooksLikeAnOption(t *testing.T) {
	for range 2000 {
		id := newClusterID()
		if strings.HasPrefix(id, "-") {
			t.Fatalf("cluster ID %q starts with '-': kafka-storage format would take it for an option", id)
		}
		if len(id) != 22 {
			t.Fatalf("cluster ID %q: %d characters, want 22 (16 bytes, base64url)", id, len(id))
		}
	}
}

// The launcher's Maven file sits beside its Go code: launcherDir finds it
// from this package's directory and from the module's root, as go test and
// the command run.
func TestLauncherPomBesideTheLauncher(t *testing.T) {
	t.Setenv("PARSLEY_TESTKAFKA_DIR", "")
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, wd := range []string{here, filepath.Join(here, "..", "..", "..")} {
		t.Chdir(wd)
		dir, err := launcherDir()
		if err != nil {
			t.Fatalf("from %s: %v", wd, err)
		}
		if dir != here {
			t.Fatalf("from %s: launcher directory %s, want this package's, %s", wd, dir, here)
		}
		if _, err := os.Stat(filepath.Join(dir, "pom.xml")); err != nil {
			t.Fatalf("no pom.xml beside the launcher: %v", err)
		}
	}
}
