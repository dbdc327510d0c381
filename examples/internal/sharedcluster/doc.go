// Package sharedcluster holds the test that runs every example with
// --brokers against the real-Kafka tier's broker, as a user would against
// a shared cluster, and checks that no run reads, writes or leaves a topic
// outside its run prefix. Without PARSLEY_TEST_BROKERS it skips.
package sharedcluster
